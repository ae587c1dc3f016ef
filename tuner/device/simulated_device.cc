#include "tuner/device/simulated_device.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "tuner/base/status_macros.h"
#include "tuner/base/strings.h"

namespace ktune {

SimulatedDevice::SimulatedDevice(std::shared_ptr<const RecordedSpace> recording,
                                 std::string locator)
    : recording_(std::move(recording)) {
  info_.id = std::move(locator);
  info_.name = recording_->device_name();
  info_.uuid = StrCat("sim-", recording_->content_hash().substr(0, 32));
  info_.simulated = true;
}

absl::StatusOr<std::unique_ptr<SimulatedDevice>> SimulatedDevice::Open(const std::string& path) {
  KTUNE_ASSIGN_OR_RETURN(RecordedSpace rs, RecordedSpace::Load(path));
  return std::make_unique<SimulatedDevice>(std::make_shared<const RecordedSpace>(std::move(rs)),
                                           StrCat("sim:", path));
}

absl::Status SimulatedDevice::Bind(const JobBinding& job) {
  if (job.spec != nullptr) {
    const v1::LoadProfile::Kind kind = job.spec->measurement().load().kind();
    if (kind == v1::LoadProfile::UNDER_LOAD || kind == v1::LoadProfile::CONCURRENT) {
      return absl::InvalidArgumentError(
          StrCat("measurement.load.kind: ", v1::LoadProfile::Kind_Name(kind), ": device ", info_.id,
                 " replays times recorded in isolation; measuring under load needs a GPU"));
    }
    if (job.spec->measurement().rotate_inputs()) {
      return absl::InvalidArgumentError(
          StrCat("measurement.rotate_inputs: device ", info_.id,
                 " replays recorded times, taken without rotated inputs; rotating needs a GPU"));
    }
    if (job.spec->measurement().energy()) {
      return absl::InvalidArgumentError(
          StrCat("measurement.energy: device ", info_.id,
                 " replays recorded times, without their energy; energy (and an objective over "
                 "energy_j or power_w) needs a GPU"));
    }
    if (job.spec->has_pipeline()) {
      return absl::InvalidArgumentError(StrCat("pipeline: device ", info_.id,
                                               " replays recorded kernel times; a pipeline job "
                                               "needs a GPU"));
    }
  }
  const Space& space = *job.space;
  const std::vector<Parameter>& recorded = recording_->params();
  std::vector<std::size_t> to_space;
  std::vector<std::string> missing;
  for (const Parameter& p : recorded) {
    std::optional<std::size_t> i = space.ParamIndex(p.name);
    if (i) {
      to_space.push_back(*i);
    } else {
      missing.push_back(p.name);
    }
  }
  std::vector<std::string> extra;
  for (const Parameter& p : space.params()) {
    bool found = false;
    for (const Parameter& r : recorded) found = found || r.name == p.name;
    if (!found) extra.push_back(p.name);
  }
  if (!missing.empty() || !extra.empty()) {
    return absl::InvalidArgumentError(StrCat(
        "device ", info_.id, " records parameters other than the job's",
        missing.empty() ? "" : StrCat("; recorded but not in the job: ", StrJoin(missing, ", ")),
        extra.empty() ? "" : StrCat("; in the job but not recorded: ", StrJoin(extra, ", "))));
  }
  space_ = &space;
  to_space_ = std::move(to_space);
  return absl::OkStatus();
}

absl::StatusOr<Measurement> SimulatedDevice::Evaluate(const Config& config) {
  if (space_ == nullptr) {
    return absl::FailedPreconditionError("simulated device: Evaluate before Bind");
  }
  std::string key;
  for (std::size_t i = 0; i < to_space_.size(); ++i) {
    if (i > 0) key.push_back(',');
    key += FormatValue(space_->ValueOf(config, to_space_[i]));
  }
  const RecordedEntry* e = recording_->Find(key);
  if (e == nullptr) {
    Measurement m;
    m.status = CandidateStatus::kLaunchError;
    m.message = StrCat("configuration ", key, " is not in the recording ", recording_->path(),
                       " (the simulated device cannot run it)");
    return m;
  }
  if (speed_ > 0) {
    std::this_thread::sleep_for(e->measurement.cost / speed_);
  }
  return e->measurement;
}

}  // namespace ktune
