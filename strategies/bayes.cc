#include "strategies/bayes.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace ktune {
namespace {

// Configurations listed for exhaustive acquisition when there are at most
// this many valid ones.
constexpr std::uint64_t kListLimit = 200000;
// Work bound for one round of predictions: observations^2 x candidates.
constexpr double kPredictionBudget = 4e7;
constexpr double kExplore = 0.01;   // EI and PI margin (standardised units)
constexpr double kKappa = 2.0;      // LCB width
constexpr double kHedgeRate = 1.0;  // how fast the hedge trusts a winner

double NormalPdf(double z) { return 0.3989422804014327 * std::exp(-0.5 * z * z); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// The inverse of NormalCdf (Acklam's rational approximation, refined by one
// Newton step).
double NormalQuantile(double p) {
  static constexpr double kA[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                  -2.759285104469687e+02, 1.383577518672690e+02,
                                  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double kB[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                  -1.556989798598866e+02, 6.680131188771972e+01,
                                  -1.328068155288572e+01};
  static constexpr double kC[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                  -2.400758277161838e+00, -2.549732539343734e+00,
                                  4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double kD[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                  2.445134137142996e+00, 3.754408661907416e+00};
  p = std::clamp(p, 1e-12, 1 - 1e-12);
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((kC[0] * q + kC[1]) * q + kC[2]) * q + kC[3]) * q + kC[4]) * q + kC[5]) /
        ((((kD[0] * q + kD[1]) * q + kD[2]) * q + kD[3]) * q + 1);
  } else if (p <= 1 - 0.02425) {
    const double q = p - 0.5, r = q * q;
    x = (((((kA[0] * r + kA[1]) * r + kA[2]) * r + kA[3]) * r + kA[4]) * r + kA[5]) * q /
        (((((kB[0] * r + kB[1]) * r + kB[2]) * r + kB[3]) * r + kB[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((kC[0] * q + kC[1]) * q + kC[2]) * q + kC[3]) * q + kC[4]) * q + kC[5]) /
        ((((kD[0] * q + kD[1]) * q + kD[2]) * q + kD[3]) * q + 1);
  }
  const double e = NormalCdf(x) - p;
  return x - e * std::sqrt(2 * M_PI) * std::exp(0.5 * x * x);
}

// Optimiser iterations for refitting hyperparameters on `size`
// observations, last fitted on `fitted_on` (0: never): a full fit first,
// then short ones while the data are few or have grown by a fifth, else
// none (the fit changes little between). Updates `fitted_on`.
constexpr std::size_t kMaxPriorFailures = 150;
// The most observations either model is conditioned on (see ModelRows):
// fitting costs their cube and each prediction their square, so a long run
// (thousands of evaluations in minutes on a large space) keeps its time per
// proposal bounded. Above every recorded space's long budget (at most 280
// evaluations), so scores there are unchanged.
constexpr std::size_t kMaxModelRows = 300;
// Random draws a batch's initial pick is chosen from (see SpreadPick).
constexpr int kSpreadDraws = 30;
// Uniform draws the centre pick is chosen from when the space is not listed.
constexpr int kCentreDraws = 2000;
// Hill-climbing steps refining a pick from a sampled candidate set.
constexpr int kRefineSteps = 8;

int RefitIterations(std::size_t size, std::size_t& fitted_on) {
  int iterations = 0;
  if (fitted_on == 0) {
    iterations = 60;
  } else if (size < 25 || size * 5 >= fitted_on * 6) {
    iterations = 25;
  }
  if (iterations > 0) fitted_on = size;
  return iterations;
}

}  // namespace

