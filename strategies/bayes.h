// Bayesian optimisation over a discrete, constrained space.
//
// A Gaussian process (Matern 5/2, one length scale per dimension, fitted by
// marginal likelihood) models the log of the loss (LossScale: a maximised
// objective's negated values keep their order). Failed configurations
// enter it at the worst successful value (a gentle penalty, never the huge
// times that would flatten the rest), and a second Gaussian process over
// +1/-1 labels estimates the probability that a configuration succeeds,
// prior failures from other jobs included: failures teach the strategy
// where not to look. Each proposal maximises expected improvement,
// probability of improvement or a lower-confidence-bound utility, each
// times the success probability. With more than one enabled (option
// `acquisitions`; by default expected improvement and the confidence
// bound), a hedge chooses among them, rewarding the ones whose picks turn
// out well. Candidates are every
// unevaluated configuration when predicting them all is affordable;
// otherwise a uniform sample plus the neighbours of the best few so far,
// and each pick is refined by hill-climbing through its one-parameter
// neighbours. Batches (Ask(n > 1)) use the kriging believer: each pick is
// added at its predicted mean before the next is chosen. The initial picks
// are spread apart: the first is the configuration nearest the centre of
// the space, each later one the one of a few uniform draws farthest from
// everything picked or measured before it. The time model's numeric axes
// are warped by fitted distribution functions (BayesOptions::input_warp);
// while a model has few points its length scales are kept from shrinking
// (BayesOptions::length_floor).
// When the
// best stops improving, the picks polish its neighbourhood for a while
// (BayesOptions::polish); the global search keeps to a trust region around
// the best that narrows as it stalls (BayesOptions::trust).
#ifndef KTUNE_STRATEGIES_BAYES_H_
#define KTUNE_STRATEGIES_BAYES_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "strategies/common.h"
#include "strategies/encoding.h"
#include "strategies/gp.h"
#include "tuner/base/rng.h"
#include "tuner/space/config.h"
#include "tuner/space/space.h"

