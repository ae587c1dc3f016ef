// How the store writes the parts of a record that are not plain columns:
// a measurement's conditions (protobuf's JSON form of ktune.v1.Conditions,
// field names as in the .proto), its samples (a JSON array), a problem
// (a JSON object with sorted names). Backends share these, so every store
// writes the same text.
#ifndef KTUNE_TUNER_STORE_CODECS_H_
#define KTUNE_TUNER_STORE_CODECS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/space/measurement.h"

namespace ktune {

// Canonical text of a problem: a JSON object with sorted names.
std::string ProblemToJson(const Problem& problem);
// DATA_LOSS unless `text` is a JSON object of integers.
absl::StatusOr<Problem> ProblemFromJson(const std::string& text);

// Conditions as JSON: fields left at their defaults are omitted, so an
// isolated measurement's record holds only what was measured.
std::string ConditionsToJson(const Conditions& conditions);
// DATA_LOSS when `text` is not the JSON form of ktune.v1.Conditions
// (fields this build does not know are ignored: a newer ktune's record).
absl::StatusOr<Conditions> ConditionsFromJson(const std::string& text);

std::string SamplesToJson(const std::vector<double>& samples);
// DATA_LOSS unless `text` is a JSON array of numbers.
absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text);

// The current UTC time as ISO 8601 with milliseconds.
std::string NowIso8601();

}  // namespace ktune

#endif  // KTUNE_TUNER_STORE_CODECS_H_