BayesianOptimization::BayesianOptimization(const Space& space, std::uint64_t seed,
                                           BayesOptions options)
    : space_(space),
      encoder_(space),
      rng_(seed),
      options_(std::move(options)),
      gp_(std::max<std::size_t>(1, encoder_.dims())),
      feasibility_(std::max<std::size_t>(1, encoder_.dims())) {
  initial_ = std::max(1, options_.initial);
  if (options_.input_warp) {
    std::vector<Eigen::Index> dims;
    for (std::size_t c : encoder_.NumericCoordinates())
      dims.push_back(static_cast<Eigen::Index>(c));
    gp_.WarpInputs(dims);
  }
  trust_radius_ = std::max(1, options_.trust_start);
  for (const Config& c : options_.warm) warm_.push_back(c);
  for (const auto& [c, o] : options_.prior) {
    if (!o.ok()) prior_failures_.push_back(Observation{encoder_.Encode(c), 0, false});
  }
  // The feasibility model costs cubic time in its data: a seeded sample of
  // the prior failures is enough to mark where configurations fail.
  if (prior_failures_.size() > kMaxPriorFailures) {
    for (std::size_t i = 0; i < kMaxPriorFailures; ++i) {
      const std::size_t j = i + static_cast<std::size_t>(rng_.Uniform(prior_failures_.size() - i));
      std::swap(prior_failures_[i], prior_failures_[j]);
    }
    prior_failures_.resize(kMaxPriorFailures);
  }
  const SpaceCount count = space_.Count();
  if (count.exact && count.count <= kListLimit) {
    Space::Enumerator e = space_.Enumerate();
    Config c;
    while (e.Next(&c)) all_.push_back(c);
    unseen_.resize(all_.size());
    for (std::size_t i = 0; i < all_.size(); ++i) unseen_[i] = static_cast<std::uint32_t>(i);
    all_seen_.assign(all_.size(), 0);
    all_index_.reserve(all_.size());
    for (std::size_t i = 0; i < all_.size(); ++i) {
      all_index_.emplace(all_[i], static_cast<std::uint32_t>(i));
    }
  }
}

std::optional<Config> BayesianOptimization::RandomUnseen() {
  if (!all_.empty() || space_.Count().exact) {
    while (!unseen_.empty()) {
      const std::size_t k = static_cast<std::size_t>(rng_.Uniform(unseen_.size()));
      const Config& c = all_[unseen_[k]];
      std::swap(unseen_[k], unseen_.back());
      if (seen_.count(c) == 0) {
        Config out = c;
        unseen_.pop_back();
        return out;
      }
      unseen_.pop_back();
    }
    if (!all_.empty()) return std::nullopt;
  }
  for (int attempt = 0; attempt < 10000; ++attempt) {
    std::optional<Config> c = space_.Sample(rng_);
    if (!c) return std::nullopt;
    if (seen_.count(*c) == 0) return c;
  }
  return std::nullopt;
}

std::optional<Config> BayesianOptimization::CentrePick() {
  std::vector<double> x(encoder_.dims());
  std::optional<Config> pick;
  double nearest = std::numeric_limits<double>::infinity();
  std::uint64_t ties = 0;
  auto consider = [&](const Config& c) {
    if (seen_.count(c) != 0) return;
    encoder_.Encode(c, x.data());
    double d2 = 0;
    for (double v : x) d2 += (v - 0.5) * (v - 0.5);
    if (d2 < nearest - 1e-12) {
      nearest = d2;
      ties = 0;
    }
    // Each of the `ties` configurations at the nearest distance is kept
    // with probability 1/ties: a uniform choice among them.
    if (d2 <= nearest + 1e-12 && rng_.Uniform(++ties) == 0) pick = c;
  };
  if (!all_.empty()) {
    for (const Config& c : all_) consider(c);
  } else {
    for (int draw = 0; draw < kCentreDraws; ++draw) {
      std::optional<Config> c = space_.Sample(rng_);
      if (!c) break;
      consider(*c);
    }
  }
  return pick ? pick : RandomUnseen();
}

