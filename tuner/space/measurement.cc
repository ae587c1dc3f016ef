#include "tuner/space/measurement.h"

#include <algorithm>
#include <cmath>

namespace ktune {

double Quantile(std::span<const double> sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

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

double RelativeStandardError(std::span<const double> samples) {
  if (samples.size() < 2) return INFINITY;
  double sum = 0;
  for (double x : samples) sum += x;
  const auto n = static_cast<double>(samples.size());
  const double mean = sum / n;
  double sq = 0;
  for (double x : samples) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / (n - 1));
  return mean > 0 ? sd / std::sqrt(n) / mean : INFINITY;
}

v1::CandidateStatus CandidateStatusToProto(CandidateStatus status) {
  // The enums list the statuses in the same order, the API's from 1.
  return static_cast<v1::CandidateStatus>(static_cast<int>(status) + 1);
}

CandidateStatus CandidateStatusFromProto(v1::CandidateStatus status) {
  const int i = static_cast<int>(status) - 1;
  if (i < 0 || i >= kNumCandidateStatuses) return CandidateStatus::kLaunchError;
  return static_cast<CandidateStatus>(i);
}

}  // namespace ktune
