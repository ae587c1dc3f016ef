#include "strategies/local.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ktune {

SimulatedAnnealing::SimulatedAnnealing(const Space& space, std::uint64_t seed, Options options)
    : space_(space),
      rng_(seed),
      options_(std::move(options)),
      best_loss_(std::numeric_limits<double>::infinity()),
      temperature_(options_.initial_temperature) {
  for (const Config& c : options_.warm) warm_.push_back(c);
}

std::vector<Config> SimulatedAnnealing::Ask(std::size_t n) {
  std::vector<Config> out;
  TakeWarm(space_, warm_, seen_, n, out);
  const double rate = 1.0 / static_cast<double>(std::max<std::size_t>(1, space_.num_params()));
  while (out.size() < n) {
    std::optional<Config> next;
    if (current_) {
      // A one-parameter move from the current state, valid and unseen.
      for (int attempt = 0; attempt < 30 && !next; ++attempt) {
        Config c = Mutate(space_, rng_, *current_, rate);
        if (space_.IsValid(c) && seen_.count(c) == 0) next = std::move(c);
      }
    }
    if (!next) next = RandomUnseen(space_, rng_, seen_);
    if (!next) break;
    seen_.insert(*next);
    out.push_back(*std::move(next));
  }
  return out;
}

void SimulatedAnnealing::Tell(const Config& config, const Outcome& outcome) {
  seen_.insert(config);
  const double loss = LossOf(outcome);
  if (std::isfinite(loss)) scale_.Note(loss);
  if (loss < best_loss_) {
    best_loss_ = loss;
    since_best_ = 0;
  } else {
    ++since_best_;
  }
  if (!current_) {
    if (std::isfinite(loss)) {
      current_ = config;
      current_loss_ = loss;
    }
  } else if (std::isfinite(loss)) {
    // Uphill moves are judged on the scale of the losses' logarithm (a
    // relative change), whatever the speed.
    const double delta = scale_(loss) - scale_(current_loss_);
    if (delta <= 0 || rng_.UniformDouble() < std::exp(-delta / std::max(temperature_, 1e-6))) {
      current_ = config;
      current_loss_ = loss;
    }
  }
  temperature_ *= options_.cooling;
  if (since_best_ >= options_.patience) {
    // Restart: forget the state, reheat; the next random pick starts over.
    current_.reset();
    temperature_ = options_.initial_temperature;
    since_best_ = 0;
  }
}

LocalSearch::LocalSearch(const Space& space, std::uint64_t seed, Options options)
    : space_(space),
      rng_(seed),
      options_(std::move(options)),
      best_loss_(std::numeric_limits<double>::infinity()) {
  for (const Config& c : options_.warm) warm_.push_back(c);
}

void LocalSearch::Refill() {
  moves_.clear();
  if (!current_) return;
  // Adjacent values first (smooth spaces reward them), then the rest of
  // the one-parameter moves, each group in random order.
  std::vector<Config> adjacent = space_.Neighbours(*current_, Space::Neighbourhood::kAdjacent);
  std::vector<Config> hamming = space_.Neighbours(*current_, Space::Neighbourhood::kHamming);
  auto shuffle = [&](std::vector<Config>& v) {
    for (std::size_t i = v.size(); i > 1; --i) {
      std::swap(v[i - 1], v[static_cast<std::size_t>(rng_.Uniform(i))]);
    }
  };
  shuffle(adjacent);
  shuffle(hamming);
  ConfigSet queued;
  for (auto* group : {&adjacent, &hamming}) {
    for (Config& c : *group) {
      if (seen_.count(c) == 0 && queued.insert(c).second) moves_.push_back(std::move(c));
    }
  }
}

std::vector<Config> LocalSearch::Ask(std::size_t n) {
  std::vector<Config> out;
  TakeWarm(space_, warm_, seen_, n, out);
  while (out.size() < n) {
    while (!moves_.empty() && seen_.count(moves_.front()) > 0) moves_.pop_front();
    std::optional<Config> next;
    if (!moves_.empty()) {
      next = std::move(moves_.front());
      moves_.pop_front();
    } else if (start_ || !current_) {
      // Waiting for a start's outcome, or no start yet: a random one.
      next = RandomUnseen(space_, rng_, seen_);
      if (next && !start_) start_ = next;
    } else {
      // A local optimum: perturb the best so far.
      Config c = *best_;
      for (int k = 0; k < options_.perturbation; ++k) {
        c = Mutate(space_, rng_, std::move(c),
                   1.0 / static_cast<double>(std::max<std::size_t>(1, space_.num_params())));
      }
      next = Repair(space_, rng_, c, seen_);
      start_ = next;
    }
    if (!next) break;
    seen_.insert(*next);
    out.push_back(*std::move(next));
  }
  return out;
}

void LocalSearch::Tell(const Config& config, const Outcome& outcome) {
  seen_.insert(config);
  const double loss = LossOf(outcome);
  if (loss < best_loss_) {
    best_loss_ = loss;
    best_ = config;
  }
  const bool is_start = start_ && *start_ == config;
  if (is_start) start_.reset();
  if (!current_ || is_start || loss < current_loss_) {
    if (std::isfinite(loss) || !current_) {
      // First improvement: move, and look around the new place.
      if (std::isfinite(loss)) {
        current_ = config;
        current_loss_ = loss;
        Refill();
      }
    }
  }
  // With every neighbour of current_ tried, the next Ask perturbs the best.
}

}  // namespace ktune