std::optional<Config> BayesianOptimization::SpreadPick(const std::vector<Config>& batch) {
  if (batch.empty() && pending_.empty() && observed_configs_.empty()) {
    return options_.centre ? CentrePick() : RandomUnseen();
  }
  // The points to keep away from: the batch's and the earlier rounds'
  // still unmeasured (encoded here), and everything measured (encoded when
  // told).
  std::vector<std::vector<double>> batch_points;
  batch_points.reserve(batch.size() + pending_.size());
  for (const Config& c : batch) batch_points.push_back(encoder_.Encode(c));
  for (const Config& c : pending_) batch_points.push_back(encoder_.Encode(c));
  std::vector<double> x(encoder_.dims());
  // The squared distance from `c` to the nearest of those points.
  auto clearance = [&](const Config& c) {
    encoder_.Encode(c, x.data());
    double nearest = std::numeric_limits<double>::infinity();
    auto keep_nearest = [&](const std::vector<double>& t) {
      double d2 = 0;
      for (std::size_t i = 0; i < x.size(); ++i) d2 += (x[i] - t[i]) * (x[i] - t[i]);
      nearest = std::min(nearest, d2);
    };
    for (const std::vector<double>& t : batch_points) keep_nearest(t);
    for (const Observation& o : observations_) keep_nearest(o.x);
    return nearest;
  };
  std::optional<Config> best;
  double best_clearance = -1;
  for (int draw = 0; draw < kSpreadDraws; ++draw) {
    std::optional<Config> c = space_.Sample(rng_);
    if (!c) break;
    if (seen_.count(*c) != 0) continue;
    const double d2 = clearance(*c);
    if (d2 > best_clearance) {
      best_clearance = d2;
      best = std::move(c);
    }
  }
  return best ? best : RandomUnseen();
}

std::vector<const BayesianOptimization::Observation*> BayesianOptimization::ModelRows(
    bool with_failures) const {
  std::vector<const Observation*> used;
  for (const Observation& o : observations_) {
    if (o.ok || with_failures) used.push_back(&o);
  }
  if (used.size() <= kMaxModelRows) return used;
  // Past the bound: the best half of the successes, then the most recent of
  // the rest. The incumbent and its region stay in the model, and so does
  // where the search is now; what was measured long ago elsewhere leaves.
  std::vector<const Observation*> ok;
  for (const Observation* o : used) {
    if (o->ok) ok.push_back(o);
  }
  const std::size_t best = std::min(ok.size(), kMaxModelRows / 2);
  std::partial_sort(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(best), ok.end(),
                    [](const Observation* a, const Observation* b) { return a->loss < b->loss; });
  std::unordered_set<const Observation*> chosen(ok.begin(),
                                                ok.begin() + static_cast<std::ptrdiff_t>(best));
  for (auto it = used.rbegin(); it != used.rend() && chosen.size() < kMaxModelRows; ++it) {
    chosen.insert(*it);
  }
  std::vector<const Observation*> out;
  out.reserve(chosen.size());
  for (const Observation* o : used) {  // in the order they were measured
    if (chosen.count(o) != 0) out.push_back(o);
  }
  return out;
}

