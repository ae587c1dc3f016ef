// String helpers. (Debian's Abseil is built with its own string_view type,
// so absl::StrCat does not take std::string_view; this one does.)
#ifndef KTUNE_TUNER_BASE_STRINGS_H_
#define KTUNE_TUNER_BASE_STRINGS_H_

#include <charconv>
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"

namespace ktune {
namespace strings_internal {

inline void Append(std::string& out, std::string_view s) { out.append(s); }
inline void Append(std::string& out, const std::string& s) { out.append(s); }
inline void Append(std::string& out, const char* s) { out.append(s); }
inline void Append(std::string& out, absl::string_view s) { out.append(s.data(), s.size()); }
template <std::size_t N>
void Append(std::string& out, const char (&s)[N]) {
  std::size_t n = 0;
  while (n < N && s[n] != '\0') ++n;
  out.append(s, n);
}
inline void Append(std::string& out, char c) { out.push_back(c); }
inline void Append(std::string& out, bool b) { out.append(b ? "true" : "false"); }

template <typename T>
requires(std::integral<T> && !std::same_as<T, char> &&
         !std::same_as<T, bool>) void Append(std::string& out, T v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

template <typename T>
requires std::floating_point<T>
void Append(std::string& out, T v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<double>(v));
  out.append(buf, end);
}

}  // namespace strings_internal

// Concatenates strings, characters and numbers (doubles in their shortest
// round-trip form).
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(out, args), ...);
  return out;
}

// Joins `parts` with `sep`.
std::string StrJoin(const std::vector<std::string>& parts, std::string_view sep);

// Splits `s` at every `sep` (empty pieces kept).
std::vector<std::string> StrSplit(std::string_view s, char sep);

// `s` without leading and trailing ASCII white space.
std::string_view StripSpace(std::string_view s);

}  // namespace ktune

#endif  // KTUNE_TUNER_BASE_STRINGS_H_
