#include "strategies/common.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace ktune {

std::optional<Config> RandomUnseen(const Space& space, Rng& rng, const ConfigSet& seen) {
  for (int attempt = 0; attempt < 2000; ++attempt) {
    std::optional<Config> c = space.Sample(rng);
    if (!c) return std::nullopt;
    if (seen.count(*c) == 0) return c;
  }
  // Nearly exhausted: walk the whole space for what is left.
  std::vector<Config> left;
  Space::Enumerator e = space.Enumerate();
  Config c;
  while (e.Next(&c)) {
    if (seen.count(c) == 0) left.push_back(c);
  }
  if (left.empty()) return std::nullopt;
  return left[static_cast<std::size_t>(rng.Uniform(left.size()))];
}

Config Mutate(const Space& space, Rng& rng, Config config, double rate) {
  const std::size_t n = space.num_params();
  bool changed = false;
  auto change = [&](std::size_t p) {
    const auto dom = static_cast<std::uint32_t>(space.param(p).values.size());
    if (dom < 2) return;
    std::uint32_t& v = config.index[p];
    if (rng.Uniform(2) == 0) {
      // Adjacent value, staying in range.
      if (v == 0) {
        v = 1;
      } else if (v + 1 == dom) {
        v = dom - 2;
      } else {
        v = rng.Uniform(2) == 0 ? v - 1 : v + 1;
      }
    } else {
      const auto other = static_cast<std::uint32_t>(rng.Uniform(dom - 1));
      v = other >= v ? other + 1 : other;
    }
    changed = true;
  };
  for (std::size_t p = 0; p < n; ++p) {
    if (rng.UniformDouble() < rate) change(p);
  }
  for (int tries = 0; !changed && tries < 64; ++tries) {
    change(static_cast<std::size_t>(rng.Uniform(n)));
  }
  return config;
}

std::optional<Config> Repair(const Space& space, Rng& rng, const Config& config,
                             const ConfigSet& seen) {
  if (space.IsValid(config) && seen.count(config) == 0) return config;
  const double rate = 1.0 / static_cast<double>(std::max<std::size_t>(1, space.num_params()));
  // The mutation rate steps up after every ten attempts.
  for (int attempt = 0; attempt < 50; ++attempt) {
    Config c = Mutate(space, rng, config, rate * (1 + std::floor(attempt / 10.0)));
    if (space.IsValid(c) && seen.count(c) == 0) return c;
  }
  return RandomUnseen(space, rng, seen);
}

void TakeWarm(const Space& space, std::deque<Config>& warm, ConfigSet& seen, std::size_t n,
              std::vector<Config>& out) {
  while (out.size() < n && !warm.empty()) {
    Config c = std::move(warm.front());
    warm.pop_front();
    if (space.IsValid(c) && seen.insert(c).second) out.push_back(std::move(c));
  }
}

double LossOf(const Outcome& outcome) {
  return outcome.ok() && std::isfinite(outcome.loss) ? outcome.loss
                                                     : std::numeric_limits<double>::infinity();
}

void LossScale::Note(double loss) {
  const int sign = loss > 0 ? 1 : (loss < 0 ? -1 : 0);
  if (sign == 0 || (sign_ != 0 && sign != sign_)) linear_ = true;
  if (sign_ == 0) sign_ = sign;
}

double LossScale::operator()(double loss) const {
  if (linear_) return loss;
  return loss > 0 ? std::log(loss) : -std::log(-loss);
}

}  // namespace ktune