void BayesianOptimization::Refit() {
  double worst = -std::numeric_limits<double>::infinity();
  for (const Observation& o : observations_) {
    if (o.ok) worst = std::max(worst, scale_(o.loss));
  }
  // The time model learns from successes; failures are the success
  // model's. They also enter the time model, at the worst successful value
  // (never at huge values that would flatten the rest), when asked
  // (failures_in_objective) or while most of what was measured failed:
  // then failing is the space's main feature, and the success model alone
  // (whose prior is the observed success rate) would draw the search back
  // into it.
  std::size_t n_ok = 0;
  for (const Observation& o : observations_) n_ok += o.ok ? 1 : 0;
  const bool with_failures = options_.failures_in_objective || 2 * n_ok < observations_.size();
  const std::vector<const Observation*> used = ModelRows(with_failures);
  const auto n = static_cast<Eigen::Index>(used.size());
  const auto d = static_cast<Eigen::Index>(std::max<std::size_t>(1, encoder_.dims()));
  Eigen::MatrixXd x(n, d);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Observation& o = *used[static_cast<std::size_t>(i)];
    for (Eigen::Index j = 0; j < d; ++j) {
      x(i, j) = encoder_.dims() == 0 ? 0.0 : o.x[static_cast<std::size_t>(j)];
    }
    y(i) = o.ok ? scale_(o.loss) : worst;
  }
  if (options_.warp) {
    // Output warping: each value replaced by the normal quantile of its
    // rank, so a few very slow configurations cannot flatten the rest.
    std::vector<std::pair<double, Eigen::Index>> order;
    for (Eigen::Index i = 0; i < n; ++i) order.emplace_back(y(i), i);
    std::sort(order.begin(), order.end());
    Eigen::Index i = 0;
    while (i < n) {
      Eigen::Index j = i;
      while (j + 1 < n && order[static_cast<std::size_t>(j + 1)].first ==
                              order[static_cast<std::size_t>(i)].first) {
        ++j;
      }
      const double rank = 0.5 * static_cast<double>(i + j) + 1;  // ties share a rank
      const double q = NormalQuantile(rank / static_cast<double>(n + 1));
      for (Eigen::Index k = i; k <= j; ++k) y(order[static_cast<std::size_t>(k)].second) = q;
      i = j + 1;
    }
  }
  y_mean_ = y.mean();
  const double var = (y.array() - y_mean_).square().sum() / std::max<Eigen::Index>(1, n - 1);
  y_scale_ = var > 1e-12 ? std::sqrt(var) : 1.0;
  const Eigen::VectorXd ys = (y.array() - y_mean_) / y_scale_;
  best_standardised_ = std::numeric_limits<double>::infinity();
  for (Eigen::Index i = 0; i < n; ++i) {
    if (used[static_cast<std::size_t>(i)]->ok)
      best_standardised_ = std::min(best_standardised_, ys(i));
  }
  // A bounded model is refitted as the whole run grows (its rows change).
  const std::size_t grown = static_cast<std::size_t>(n) < kMaxModelRows
                                ? static_cast<std::size_t>(n)
                                : std::max(observations_.size(), kMaxModelRows);
  gp_.set_min_length_scale(LengthFloor(static_cast<std::size_t>(n)));
  gp_.Fit(x, ys, RefitIterations(grown, fitted_on_));

  any_failure_ = n_ok < observations_.size() + prior_failures_.size();
  if (!any_failure_) return;
  // The success model sees everything measured and the prior failures, up
  // to the same bound: then the most recent measurements and at most a
  // quarter of the bound of prior failures.
  std::size_t from_prior = prior_failures_.size();
  std::size_t from_observed = observations_.size();
  if (from_prior + from_observed > kMaxModelRows) {
    from_prior = std::min(from_prior, kMaxModelRows / 4);
    from_observed = std::min(from_observed, kMaxModelRows - from_prior);
  }
  const auto all = static_cast<Eigen::Index>(from_observed + from_prior);
  Eigen::MatrixXd xa(all, d);
  Eigen::VectorXd labels(all);
  Eigen::Index row = 0;
  auto add_rows = [&](const std::vector<Observation>& group, std::size_t first) {
    for (std::size_t i = first; i < group.size(); ++i) {
      const Observation& o = group[i];
      for (Eigen::Index j = 0; j < d; ++j) {
        xa(row, j) = encoder_.dims() == 0 ? 0.0 : o.x[static_cast<std::size_t>(j)];
      }
      labels(row++) = o.ok ? 1.0 : -1.0;
    }
  };
  add_rows(observations_, observations_.size() - from_observed);
  add_rows(prior_failures_, prior_failures_.size() - from_prior);
  const std::size_t f_grown = static_cast<std::size_t>(all) < kMaxModelRows
                                  ? static_cast<std::size_t>(all)
                                  : std::max(observations_.size(), kMaxModelRows);
  const int f_iterations = RefitIterations(f_grown, feasibility_fitted_on_);
  // A constant mean at the observed rate: where nothing is known, the
  // success probability is the rate seen so far.
  label_mean_ = labels.mean();
  feasibility_.set_min_length_scale(LengthFloor(static_cast<std::size_t>(all)));
  feasibility_.Fit(xa, (labels.array() - label_mean_).matrix(), f_iterations);
}

