#include "strategies/encoding.h"

#include <algorithm>
#include <cmath>
#include <variant>

namespace ktune {

Encoder::Encoder(const Space& space) {
  for (std::size_t p = 0; p < space.num_params(); ++p) {
    const Parameter& param = space.param(p);
    const std::size_t m = param.values.size();
    if (m <= 1) continue;
    Column col;
    col.param = p;
    col.numeric = param.type == ValueType::kInt || param.type == ValueType::kFloat;
    col.first = dims_;
    if (col.numeric) {
      std::vector<double> v(m);
      for (std::size_t i = 0; i < m; ++i) {
        v[i] = param.type == ValueType::kInt
                   ? static_cast<double>(std::get<std::int64_t>(param.values[i]))
                   : std::get<double>(param.values[i]);
      }
      const double lo = *std::min_element(v.begin(), v.end());
      const double hi = *std::max_element(v.begin(), v.end());
      const bool log_scale = lo > 0 && hi / lo >= 8;
      const double a = log_scale ? std::log2(lo) : lo;
      const double b = log_scale ? std::log2(hi) : hi;
      col.value.resize(m);
      for (std::size_t i = 0; i < m; ++i) {
        const double x = log_scale ? std::log2(v[i]) : v[i];
        col.value[i] = b > a ? (x - a) / (b - a) : 0.0;
      }
      dims_ += 1;
    } else if (m == 2) {
      col.value = {0.0, 1.0};
      dims_ += 1;
    } else {
      col.one_hot = true;
      dims_ += m;
    }
    columns_.push_back(std::move(col));
  }
}

void Encoder::Encode(const Config& config, double* out) const {
  std::fill(out, out + dims_, 0.0);
  for (const Column& c : columns_) {
    const std::uint32_t v = config.index[c.param];
    if (c.one_hot) {
      out[c.first + v] = 1.0;
    } else {
      out[c.first] = c.value[v];
    }
  }
}

std::vector<double> Encoder::Encode(const Config& config) const {
  std::vector<double> out(dims_);
  Encode(config, out.data());
  return out;
}

std::vector<std::size_t> Encoder::NumericCoordinates() const {
  std::vector<std::size_t> out;
  for (const Column& c : columns_) {
    if (c.numeric && c.value.size() >= 3) out.push_back(c.first);
  }
  return out;
}

}  // namespace ktune
