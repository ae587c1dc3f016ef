#include "tuner/session/warm_start.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "tuner/base/status_macros.h"

namespace ktune {

absl::StatusOr<WarmStart> LoadWarmStart(Store& store, const Job& job, const std::string& job_id,
                                        std::int64_t limit) {
  const Space& space = *job.space;
  std::vector<std::string> names;
  for (const Parameter& p : space.params()) names.push_back(p.name);
  // What was known when the job was created: a resumed job starts from the
  // same warm start as its first run, so its strategy takes the same path
  // and replays what is stored instead of wandering past it.
  std::string cutoff = NowIso8601();
  if (absl::StatusOr<JobRecord> stored = store.GetJob(job_id); stored.ok()) {
    cutoff = stored->created_at;
  } else if (stored.status().code() != absl::StatusCode::kNotFound &&
             stored.status().code() != absl::StatusCode::kInvalidArgument) {
    return stored.status();
  }
  KTUNE_ASSIGN_OR_RETURN(std::vector<PriorMeasurement> rows,
                         store.LoadPriorMeasurements(job.kernel_name, names, job.objective.id(),
                                                     job_id, limit, cutoff));
  WarmStart out;
  // Per earlier job, its ok losses sorted: a loss's rank is its position.
  std::map<std::string, std::vector<double>> sorted;
  for (const PriorMeasurement& m : rows) {
    if (m.status == CandidateStatus::kOk && m.loss && std::isfinite(*m.loss)) {
      sorted[m.job_id].push_back(*m.loss);
    }
  }
  for (auto& [id, losses] : sorted) std::sort(losses.begin(), losses.end());
  auto rank = [&](const std::string& id, double loss) {
    const std::vector<double>& v = sorted[id];
    if (v.size() < 2) return 0.0;
    const auto pos = std::lower_bound(v.begin(), v.end(), loss) - v.begin();
    return static_cast<double>(pos) / static_cast<double>(v.size() - 1);
  };

  std::unordered_map<std::string, std::size_t> index;  // key -> position in prior
  std::map<std::string, bool> contributed;
  for (const PriorMeasurement& m : rows) {
    absl::StatusOr<Config> c = space.ParseKey(m.key);
    if (!c.ok() || !space.IsValid(*c)) {
      ++out.skipped;
      continue;
    }
    Outcome o;
    const bool ok = m.status == CandidateStatus::kOk && m.loss && std::isfinite(*m.loss);
    // An ok row without a usable loss (a damaged file) teaches nothing.
    if (m.status == CandidateStatus::kOk && !ok) continue;
    o.status = m.status;
    if (ok) o.loss = rank(m.job_id, *m.loss);
    contributed[m.job_id] = true;
    auto [it, inserted] = index.emplace(m.key, out.prior.size());
    if (inserted) {
      out.prior.emplace_back(*std::move(c), o);
      continue;
    }
    Outcome& known = out.prior[it->second].second;
    if (ok && (!known.ok() || o.loss < known.loss)) known = o;
  }
  out.jobs = static_cast<std::int64_t>(contributed.size());
  return out;
}

}  // namespace ktune