double BayesianOptimization::LengthFloor(std::size_t rows) const {
  return rows < static_cast<std::size_t>(options_.length_floor_below) ? options_.length_floor : 0.0;
}

Eigen::VectorXd BayesianOptimization::Feasibility(const Eigen::MatrixXd& xc) const {
  if (!any_failure_) return Eigen::VectorXd::Ones(xc.rows());
  Eigen::VectorXd mean;
  feasibility_.Predict(xc, &mean, nullptr);  // its mean is all that is used
  // The label's posterior mean mapped to [0, 1]: near 1 among successes,
  // near 0 among failures, a half where nothing is known.
  return ((mean.array() + label_mean_ + 1.0) * 0.5).cwiseMax(1e-3).cwiseMin(1.0).matrix();
}

std::vector<Config> BayesianOptimization::Candidates() {
  std::size_t n_ok = 0;
  for (const Observation& o : observations_) n_ok += o.ok ? 1 : 0;
  n_ok = std::min(n_ok, kMaxModelRows);
  const double per = std::max(1.0, static_cast<double>(n_ok) * static_cast<double>(n_ok));
  const auto affordable = static_cast<std::size_t>(
      std::max<double>(options_.candidates, std::min(20000.0, kPredictionBudget / per)));
  std::vector<Config> out;
  if (!all_.empty()) {
    // Compact the unseen list, then take it all or a uniform subset.
    std::vector<std::uint32_t> keep;
    keep.reserve(unseen_.size());
    for (std::uint32_t i : unseen_) {
      if (all_seen_[i] == 0) keep.push_back(i);
    }
    unseen_ = std::move(keep);
    if (unseen_.size() <= affordable) {
      for (std::uint32_t i : unseen_) out.push_back(all_[i]);
      return out;
    }
    for (std::size_t k = 0; k < affordable; ++k) {
      const std::size_t j = k + static_cast<std::size_t>(rng_.Uniform(unseen_.size() - k));
      std::swap(unseen_[k], unseen_[j]);
      out.push_back(all_[unseen_[k]]);
    }
  } else {
    std::unordered_set<Config, ConfigHash> picked;
    for (std::size_t k = 0; k < affordable * 2 && out.size() < affordable; ++k) {
      std::optional<Config> c = space_.Sample(rng_);
      if (!c) break;
      if (seen_.count(*c) == 0 && picked.insert(*c).second) out.push_back(*std::move(c));
    }
  }
  return out;
}

// The candidates of one round, encoded, with their success probabilities;
// grows as the refinement climbs into neighbours.
struct BayesianOptimization::Pool {
  std::vector<Config> configs;
  ConfigSet in;  // the candidates, when sampled
  Eigen::MatrixXd x;
  Eigen::VectorXd feasible;
  std::vector<bool> taken;
  Eigen::Index d = 1;
};

bool BayesianOptimization::AskWithoutModel(std::size_t n, std::vector<Config>& out) {
  auto take = [&](Config c) {
    MarkSeen(c);
    out.push_back(std::move(c));
  };
  TakeWarm(space_, warm_, seen_, n, out);
  for (const Config& c : out) MarkSeen(c);
  std::size_t n_ok = 0;
  for (const Observation& o : observations_) n_ok += o.ok ? 1 : 0;
  while (out.size() < n &&
         (observations_.size() + out.size() < static_cast<std::size_t>(initial_) || n_ok < 2)) {
    std::optional<Config> c = SpreadPick(out);
    if (!c) return true;
    take(*std::move(c));
  }
  while (out.size() < n && options_.random_every > 0 &&
         (proposals_ + out.size() + 1) % static_cast<std::size_t>(options_.random_every) == 0) {
    std::optional<Config> c = RandomUnseen();
    if (!c) break;
    take(*std::move(c));
  }
  if (out.size() >= n) {
    proposals_ += out.size();
    return true;
  }
  return false;
}