namespace ktune {

struct BayesOptions {
  // Configurations picked before the model (see SpreadPick and `centre`).
  // 6 with the first at the centre: over 14 recorded spaces and 360 seeds
  // the short budget's score rose by 0.024 (in four sets of seeds of five),
  // the long one held; on the large SGEMM recording a small cost
  // (docs/benchmarks.md).
  int initial = 6;
  int candidates = 400;  // sampled candidates when the space is too large to scan
  // Every n-th proposal is uniform random (0: never), a hedge against a
  // model that is confidently wrong.
  int random_every = 0;
  // Acquisitions the hedge chooses among: bit 0 EI, bit 1 PI, bit 2 LCB.
  // EI and LCB by default (over 14 recorded spaces and 30 repeats the hedge
  // and LCB alone both scored 0.29 / 0.76 at the short / long budget); PI
  // exploits too greedily.
  int acquisitions = 5;
  // Model the ranks of the times (through normal quantiles) rather than
  // their logs: robust when a few configurations are very slow.
  bool warp = false;
  // Failed configurations enter the time model, at the worst time seen:
  // always (true), or only while most of what was measured failed (false,
  // the default). Otherwise the success model alone keeps the search away
  // from where configurations fail, and the time model is not taught that
  // a region is slow because part of it fails (see README for the scores).
  bool failures_in_objective = false;
  // After this many evaluations without a new best (0: never), the picks
  // come from the unmeasured configurations within polish_radius parameter
  // changes of the best so far (by the same acquisition), until
  // polish_limit of them were measured, none is left, or a pick improves
  // on it: a search that stalls near the optimum measures the optimum's
  // neighbourhood rather than wandering off.
  // 4, with polish_radius 2 and polish_limit 8: over 14 recorded spaces and
  // 60 seeds the short-budget score rose by 0.016 and the long one held
  // (docs/benchmarks.md).
  int polish = 4;
  // At most this many polishing picks for one incumbent (0: until its
  // neighbourhood is measured); then the global search resumes until a
  // new best is found.
  int polish_limit = 8;
  // Polishing looks this many parameter changes away from the best (1 or
  // 2).
  int polish_radius = 2;
  // A trust region for the global search (0: none): its picks come from
  // the configurations within a radius of parameter changes from the best
  // so far. The radius starts at trust_start, grows by one with each new
  // best, shrinks by one after each `trust` evaluations without one, and
  // below one change starts again at the whole space. A search that stalls
  // narrows onto the best's region, then looks everywhere again. A sampled
  // pick's refinement may climb out of it.
  // 4 and 3: over 14 recorded spaces the long-budget score rose by 0.021
  // and 0.018 in two sets of 30 seeds, the short one held
  // (docs/benchmarks.md).
  int trust = 4;
  int trust_start = 3;
  // The time model warps each numeric parameter's axis (three values or
  // more) through a distribution function fitted with its length scales
  // (GaussianProcess::WarpInputs), so that where a parameter's effect is
  // concentrated (at its large values, say) its values stand further
  // apart. On the large SGEMM recording it beat random search in 85 of 90
  // seeds at 60 s, where the search without it did in 79; over 14 recorded
  // spaces it held both budgets (docs/benchmarks.md).
  bool input_warp = true;
  // The first initial pick is the configuration nearest the centre of the
  // encoded space (false: a uniform draw); the spread picks after it go
  // out toward the ends of the axes. The ends (the smallest and largest
  // blocks and tiles) are where a kernel's configurations fail: in the 14
  // recorded spaces none of the most central ones fails, where up to 23 %
  // of all do, and the model gets a point in the middle of every axis to
  // measure the corners against.
  bool centre = true;
  // While a model is fitted on fewer than length_floor_below rows, none of
  // its length scales is below length_floor (of the unit cube's side; 0
  // leaves only GaussianProcess's own bound). From a handful of points a
  // parameter whose effect happens to turn between two of them gets a short
  // scale, and the picks after keep to what those points said. 0.5 below
  // 25: over 14 recorded spaces the short budget's score rose by 0.012 on
  // average in nine sets of seeds (the convolutions on RTX GPUs most, the
  // MI250X one fell in four of the five full sets), the long one held, as
  // did the large SGEMM recording (docs/benchmarks.md).
  double length_floor = 0.5;
  int length_floor_below = 25;
  std::vector<Config> warm;  // configurations to try first (e.g. best elsewhere)
  // Outcomes known from elsewhere (another device or problem): their
  // failures inform the success model from the start.
  std::vector<std::pair<Config, Outcome>> prior;
};

// Not thread-safe. Deterministic for a seed.
class BayesianOptimization final : public Strategy {
 public:
  BayesianOptimization(const Space& space, std::uint64_t seed, BayesOptions options);
  std::vector<Config> Ask(std::size_t n) override;
  void Tell(const Config& config, const Outcome& outcome) override;

 private:
  struct Observation {
    std::vector<double> x;
    double loss = 0;  // ok only; the model sees scale_(loss)
    bool ok = false;
  };

  struct Pool;

