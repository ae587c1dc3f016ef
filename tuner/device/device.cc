#include "tuner/device/device.h"

#include <algorithm>
#include <cmath>

namespace ktune {
namespace {

double Quantile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

}  // namespace

TimeStats ComputeStats(std::vector<double> samples_ms) {
  TimeStats s;
  if (samples_ms.empty()) return s;
  std::sort(samples_ms.begin(), samples_ms.end());
  const auto n = static_cast<double>(samples_ms.size());
  double sum = 0;
  for (double v : samples_ms) sum += v;
  const double mean = sum / n;
  double sq = 0;
  for (double v : samples_ms) sq += (v - mean) * (v - mean);
  s.samples = static_cast<int>(samples_ms.size());
  s.mean = Millis(mean);
  s.min = Millis(samples_ms.front());
  s.max = Millis(samples_ms.back());
  s.median = Millis(Quantile(samples_ms, 0.5));
  s.q1 = Millis(Quantile(samples_ms, 0.25));
  s.q3 = Millis(Quantile(samples_ms, 0.75));
  s.stddev = Millis(samples_ms.size() > 1 ? std::sqrt(sq / (n - 1)) : 0.0);
  return s;
}

}  // namespace ktune
