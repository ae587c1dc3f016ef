#include "strategies/gp.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ktune {
namespace {

constexpr double kSqrt5 = 2.2360679774997896;
constexpr double kMinNoise = 1e-6;
constexpr double kMaxNoise = 1.0;

// Matern 5/2 at distance r, with unit variance.
double Matern(double r) { return (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r); }

// Weak priors keep the fit sane with few observations: length scales near
// half the unit cube, a signal variance near the (standardised) data's.
constexpr double kLengthPriorMean = -0.7;  // log(0.5)
constexpr double kLengthPriorVar = 1.5;
constexpr double kSignalPriorVar = 1.0;
// Log variance of the input warps' priors (log a and log b, centred at 0:
// no warp). Over 14 recorded spaces a variance of 0.25 scored as 0.05 on
// average but cost the lowest space more (docs/benchmarks.md).
constexpr double kWarpPriorVar = 0.05;

// The Kumaraswamy distribution function on [0, 1].
double Kumaraswamy(double x, double a, double b) {
  x = std::clamp(x, 0.0, 1.0);
  return 1 - std::pow(1 - std::pow(x, a), b);
}

}  // namespace

GaussianProcess::GaussianProcess(std::size_t dims)
    : dims_(dims), length_(Eigen::VectorXd::Constant(static_cast<Eigen::Index>(dims), 0.5)) {}

void GaussianProcess::WarpInputs(const std::vector<Eigen::Index>& dims) {
  warped_ = dims;
  warp_a_ = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(dims.size()));
  warp_b_ = warp_a_;
}

Eigen::MatrixXd GaussianProcess::Warped(const Eigen::MatrixXd& x) const {
  if (warped_.empty()) return x;
  Eigen::MatrixXd u = x;
  for (std::size_t w = 0; w < warped_.size(); ++w) {
    const auto ww = static_cast<Eigen::Index>(w);
    u.col(warped_[w]) = x.col(warped_[w]).unaryExpr([&](double v) {
      return Kumaraswamy(v, warp_a_(ww), warp_b_(ww));
    });
  }
  return u;
}

Eigen::MatrixXd GaussianProcess::Kernel(const Eigen::MatrixXd& ua,
                                        const Eigen::MatrixXd& ub) const {
  const Eigen::ArrayXd inv = length_.array().inverse();
  const Eigen::MatrixXd sa = ua.array().rowwise() * inv.transpose();
  const Eigen::MatrixXd sb = ub.array().rowwise() * inv.transpose();
  // Squared distances through |a|^2 + |b|^2 - 2 a.b.
  const Eigen::VectorXd na = sa.rowwise().squaredNorm();
  const Eigen::VectorXd nb = sb.rowwise().squaredNorm();
  Eigen::MatrixXd k = -2.0 * sa * sb.transpose();
  k.colwise() += na;
  k.rowwise() += nb.transpose();
  return k.unaryExpr([this](double d2) { return signal_ * Matern(std::sqrt(std::max(d2, 0.0))); });
}

void GaussianProcess::Factorise() {
  Eigen::MatrixXd k = Kernel(u_, u_);
  k.diagonal().array() += noise_;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  double jitter = 1e-8;
  while (llt.info() != Eigen::Success && jitter < 1) {
    k.diagonal().array() += jitter;
    llt.compute(k);
    jitter *= 10;
  }
  chol_ = llt.matrixL();
  Solve();
}

void GaussianProcess::Solve() {
  const Eigen::VectorXd z = chol_.triangularView<Eigen::Lower>().solve(y_);
  alpha_ = chol_.transpose().triangularView<Eigen::Upper>().solve(z);
  lml_ = -0.5 * y_.dot(alpha_) - chol_.diagonal().array().log().sum() -
         0.5 * static_cast<double>(y_.size()) * std::log(2 * M_PI);
}