void BayesianOptimization::EncodeRows(Pool& pool, Eigen::Index from) const {
  std::vector<double> buf(static_cast<std::size_t>(pool.d));
  for (Eigen::Index i = from; i < pool.x.rows() && encoder_.dims() > 0; ++i) {
    encoder_.Encode(pool.configs[static_cast<std::size_t>(i)], buf.data());
    for (Eigen::Index j = 0; j < pool.d; ++j) pool.x(i, j) = buf[static_cast<std::size_t>(j)];
  }
}

bool BayesianOptimization::FillPool(Pool& pool) {
  pool.configs = Candidates();
  if (pool.configs.empty()) return false;
  const bool sampled = all_.empty() || pool.configs.size() < unseen_.size();
  // Neighbours of the best few, for large spaces.
  if (sampled) {
    pool.in.insert(pool.configs.begin(), pool.configs.end());
    std::vector<std::pair<double, std::size_t>> order;
    for (std::size_t i = 0; i < observations_.size(); ++i) {
      if (observations_[i].ok) order.emplace_back(observations_[i].loss, i);
    }
    std::sort(order.begin(), order.end());
    for (std::size_t k = 0; k < order.size() && k < 5; ++k) {
      for (Config& nb :
           space_.Neighbours(observed_configs_[order[k].second], Space::Neighbourhood::kHamming)) {
        if (seen_.count(nb) == 0 && pool.in.insert(nb).second)
          pool.configs.push_back(std::move(nb));
      }
    }
  }
  NarrowToTrustRegion(pool);
  EncodePool(pool);
  return sampled;
}

void BayesianOptimization::EncodePool(Pool& pool) const {
  const auto m = static_cast<Eigen::Index>(pool.configs.size());
  pool.d = static_cast<Eigen::Index>(std::max<std::size_t>(1, encoder_.dims()));
  pool.x.resize(m, pool.d);
  pool.x.setZero();
  EncodeRows(pool, 0);
}

void BayesianOptimization::LearnFromNominees(Eigen::Index d) {
  if (pending_nominees_.empty()) return;
  Eigen::MatrixXd xn(static_cast<Eigen::Index>(pending_nominees_.size()), d);
  for (std::size_t i = 0; i < pending_nominees_.size(); ++i) {
    for (Eigen::Index j = 0; j < d; ++j) {
      xn(static_cast<Eigen::Index>(i), j) =
          pending_nominees_[i].second[static_cast<std::size_t>(j)];
    }
  }
  Eigen::VectorXd mu;
  gp_.Predict(xn, &mu, nullptr);
  for (std::size_t i = 0; i < pending_nominees_.size() && i < 3; ++i) {
    gains_[i] -= mu(static_cast<Eigen::Index>(i));
  }
  pending_nominees_.clear();
}

void BayesianOptimization::Acquisitions(double mean, double variance, double p,
                                        double acq[3]) const {
  // Expected improvement, probability of improvement, and the lower
  // confidence bound as a utility (how far it reaches below the best).
  const double best_y = best_standardised_;
  const double s = std::sqrt(variance);
  const double z = (best_y - mean - kExplore) / s;
  acq[0] = ((best_y - mean - kExplore) * NormalCdf(z) + s * NormalPdf(z)) * p;
  acq[1] = NormalCdf(z) * p;
  acq[2] = std::max(0.0, best_y - (mean - kKappa * s)) * p;
}

int BayesianOptimization::ChooseAcquisition() {
  // A softmax of the hedge's gains.
  double g_max = -std::numeric_limits<double>::infinity();
  for (int a = 0; a < 3; ++a) {
    if (options_.acquisitions & (1 << a)) g_max = std::max(g_max, gains_[a]);
  }
  double w[3], w_sum = 0;
  for (int a = 0; a < 3; ++a) {
    w[a] = (options_.acquisitions & (1 << a)) ? std::exp(kHedgeRate * (gains_[a] - g_max)) : 0.0;
    w_sum += w[a];
  }
  double u = rng_.UniformDouble() * w_sum;
  int chosen = 0;
  while (chosen < 2 && u > w[chosen]) u -= w[chosen++];
  return chosen;
}

