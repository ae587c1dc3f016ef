// Configurations as points in [0, 1]^d for models of the search space.
#ifndef KTUNE_STRATEGIES_ENCODING_H_
#define KTUNE_STRATEGIES_ENCODING_H_

#include <cstddef>
#include <vector>

#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

// Numbers become one coordinate: log2-scaled when the values are positive
// and span a factor of 8 or more (block sizes, tile sizes), linear
// otherwise, normalised to [0, 1] over the parameter's range. Two-valued
// parameters become one coordinate (0 or 1); booleans and strings with more
// values are one-hot. Parameters with a single value are left out.
// Immutable; thread-compatible.
class Encoder {
 public:
  explicit Encoder(const Space& space);

  std::size_t dims() const { return dims_; }
  // Writes the encoding of `config` into `out` (dims() values).
  void Encode(const Config& config, double* out) const;
  std::vector<double> Encode(const Config& config) const;
  // The coordinates of numeric parameters with three values or more (the
  // ones a model may warp).
  std::vector<std::size_t> NumericCoordinates() const;

 private:
  struct Column {
    std::size_t param;
    std::size_t first;  // first coordinate
    bool one_hot = false;
    bool numeric = false;
    std::vector<double> value;  // per value index, when not one-hot
  };
  std::vector<Column> columns_;
  std::size_t dims_ = 0;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_ENCODING_H_
