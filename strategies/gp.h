// A Gaussian-process regression model: Matern 5/2 kernel with one length
// scale per input dimension, signal and noise variances, and optionally
// warped inputs (WarpInputs), fitted by maximising the marginal likelihood
// (with weak log-normal priors).
#ifndef KTUNE_STRATEGIES_GP_H_
#define KTUNE_STRATEGIES_GP_H_

#include <Eigen/Dense>
#include <algorithm>
#include <cstddef>
#include <vector>

namespace ktune {

// Value type; not thread-safe.
class GaussianProcess {
 public:
  explicit GaussianProcess(std::size_t dims);

  // Conditions on inputs `x` (n x dims) and targets `y` (n; best standardised).
  // With `iterations` > 0 the hyperparameters are first optimised that many
  // steps, starting from the current ones. REQUIRES: n >= 1.
  void Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, int iterations);

  // Posterior mean and variance at the rows of `xs` (m x dims). Without
  // `variance` (nullptr) only the mean: O(n m) rather than O(n^2 m).
  void Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean, Eigen::VectorXd* variance) const;

  // Adds one observation without refitting the hyperparameters (a rank-one
  // extension of the factorisation): for fantasised batch proposals.
  void Add(const Eigen::VectorXd& x, double y);

  // Warps the given input dimensions (whose values lie in [0, 1]) through a
  // Kumaraswamy distribution function, 1 - (1 - x^a)^b, with a and b per
  // dimension fitted beside the length scales (log-normal priors centred
  // on the identity, a = b = 1): an axis whose effect is concentrated
  // near one end is stretched there. Call before the first Fit.
  void WarpInputs(const std::vector<Eigen::Index>& dims);

  // The smallest length scale the fit may choose (0.01 unless set; values
  // below it are raised to it): a floor of a large part of the unit cube
  // keeps a handful of points from fitting an effect that turns within a
  // fraction of an axis. Applies to the next Fit that optimises.
  void set_min_length_scale(double v) { min_length_ = std::max(v, kMinLengthScale); }
  static constexpr double kMinLengthScale = 0.01;

  std::size_t size() const { return static_cast<std::size_t>(x_.rows()); }
  const Eigen::VectorXd& length_scales() const { return length_; }
  double noise_variance() const { return noise_; }
  double signal_variance() const { return signal_; }
  // Log marginal likelihood of the current fit.
  double log_likelihood() const { return lml_; }

 private:
  // `x` with the warped dimensions warped.
  Eigen::MatrixXd Warped(const Eigen::MatrixXd& x) const;
  // Kernel matrix between rows of ua and ub (warped inputs) at the current
  // hyperparameters.
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& ua, const Eigen::MatrixXd& ub) const;
  void Factorise();
  // alpha_ and lml_ from chol_ and y_.
  void Solve();
  // Keeps the factor's leading `kept` rows (still valid for x_'s first
  // `kept` rows) and factorises the rest against them; false if that fails
  // numerically (the caller then factorises from scratch).
  bool Extend(Eigen::Index kept);
  void Optimise(int iterations);

  std::size_t dims_;
  Eigen::VectorXd length_;  // length scales
  double min_length_ = kMinLengthScale;
  double signal_ = 1.0;
  double noise_ = 1e-2;
  Eigen::MatrixXd x_;
  Eigen::MatrixXd u_;  // x_ warped
  Eigen::VectorXd y_;
  Eigen::MatrixXd chol_;   // lower Cholesky factor of K + noise I
  Eigen::VectorXd alpha_;  // (K + noise I)^-1 y
  double lml_ = 0;
  std::vector<Eigen::Index> warped_;  // warped dimensions
  Eigen::VectorXd warp_a_, warp_b_;   // their Kumaraswamy parameters
};

}  // namespace ktune

#endif  // KTUNE_STRATEGIES_GP_H_
