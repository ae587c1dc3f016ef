// Reading whole files, transparently gunzipping.
#ifndef KTUNE_TUNER_BASE_FILE_H_
#define KTUNE_TUNER_BASE_FILE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ktune {

// Largest file (after decompression) that ReadFileContents accepts.
inline constexpr std::size_t kMaxFileBytes = std::size_t{2} << 30;

// Returns the bytes of the file at `path`. A file that starts with the gzip
// magic bytes is decompressed (concatenated members too). Errors name the
// path: NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is not a
// regular file or its gzip stream is corrupt, RESOURCE_EXHAUSTED past
// kMaxFileBytes.
absl::StatusOr<std::string> ReadFileContents(const std::string& path);

// Writes `contents` to `path` through a temporary file in the same folder
// and a rename, so readers never see a partial file.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents);

// `data` as one gzip member (what ReadFileContents reads back).
std::string GzipCompress(std::string_view data);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_FILE_H_