void GaussianProcess::Optimise(int iterations) {
  const Eigen::Index n = x_.rows();
  const auto d = static_cast<Eigen::Index>(dims_);
  const auto nw = static_cast<Eigen::Index>(warped_.size());
  // Parameters: log length scales, log signal, log noise, then each warped
  // dimension's log a and log b. Adam ascent on the log marginal
  // likelihood plus log priors.
  const Eigen::Index np = d + 2 + 2 * nw;
  Eigen::VectorXd theta(np);
  theta.head(d) = length_.array().log();
  theta(d) = std::log(signal_);
  theta(d + 1) = std::log(noise_);
  if (nw > 0) {
    theta.segment(d + 2, nw) = warp_a_.array().log();
    theta.segment(d + 2 + nw, nw) = warp_b_.array().log();
  }
  Eigen::VectorXd m1 = Eigen::VectorXd::Zero(np), m2 = Eigen::VectorXd::Zero(np);
  constexpr double kRate = 0.08, kBeta1 = 0.9, kBeta2 = 0.999;
  // Squared coordinate differences, reused for every gradient (a warped
  // dimension's are recomputed as its warp moves).
  std::vector<Eigen::MatrixXd> diff2(static_cast<std::size_t>(d));
  auto square_differences = [&](const Eigen::VectorXd& col, Eigen::MatrixXd& m) {
    m = col.replicate(1, n) - col.transpose().replicate(n, 1);
    m = m.cwiseAbs2();
  };
  for (Eigen::Index k = 0; k < d; ++k) {
    square_differences(x_.col(k), diff2[static_cast<std::size_t>(k)]);
  }
  Eigen::MatrixXd u(n, nw), du_a(n, nw), du_b(n, nw);
  for (int it = 1; it <= iterations; ++it) {
    length_ = theta.head(d).array().exp();
    signal_ = std::exp(theta(d));
    noise_ = std::clamp(std::exp(theta(d + 1)), kMinNoise, kMaxNoise);
    for (Eigen::Index w = 0; w < nw; ++w) {
      const double a = std::exp(theta(d + 2 + w)), b = std::exp(theta(d + 2 + nw + w));
      warp_a_(w) = a;
      warp_b_(w) = b;
      for (Eigen::Index i = 0; i < n; ++i) {
        const double x = std::clamp(x_(i, warped_[static_cast<std::size_t>(w)]), 0.0, 1.0);
        const double xa = std::pow(x, a);
        const double rest = 1 - xa;
        u(i, w) = 1 - std::pow(rest, b);
        // d/d log a and d/d log b of the warped value.
        du_a(i, w) = x > 0 && rest > 0 ? a * b * std::pow(rest, b - 1) * xa * std::log(x) : 0.0;
        du_b(i, w) = rest > 0 ? -b * std::pow(rest, b) * std::log(rest) : 0.0;
      }
      square_differences(u.col(w),
                         diff2[static_cast<std::size_t>(warped_[static_cast<std::size_t>(w)])]);
    }
    // r and the kernel.
    Eigen::MatrixXd r2 = Eigen::MatrixXd::Zero(n, n);
    for (Eigen::Index k = 0; k < d; ++k) {
      r2 += diff2[static_cast<std::size_t>(k)] / (length_(k) * length_(k));
    }
    const Eigen::MatrixXd r = r2.cwiseSqrt();
    const Eigen::MatrixXd e = (-kSqrt5 * r).array().exp();
    Eigen::MatrixXd k =
        signal_ * ((1 + kSqrt5 * r.array() + 5.0 / 3.0 * r2.array()) * e.array()).matrix();
    // dK/dr-factor: signal * 5/3 (1 + sqrt5 r) e^{-sqrt5 r}.
    const Eigen::MatrixXd g = signal_ * 5.0 / 3.0 * ((1 + kSqrt5 * r.array()) * e.array()).matrix();
    Eigen::MatrixXd kn = k;
    kn.diagonal().array() += noise_;
    Eigen::LLT<Eigen::MatrixXd> llt(kn);
    if (llt.info() != Eigen::Success) break;
    const Eigen::VectorXd alpha = llt.solve(y_);
    const Eigen::MatrixXd inv = llt.solve(Eigen::MatrixXd::Identity(n, n));
    const Eigen::MatrixXd w = alpha * alpha.transpose() - inv;
    Eigen::VectorXd grad(np);
    for (Eigen::Index q = 0; q < d; ++q) {
      const double dq = 0.5 *
                        (w.array() * g.array() * diff2[static_cast<std::size_t>(q)].array()).sum() /
                        (length_(q) * length_(q));
      grad(q) = dq - (theta(q) - kLengthPriorMean) / kLengthPriorVar;
    }
    grad(d) = 0.5 * (w.array() * k.array()).sum() - theta(d) / kSignalPriorVar;
    grad(d + 1) = 0.5 * noise_ * w.trace();
    if (nw > 0) {
      // dK_ij = -g_ij (u_i - u_j)(v_i - v_j) / l^2 for a warp parameter
      // moving u by v; summed against W through H = W o g.
      const Eigen::MatrixXd h = w.cwiseProduct(g);
      const Eigen::VectorXd h1 = h.rowwise().sum();
      auto warp_grad = [&](Eigen::Index wi, const Eigen::MatrixXd& dv) {
        const Eigen::VectorXd uc = u.col(wi), vc = dv.col(wi);
        const double s = 2 * (uc.cwiseProduct(vc)).dot(h1) - 2 * uc.dot(h * vc);
        const double l = length_(warped_[static_cast<std::size_t>(wi)]);
        return -0.5 * s / (l * l);
      };
      for (Eigen::Index wi = 0; wi < nw; ++wi) {
        grad(d + 2 + wi) = warp_grad(wi, du_a) - theta(d + 2 + wi) / kWarpPriorVar;
        grad(d + 2 + nw + wi) = warp_grad(wi, du_b) - theta(d + 2 + nw + wi) / kWarpPriorVar;
      }
    }
    m1 = kBeta1 * m1 + (1 - kBeta1) * grad;
    m2 = kBeta2 * m2 + (1 - kBeta2) * grad.cwiseAbs2();
    const Eigen::VectorXd step = kRate * (m1 / (1 - std::pow(kBeta1, it))).array() /
                                 ((m2 / (1 - std::pow(kBeta2, it))).array().sqrt() + 1e-8);
    theta += step;
    theta.head(d) = theta.head(d).cwiseMax(std::log(min_length_)).cwiseMin(std::log(100.0));
    theta(d) = std::clamp(theta(d), std::log(1e-2), std::log(1e2));
    theta(d + 1) = std::clamp(theta(d + 1), std::log(kMinNoise), std::log(kMaxNoise));
    if (nw > 0) {
      theta.tail(2 * nw) = theta.tail(2 * nw).cwiseMax(std::log(0.2)).cwiseMin(std::log(5.0));
    }
  }
  length_ = theta.head(d).array().exp();
  signal_ = std::exp(theta(d));
  noise_ = std::clamp(std::exp(theta(d + 1)), kMinNoise, kMaxNoise);
  for (Eigen::Index w = 0; w < nw; ++w) {
    warp_a_(w) = std::exp(theta(d + 2 + w));
    warp_b_(w) = std::exp(theta(d + 2 + nw + w));
  }
}