std::size_t BayesianOptimization::Refine(Pool& pool, std::size_t pick, int chosen, double value,
                                         double* pick_mean) {
  // The sample only approximates the space: climb from the pick through its
  // unseen one-parameter neighbours while the acquisition improves.
  for (int step = 0; step < kRefineSteps; ++step) {
    const auto from = static_cast<Eigen::Index>(pool.configs.size());
    for (Config& nb : space_.Neighbours(pool.configs[pick], Space::Neighbourhood::kHamming)) {
      if (seen_.count(nb) == 0 && pool.in.insert(nb).second) pool.configs.push_back(std::move(nb));
    }
    const auto m = static_cast<Eigen::Index>(pool.configs.size());
    if (m == from) break;
    pool.x.conservativeResize(m, pool.d);
    EncodeRows(pool, from);
    pool.feasible.conservativeResize(m);
    pool.feasible.tail(m - from) = Feasibility(pool.x.bottomRows(m - from));
    pool.taken.resize(static_cast<std::size_t>(m), false);
    Eigen::VectorXd mu_n, var_n;
    gp_.Predict(pool.x.bottomRows(m - from), &mu_n, &var_n);
    std::size_t better = pick;
    for (Eigen::Index i = 0; i < m - from; ++i) {
      double acq[3];
      Acquisitions(mu_n(i), var_n(i), pool.feasible(from + i), acq);
      if (acq[chosen] > value) {
        value = acq[chosen];
        better = static_cast<std::size_t>(from + i);
        *pick_mean = mu_n(i);
      }
    }
    if (better == pick) break;
    pick = better;
  }
  return pick;
}

bool BayesianOptimization::FillPolishPool(Pool& pool) {
  if (options_.polish <= 0 || !incumbent_ ||
      observations_.size() < improved_at_ + static_cast<std::size_t>(options_.polish)) {
    return false;
  }
  if (options_.polish_limit > 0 && polished_ >= options_.polish_limit) return false;
  // The incumbent's unmeasured neighbours only: once they are measured the
  // global search resumes (polishing runners-up too kept runs in a local
  // optimum's region for their whole budget).
  ConfigSet in;
  const std::vector<Config> first = space_.Neighbours(*incumbent_, Space::Neighbourhood::kHamming);
  for (const Config& nb : first) {
    if (seen_.count(nb) == 0 && in.insert(nb).second) pool.configs.push_back(nb);
  }
  // Radius 2: also what two changes reach (a needle beside a runner-up).
  for (std::size_t i = 0; options_.polish_radius >= 2 && i < first.size(); ++i) {
    for (Config& nb2 : space_.Neighbours(first[i], Space::Neighbourhood::kHamming)) {
      if (nb2 != *incumbent_ && seen_.count(nb2) == 0 && in.insert(nb2).second) {
        pool.configs.push_back(std::move(nb2));
      }
    }
  }
  if (pool.configs.empty()) return false;
  EncodePool(pool);
  return true;
}

void BayesianOptimization::NarrowToTrustRegion(Pool& pool) {
  if (options_.trust <= 0 || !incumbent_) return;
  const int params = static_cast<int>(space_.num_params());
  trust_radius_ = std::min(trust_radius_, params);
  if (observations_.size() >= trust_since_ + static_cast<std::size_t>(options_.trust)) {
    trust_since_ = observations_.size();
    if (--trust_radius_ < 1) trust_radius_ = params;  // start again everywhere
  }
  if (trust_radius_ >= params) return;
  auto changes = [&](const Config& c) {
    int d = 0;
    for (std::size_t i = 0; i < c.index.size(); ++i) d += c.index[i] != incumbent_->index[i];
    return d;
  };
  std::vector<Config> kept;
  for (Config& c : pool.configs) {
    if (changes(c) <= trust_radius_) kept.push_back(std::move(c));
  }
  if (kept.empty()) return;  // pool.configs was moved from only where kept
  pool.configs = std::move(kept);
  if (!pool.in.empty()) {  // a sampled pool: Refine looks here
    pool.in.clear();
    pool.in.insert(pool.configs.begin(), pool.configs.end());
  }
}

