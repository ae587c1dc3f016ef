#include "tuner/store/codecs.h"

#include <google/protobuf/util/json_util.h>
#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"

namespace ktune {

std::string ProblemToJson(const Problem& problem) {
  Json j = Json::MakeObject();
  for (const auto& [name, v] : problem) j.Set(name, Json(v));  // map: sorted
  return j.Dump();
}

absl::StatusOr<Problem> ProblemFromJson(const std::string& text) {
  absl::StatusOr<Json> j = ParseJson(text);
  if (!j.ok() || !j->is_object()) {
    return absl::DataLossError(StrCat("stored problem is not a JSON object: ", text));
  }
  Problem p;
  for (const auto& [name, v] : j->as_object()) {
    if (!v.is_int()) {
      return absl::DataLossError(StrCat("stored problem value of ", name, " is not an integer"));
    }
    p[name] = v.as_int();
  }
  return p;
}

std::string ConditionsToJson(const Conditions& conditions) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a message this build defined cannot fail.
  (void)google::protobuf::util::MessageToJsonString(conditions, &out, options);
  return out;
}

absl::StatusOr<Conditions> ConditionsFromJson(const std::string& text) {
  Conditions c;
  if (text.empty()) return c;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto s = google::protobuf::util::JsonStringToMessage(text, &c, options);
  if (!s.ok()) {
    return absl::DataLossError(StrCat("stored conditions are not ktune.v1.Conditions (",
                                      std::string(s.message()), "): ", text.substr(0, 200)));
  }
  return c;
}

std::string SamplesToJson(const std::vector<double>& samples) {
  Json a = Json::MakeArray();
  for (double v : samples) a.Push(v);
  return a.Dump();
}

absl::StatusOr<std::vector<double>> SamplesFromJson(const std::string& text) {
  std::vector<double> out;
  absl::StatusOr<Json> j = ParseJson(text);
  if (!j.ok() || !j->is_array()) {
    return absl::DataLossError(
        StrCat("stored samples are not a JSON array: ", text.substr(0, 200)));
  }
  for (const Json& v : j->as_array()) {
    if (v.is_number()) out.push_back(v.as_double());  // a non-finite one was written as null
  }
  return out;
}

std::string NowIso8601() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

}  // namespace ktune
