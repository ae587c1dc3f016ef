#include "strategies/random_search.h"

#include <utility>

namespace ktune {

RandomSearch::RandomSearch(const Space& space, std::uint64_t seed) : space_(space), rng_(seed) {
  const SpaceCount count = space.Count();
  if (count.exact && count.count <= kListLimit) {
    listed_ = true;
    pool_.reserve(static_cast<std::size_t>(count.count));
    Space::Enumerator e = space.Enumerate();
    Config c;
    while (e.Next(&c)) pool_.push_back(c);
  }
}

std::vector<Config> RandomSearch::Ask(std::size_t n) {
  std::vector<Config> out;
  if (listed_) {
    while (out.size() < n && next_ < pool_.size()) {
      const std::size_t j = next_ + static_cast<std::size_t>(rng_.Uniform(pool_.size() - next_));
      std::swap(pool_[next_], pool_[j]);
      out.push_back(pool_[next_++]);
    }
    return out;
  }
  // Large space: repeats are rare; give up only after many in a row.
  int repeats = 0;
  while (out.size() < n && !exhausted_) {
    std::optional<Config> c = space_.Sample(rng_);
    if (!c) {
      exhausted_ = true;
      break;
    }
    if (seen_.insert(*c).second) {
      out.push_back(*std::move(c));
      repeats = 0;
    } else if (++repeats > 10000) {
      exhausted_ = true;
    }
  }
  return out;
}

}  // namespace ktune
