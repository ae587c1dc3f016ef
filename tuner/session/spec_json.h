// Explaining why a job file's JSON does not fit its schema, in terms a user
// can act on: the member that names no field (and the field it is closest
// to), or the enum value that is not one (and the values there are).
// Protobuf's own parser says "Cannot find field." without a suggestion, and
// names enum types by their type URL without their values.
#ifndef KTUNE_TUNER_SESSION_SPEC_JSON_H_
#define KTUNE_TUNER_SESSION_SPEC_JSON_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "tuner/base/json.h"

namespace ktune {

// The first mismatch between `doc` and message type `type`, in document
// order: "parameters[0].intz: no field of that name in Parameter; did you
// mean ints?" or "arguments[0].buffer.direction: "INOUTT" is not one of
// INPUT, OUTPUT, INOUT". nullopt when there is none of these two kinds
// (a wrong JSON type, say: then the parser's message stands).
std::optional<std::string> ExplainJsonMismatch(const Json& doc,
                                               const google::protobuf::Descriptor& type);

// The candidate closest to `word` by edit distance, if it is close enough
// to be a likely misspelling (at most a third of the word's length, at
// least 1 and at most 3 edits; case differences count as half an edit).
std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& candidates);

}  // namespace ktune

#endif  // KTUNE_TUNER_SESSION_SPEC_JSON_H_
