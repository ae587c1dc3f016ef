// Recorded tuning spaces: brute-forced results that others measured on real
// GPUs, imported from Kernel Tuner cache files (.json or .json.gz, also a
// cache left open by an interrupted run) and T4 results files.
#ifndef KTUNE_TUNER_DEVICE_RECORDED_H_
#define KTUNE_TUNER_DEVICE_RECORDED_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "tuner/device/device.h"
#include "tuner/space/space.h"

namespace ktune {

// One recorded configuration and how it went.
struct RecordedEntry {
  Config config;  // indices into RecordedSpace::params()
  Measurement measurement;
};

// An imported recording. Immutable after Load; thread-compatible.
class RecordedSpace {
 public:
  enum class Format { kKernelTunerCache, kT4 };

  // Reads and validates the file. Errors (INVALID_ARGUMENT, NOT_FOUND)
  // start with the path and name the field at fault, e.g.
  // "F: cache["16,1"].time: expected a number or a failure marker".
  static absl::StatusOr<RecordedSpace> Load(const std::string& path);

  // Parses already-read file contents; `path` is used in messages and to
  // derive names the format lacks.
  static absl::StatusOr<RecordedSpace> Parse(const std::string& path, std::string_view contents);

  Format format() const { return format_; }
  const std::string& path() const { return path_; }
  // Kernel and device names as recorded; for formats without them, derived
  // from the file name.
  const std::string& kernel_name() const { return kernel_name_; }
  const std::string& device_name() const { return device_name_; }
  // Problem dimensions: problem_size_x, problem_size_y, ... (may be empty).
  const std::map<std::string, std::int64_t>& problem() const { return problem_; }
  // Parameters in key order, with their full value lists.
  const std::vector<Parameter>& params() const { return params_; }
  const std::vector<RecordedEntry>& entries() const { return entries_; }
  // Hex SHA-256 of the file's bytes as read (after decompression).
  const std::string& content_hash() const { return content_hash_; }
  // True if the file was an unclosed cache that had to be repaired.
  bool repaired() const { return repaired_; }

  // The entry for canonical key `key` (in params() order), or nullptr.
  const RecordedEntry* Find(std::string_view key) const;

  // The recorded configurations as an explicit-list space, in file order.
  absl::StatusOr<Space> ToSpace() const;

 private:
  absl::Status ParseKernelTuner(const Json& root);
  absl::Status ParseT4(const Json& root);
  absl::Status Index();

  Format format_ = Format::kKernelTunerCache;
  std::string path_;
  std::string kernel_name_;
  std::string device_name_;
  std::map<std::string, std::int64_t> problem_;
  std::vector<Parameter> params_;
  std::vector<RecordedEntry> entries_;
  std::unordered_map<std::string, std::size_t> by_key_;
  std::string content_hash_;
  bool repaired_ = false;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_RECORDED_H_
