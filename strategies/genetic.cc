#include "strategies/genetic.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune {

GeneticAlgorithm::GeneticAlgorithm(const Space& space, std::uint64_t seed, GeneticOptions options)
    : space_(space), rng_(seed), options_(std::move(options)) {
  options_.population = std::max(2, options_.population);
  if (options_.mutation <= 0) {
    options_.mutation = 1.0 / static_cast<double>(std::max<std::size_t>(1, space_.num_params()));
  }
  for (const Config& c : options_.warm) {
    if (space_.IsValid(c) && seen_.insert(c).second) queue_.push_back(c);
  }
}

const Config& GeneticAlgorithm::Select() {
  // Tournament: the best of a few random members of the pool.
  std::size_t best = static_cast<std::size_t>(rng_.Uniform(pool_.size()));
  for (int k = 1; k < options_.tournament; ++k) {
    const auto other = static_cast<std::size_t>(rng_.Uniform(pool_.size()));
    if (pool_[other].first < pool_[best].first) best = other;
  }
  return pool_[best].second;
}

void GeneticAlgorithm::Breed() {
  const auto size = static_cast<std::size_t>(options_.population);
  // The breeding pool: the elite of everything so far plus the best of the
  // recent individuals, twice a population in all.
  std::vector<std::pair<double, Config>> all = evaluated_;
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  pool_.clear();
  for (std::size_t i = 0; i < all.size() && pool_.size() < 2 * size; ++i) {
    if (std::isfinite(all[i].first)) pool_.push_back(all[i]);
  }
  for (std::size_t k = 0; k < size; ++k) {
    std::optional<Config> child;
    if (pool_.size() < 2) {
      child = RandomUnseen(space_, rng_, seen_);
    } else {
      const Config& a = Select();
      const Config& b = Select();
      Config c = a;
      for (std::size_t p = 0; p < c.index.size(); ++p) {
        if (rng_.Uniform(2) == 1) c.index[p] = b.index[p];
      }
      if (rng_.UniformDouble() < 0.9 || c == a || c == b) {
        c = Mutate(space_, rng_, std::move(c), options_.mutation);
      }
      child = Repair(space_, rng_, c, seen_);
    }
    if (!child) {
      exhausted_ = true;
      return;
    }
    seen_.insert(*child);
    queue_.push_back(*std::move(child));
  }
}

std::vector<Config> GeneticAlgorithm::Ask(std::size_t n) {
  std::vector<Config> out;
  while (out.size() < n) {
    if (queue_.empty()) {
      if (exhausted_) break;
      Breed();
      if (queue_.empty()) break;
    }
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return out;
}

void GeneticAlgorithm::Tell(const Config& config, const Outcome& outcome) {
  seen_.insert(config);
  evaluated_.emplace_back(outcome.ok() ? outcome.loss : std::numeric_limits<double>::infinity(),
                          config);
}

}  // namespace ktune