std::vector<Config> BayesianOptimization::Ask(std::size_t n) {
  std::vector<Config> out;
  if (AskWithoutModel(n, out)) {
    pending_.insert(pending_.end(), out.begin(), out.end());
    return out;
  }
  Refit();
  Pool pool;
  const bool polishing = FillPolishPool(pool);
  const bool sampled = !polishing && FillPool(pool);
  if (polishing) polished_ += static_cast<int>(n);
  if (pool.configs.empty()) return out;
  LearnFromNominees(pool.d);
  pool.feasible = Feasibility(pool.x);
  pool.taken.assign(pool.configs.size(), false);
  while (out.size() < n) {
    const auto m = static_cast<Eigen::Index>(pool.configs.size());
    Eigen::VectorXd mu, var;
    gp_.Predict(pool.x, &mu, &var);
    int nominee[3] = {-1, -1, -1};
    double top[3] = {-std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()};
    for (Eigen::Index i = 0; i < m; ++i) {
      if (pool.taken[static_cast<std::size_t>(i)]) continue;
      double acq[3];
      Acquisitions(mu(i), var(i), pool.feasible(i), acq);
      for (int a = 0; a < 3; ++a) {
        if (acq[a] > top[a]) {
          top[a] = acq[a];
          nominee[a] = static_cast<int>(i);
        }
      }
    }
    if (nominee[0] < 0) break;
    const int chosen = ChooseAcquisition();
    auto pick = static_cast<std::size_t>(nominee[chosen]);
    double pick_mean = mu(static_cast<Eigen::Index>(pick));
    if (sampled) {
      pick = Refine(pool, pick, chosen, top[chosen], &pick_mean);
      nominee[chosen] = static_cast<int>(pick);
    }
    if (out.empty() && pending_nominees_.empty()) {
      for (int a = 0; a < 3; ++a) {
        std::vector<double> enc(static_cast<std::size_t>(pool.d));
        for (Eigen::Index j = 0; j < pool.d; ++j) {
          enc[static_cast<std::size_t>(j)] = pool.x(nominee[a], j);
        }
        pending_nominees_.emplace_back(pool.configs[static_cast<std::size_t>(nominee[a])], enc);
      }
    }
    pool.taken[pick] = true;
    MarkSeen(pool.configs[pick]);
    out.push_back(pool.configs[pick]);
    if (out.size() < n) {
      // Kriging believer: pretend the pick came out at its mean.
      gp_.Add(pool.x.row(static_cast<Eigen::Index>(pick)).transpose(), pick_mean);
    }
  }
  proposals_ += out.size();
  pending_.insert(pending_.end(), out.begin(), out.end());
  return out;
}

void BayesianOptimization::Tell(const Config& config, const Outcome& outcome) {
  if (auto it = std::find(pending_.begin(), pending_.end(), config); it != pending_.end()) {
    pending_.erase(it);
  }
  Observation o;
  o.x = encoder_.Encode(config);
  // Any finite loss is a success: a maximised objective's are negative.
  o.ok = outcome.ok() && std::isfinite(outcome.loss);
  if (o.ok) {
    o.loss = outcome.loss;
    scale_.Note(o.loss);
  }
  if (o.ok && (!incumbent_ || o.loss < incumbent_loss_)) {
    incumbent_ = config;
    incumbent_loss_ = o.loss;
    improved_at_ = observations_.size() + 1;
    polished_ = 0;
    trust_since_ = observations_.size() + 1;
    ++trust_radius_;
  }
  observations_.push_back(std::move(o));
  observed_configs_.push_back(config);
  MarkSeen(config);
}

void BayesianOptimization::MarkSeen(const Config& config) {
  seen_.insert(config);
  if (auto it = all_index_.find(config); it != all_index_.end()) all_seen_[it->second] = 1;
}

}  // namespace ktune
