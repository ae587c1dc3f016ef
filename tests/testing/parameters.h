// Parameters for tests: integer ranges.
#ifndef KTUNE_TESTS_TESTING_PARAMETERS_H_
#define KTUNE_TESTS_TESTING_PARAMETERS_H_

#include <cstdint>
#include <string>

#include "tuner/space/space.h"

namespace ktune::testing {

// Parameter `name` with the integers lo, lo + 1, ..., hi.
inline Parameter Range(const std::string& name, std::int64_t lo, std::int64_t hi) {
  Parameter p;
  p.name = name;
  for (std::int64_t v = lo; v <= hi; ++v) p.values.emplace_back(v);
  return p;
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_PARAMETERS_H_