  // The picks that need no model: the warm start's, the initial spread
  // ones, and every random_every-th. True when they fill the batch.
  bool AskWithoutModel(std::size_t n, std::vector<Config>& out);
  // A round's candidates, within the trust region, encoded; true when
  // sampled from a large space.
  bool FillPool(Pool& pool);
  // While polishing (see BayesOptions::polish): the incumbent's unmeasured
  // neighbours within polish_radius changes as the round's candidates;
  // false when it is not time to or there are none.
  bool FillPolishPool(Pool& pool);
  // Keeps the pool's configurations (not yet encoded) within the trust
  // region (see BayesOptions::trust), unless none is left there; updates
  // its radius.
  void NarrowToTrustRegion(Pool& pool);
  // Marks `config` proposed or measured: in seen_, and in all_seen_ when
  // listed (so a round's candidates need no hashing of the whole list).
  void MarkSeen(const Config& config);
  void EncodeRows(Pool& pool, Eigen::Index from) const;
  // Sizes the pool's matrix to its configurations and encodes them all.
  void EncodePool(Pool& pool) const;
  // The hedge learns from the last round's nominees.
  void LearnFromNominees(Eigen::Index d);
  // EI, PI and the LCB utility at a predicted mean, variance and success
  // probability.
  void Acquisitions(double mean, double variance, double p, double acq[3]) const;
  int ChooseAcquisition();
  // Climbs from `pick` (acquisition `chosen` at `value`) through unseen
  // neighbours; the better pick, its predicted mean in *pick_mean.
  std::size_t Refine(Pool& pool, std::size_t pick, int chosen, double value, double* pick_mean);
  std::optional<Config> RandomUnseen();
  // A random initial pick for a batch that already holds `batch`: of a few
  // uniform draws, the one farthest (in the encoding) from the nearest of
  // the batch's picks, the earlier rounds' not yet told and everything
  // measured. The first picks are measured before the model can say
  // anything, so they should cover the space: far apart, which also
  // reaches toward its corners (over 14 recorded spaces and 290 seeds the
  // short-budget score rose from 0.394 to 0.421, the long one held;
  // docs/benchmarks.md). With nothing picked or measured yet, there is
  // nothing to keep away from: the pick is CentrePick's (or a uniform
  // draw, without BayesOptions::centre).
  std::optional<Config> SpreadPick(const std::vector<Config>& batch);
  // The unmeasured configuration nearest the centre of the encoding (each
  // coordinate 0.5), ties broken at random: of every configuration when
  // listed, else of kCentreDraws uniform draws.
  std::optional<Config> CentrePick();
  // The observations the time model is conditioned on: every success (and
  // failure, `with_failures`), or past a bound a subset (see bayes.cc).
  std::vector<const Observation*> ModelRows(bool with_failures) const;
  void Refit();
  std::vector<Config> Candidates();
  // The least length scale for a model fitted on `rows` observations
  // (BayesOptions::length_floor).
  double LengthFloor(std::size_t rows) const;
  // Success probabilities at the rows of `xc`.
  Eigen::VectorXd Feasibility(const Eigen::MatrixXd& xc) const;

  const Space& space_;
  Encoder encoder_;
  Rng rng_;
  BayesOptions options_;
  ConfigSet seen_;
  std::deque<Config> warm_;
  std::vector<Observation> observations_;
  std::vector<Config> observed_configs_;  // parallel to observations_
  std::vector<Config> pending_;           // proposed, not yet told, in order
  std::vector<Observation> prior_failures_;
  std::vector<Config> all_;            // every valid configuration, when few enough
  std::vector<std::uint32_t> unseen_;  // indices into all_
  std::unordered_map<Config, std::uint32_t, ConfigHash> all_index_;  // all_'s, by configuration
  std::vector<char> all_seen_;                                       // parallel to all_: in seen_
  GaussianProcess gp_;
  // The success model: a second process on +1 (ok) / -1 (failed) labels
  // over every observation, with its own length scales (failing regions
  // have their own shape); unused until something fails.
  GaussianProcess feasibility_;
  bool any_failure_ = false;
  double label_mean_ = 0;
  std::size_t fitted_on_ = 0;
  std::size_t feasibility_fitted_on_ = 0;
  LossScale scale_;  // the time model's scale for the losses
  double y_mean_ = 0, y_scale_ = 1;
  double best_standardised_ = 0;  // the best observation in model units
  int initial_ = 0;
  std::size_t proposals_ = 0;
  // The best success so far (the incumbent) and when it was measured, in
  // observations.
  std::optional<Config> incumbent_;
  double incumbent_loss_ = 0;
  std::size_t improved_at_ = 0;
  int polished_ = 0;  // polishing picks since the incumbent was found
  // The trust region: its radius in parameter changes (clamped to the
  // number of parameters when used), and the observations when it last
  // changed.
  int trust_radius_ = 0;
  std::size_t trust_since_ = 0;
  // Hedge over acquisitions: EI, PI, LCB.
  double gains_[3] = {0, 0, 0};
  std::vector<std::pair<Config, std::vector<double>>> pending_nominees_;
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_BAYES_H_
