#include "tuner/store/best_match.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/strings.h"
#include "tuner/store/codecs.h"

namespace ktune {

const char* BestMatchKindName(BestMatchKind kind) {
  switch (kind) {
    case BestMatchKind::kExact: return "exact";
    case BestMatchKind::kNearestProblem: return "nearest_problem";
    case BestMatchKind::kSameArchitecture: return "same_architecture";
  }
  return "?";
}

double ProblemDistance(const Problem& a, const Problem& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double sum = 0;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    if (ia->first != ib->first) return std::numeric_limits<double>::infinity();
    const double d = std::log(static_cast<double>(std::max<std::int64_t>(ia->second, 1))) -
                     std::log(static_cast<double>(std::max<std::int64_t>(ib->second, 1)));
    sum += d * d;
  }
  return std::sqrt(sum);
}

absl::StatusOr<BestMatch> SelectBestMatch(std::vector<BestRecord> all, const BestQuery& q) {
  std::erase_if(all, [&](const BestRecord& b) {
    return b.kernel_name != q.kernel || (!q.objective.empty() && b.objective != q.objective);
  });
  if (all.empty()) {
    return absl::NotFoundError(
        StrCat("no stored best configuration for kernel ", q.kernel,
               q.objective.empty() ? "" : StrCat(" (objective ", q.objective, ")")));
  }
  if (q.objective.empty()) {
    // One objective: "time" when there is one, else the first stored.
    std::string objective = all.front().objective;
    for (const BestRecord& b : all) {
      if (b.objective == "time") objective = "time";
    }
    std::erase_if(all, [&](const BestRecord& b) { return b.objective != objective; });
  }
  bool source_differs = false;
  if (!q.source_hash.empty()) {
    const bool any_same = std::any_of(all.begin(), all.end(), [&](const BestRecord& b) {
      return b.source_hash == q.source_hash;
    });
    if (any_same) {
      std::erase_if(all, [&](const BestRecord& b) { return b.source_hash != q.source_hash; });
    } else {
      source_differs = true;
    }
  }
  auto on_device = [&](const BestRecord& b) {
    return q.device.empty() || b.device.name == q.device || b.device.id == q.device ||
           b.device.uuid == q.device;
  };
  auto answer = [&](BestMatchKind kind, const BestRecord& b, double distance) {
    BestMatch m;
    m.kind = kind;
    m.best = b;
    m.source_differs = source_differs;
    m.distance = distance;
    return m;
  };
  // The exact problem, else the nearest, among records passing `keep`.
  auto pick = [&](auto keep, bool nearest) -> std::optional<std::pair<const BestRecord*, double>> {
    const BestRecord* found = nullptr;
    double best_distance = std::numeric_limits<double>::infinity();
    for (const BestRecord& b : all) {
      if (!keep(b)) continue;
      if (q.problem.empty() || b.problem == q.problem) return std::make_pair(&b, 0.0);
      if (!nearest) continue;
      const double d = ProblemDistance(q.problem, b.problem);
      if (d < best_distance) {
        best_distance = d;
        found = &b;
      }
    }
    if (found == nullptr) return std::nullopt;
    return std::make_pair(found, best_distance);
  };
  if (auto exact = pick(on_device, false)) {
    return answer(BestMatchKind::kExact, *exact->first, 0);
  }
  std::string architecture = q.architecture;
  if (!q.exact_only) {
    if (auto near = pick(on_device, true)) {
      return answer(BestMatchKind::kNearestProblem, *near->first, near->second);
    }
    if (architecture.empty() && q.device.rfind("sm_", 0) == 0) architecture = q.device;
    if (architecture.empty() && !q.device.empty()) {
      // A device some record was measured on.
      for (const BestRecord& b : all) {
        if (b.device.name == q.device || b.device.id == q.device || b.device.uuid == q.device) {
          architecture = b.device.architecture;
        }
      }
    }
    if (!architecture.empty()) {
      auto same_arch = [&](const BestRecord& b) { return b.device.architecture == architecture; };
      if (auto other = pick(same_arch, true)) {
        return answer(BestMatchKind::kSameArchitecture, *other->first, other->second);
      }
    }
  }
  std::vector<std::string> held;
  for (const BestRecord& b : all) {
    std::string h = StrCat(b.device.name, " ", ProblemToJson(b.problem));
    if (std::find(held.begin(), held.end(), h) == held.end()) held.push_back(std::move(h));
  }
  if (held.size() > 8) held.resize(8);
  return absl::NotFoundError(StrCat(
      "no stored best configuration for kernel ", q.kernel,
      q.device.empty() ? "" : StrCat(" on ", q.device),
      q.problem.empty() ? "" : StrCat(" for ", ProblemToJson(q.problem)),
      q.exact_only
          ? " (exact match asked)"
          : StrCat(
                " nor a nearby problem",
                architecture.empty() ? "" : StrCat(" nor a device of architecture ", architecture)),
      "; the store holds: ", StrJoin(held, "; ")));
}

}  // namespace ktune