void GaussianProcess::Fit(const Eigen::MatrixXd& x, const Eigen::VectorXd& y, int iterations) {
  // Without new hyperparameters, the factor of the rows shared with the
  // last fit (its leading block) is kept and extended: O(n^2) per new row
  // instead of O(n^3) for all.
  Eigen::Index same = 0;
  if (iterations <= 0 && chol_.rows() > 0 && x.cols() == x_.cols()) {
    const Eigen::Index shared = std::min(x.rows(), x_.rows());
    while (same < shared && x.row(same) == x_.row(same)) ++same;
  }
  x_ = x;
  y_ = y;
  if (iterations > 0 && x_.rows() >= 2) Optimise(iterations);
  u_ = Warped(x_);
  if (same == 0 || !Extend(same)) Factorise();
}

bool GaussianProcess::Extend(Eigen::Index kept) {
  const Eigen::Index n = x_.rows();
  const Eigen::Index r = n - kept;
  Eigen::MatrixXd chol(n, n);
  chol.setZero();
  chol.topLeftCorner(kept, kept) = chol_.topLeftCorner(kept, kept);
  if (r > 0) {
    // [L11 0; L21 L22]: L21 = (L11^-1 K12)^T, L22 = chol(K22 + noise - L21 L21^T).
    const Eigen::MatrixXd k12 = Kernel(u_.topRows(kept), u_.bottomRows(r));
    const Eigen::MatrixXd l21t =
        chol.topLeftCorner(kept, kept).triangularView<Eigen::Lower>().solve(k12);
    Eigen::MatrixXd s = Kernel(u_.bottomRows(r), u_.bottomRows(r));
    s.diagonal().array() += noise_;
    s.noalias() -= l21t.transpose() * l21t;
    Eigen::LLT<Eigen::MatrixXd> llt(s);
    if (llt.info() != Eigen::Success) return false;
    chol.bottomLeftCorner(r, kept) = l21t.transpose();
    chol.bottomRightCorner(r, r) = llt.matrixL();
  }
  chol_ = std::move(chol);
  Solve();
  return true;
}

void GaussianProcess::Predict(const Eigen::MatrixXd& xs, Eigen::VectorXd* mean,
                              Eigen::VectorXd* variance) const {
  Eigen::MatrixXd warped_xs;  // only when warping: no copy of the candidates otherwise
  const Eigen::MatrixXd& uxs = warped_.empty() ? xs : (warped_xs = Warped(xs));
  const Eigen::MatrixXd ks = Kernel(u_, uxs);  // n x m
  *mean = ks.transpose() * alpha_;
  if (variance == nullptr) return;
  const Eigen::MatrixXd v = chol_.triangularView<Eigen::Lower>().solve(ks);
  *variance = (signal_ - v.colwise().squaredNorm().transpose().array()).cwiseMax(1e-12).matrix();
}

void GaussianProcess::Add(const Eigen::VectorXd& x, double y) {
  const Eigen::Index n = x_.rows();
  Eigen::MatrixXd one(1, x.size());
  one.row(0) = x.transpose();
  one = Warped(one);
  const Eigen::VectorXd k = Kernel(u_, one).col(0);
  const Eigen::VectorXd l = chol_.triangularView<Eigen::Lower>().solve(k);
  const double diag = std::sqrt(std::max(signal_ + noise_ - l.squaredNorm(), 1e-10));
  Eigen::MatrixXd chol(n + 1, n + 1);
  chol.setZero();
  chol.topLeftCorner(n, n) = chol_;
  chol.block(n, 0, 1, n) = l.transpose();
  chol(n, n) = diag;
  chol_ = std::move(chol);
  x_.conservativeResize(n + 1, Eigen::NoChange);
  x_.row(n) = x.transpose();
  u_.conservativeResize(n + 1, Eigen::NoChange);
  u_.row(n) = one.row(0);
  y_.conservativeResize(n + 1);
  y_(n) = y;
  Solve();
}

}  // namespace ktune
