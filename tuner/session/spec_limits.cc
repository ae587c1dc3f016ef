#include "tuner/session/spec_limits.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <string>
#include <vector>

#include "tuner/base/strings.h"

namespace ktune {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

class Walker {
 public:
  explicit Walker(const SpecLimits& limits) : limits_(limits) {}

  absl::Status Walk(const Message& m, const std::string& path) {
    const google::protobuf::Reflection* r = m.GetReflection();
    std::vector<const FieldDescriptor*> fields;
    r->ListFields(m, &fields);
    for (const FieldDescriptor* f : fields) {
      const std::string at = path.empty() ? f->name() : StrCat(path, ".", f->name());
      if (f->is_repeated()) {
        const std::size_t n = static_cast<std::size_t>(r->FieldSize(m, f));
        if (n > EntryLimit(f)) {
          return Over(at, n, "entries", EntryLimit(f));
        }
        for (std::size_t i = 0; i < n; ++i) {
          const std::string item = f->is_map() ? at : StrCat(at, "[", i, "]");
          const int k = static_cast<int>(i);
          if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
            if (absl::Status s = Walk(r->GetRepeatedMessage(m, f, k), item); !s.ok()) return s;
          } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
            std::string scratch;
            const std::string& v = r->GetRepeatedStringReference(m, f, k, &scratch);
            if (v.size() > limits_.string_chars) {
              return Over(item, v.size(), "characters", limits_.string_chars);
            }
          }
        }
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        if (absl::Status s = Walk(r->GetMessage(m, f), at); !s.ok()) return s;
      } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        std::string scratch;
        const std::string& v = r->GetStringReference(m, f, &scratch);
        const std::size_t limit =
            f->full_name() == "ktune.v1.Kernel.code" ? limits_.source_chars : limits_.string_chars;
        if (v.size() > limit) return Over(at, v.size(), "characters", limit);
      }
    }
    return absl::OkStatus();
  }

 private:
  std::size_t EntryLimit(const FieldDescriptor* f) const {
    const std::string& name = f->full_name();
    if (name == "ktune.v1.JobSpec.parameters") return limits_.parameters;
    if (f->containing_type()->full_name() == "ktune.v1.Parameter") return limits_.parameter_values;
    if (f->name() == "arguments") return limits_.arguments;
    return limits_.entries;
  }

  static absl::Status Over(const std::string& at, std::size_t n, const char* what,
                           std::size_t limit) {
    return absl::InvalidArgumentError(StrCat(at, ": ", n, " ", what, "; the limit is ", limit,
                                             " (a fixed limit of ktune's job files)"));
  }

  const SpecLimits& limits_;
};

}  // namespace

absl::Status CheckSpecLimits(const v1::JobSpec& spec, const SpecLimits& limits) {
  return Walker(limits).Walk(spec, "");
}

}  // namespace ktune
