// Conversions between the store's records and the ktune.v1 messages the
// daemon serves, both ways (the remote command line renders what it
// receives exactly as the local one renders the store).
#ifndef KTUNE_SERVER_COMMON_CONVERT_H_
#define KTUNE_SERVER_COMMON_CONVERT_H_

#include <string>

#include "ktune/v1/results.pb.h"
#include "ktune/v1/tuner.pb.h"
#include "tuner/session/session.h"
#include "tuner/store/store.h"

namespace ktune {

void DeviceToProto(const DeviceInfo& device, v1::DeviceInfo* out);
DeviceInfo DeviceFromProto(const v1::DeviceInfo& device);

v1::JobState JobStateToProto(JobState state);
// UNSPECIFIED reads as queued.
JobState JobStateFromProto(v1::JobState state);

void MeasurementToProto(const StoredMeasurement& m, v1::MeasurementRecord* out);
// The configuration's values come back in parameter order (sorted by name
// when the message does not say the order).
StoredMeasurement MeasurementFromProto(const v1::MeasurementRecord& m);

// The job's spec is parsed from the record's serialized copy.
void JobToProto(const JobRecord& job, v1::Job* out);
// The job as GetJob answers: with its best measurement, the count of each
// status and its budget, and (with `include`) its measurements from
// sequence `from` on.
void JobWithMeasurementsToProto(const JobRecord& job, const std::vector<StoredMeasurement>& ms,
                                bool include, std::int64_t from, v1::Job* out);
JobRecord JobFromProto(const v1::Job& job);

void ProgressToProto(const Progress& progress, v1::Progress* out);

void BestMatchToProto(const BestMatch& match, v1::GetBestResponse* out);
BestRecord BestFromProto(const v1::GetBestResponse& best);

// ISO 8601 text (as the store keeps it) to a Timestamp and back; empty or
// malformed text leaves the Timestamp unset / gives "".
void TimeToProto(const std::string& iso8601, google::protobuf::Timestamp* out);
std::string TimeFromProto(const google::protobuf::Timestamp& t);

}  // namespace ktune

#endif  // KTUNE_SERVER_COMMON_CONVERT_H_
