// Filling protobuf messages by reflection, for tests that must cover every
// field, including fields added later.
#ifndef KTUNE_TESTS_TESTING_REFLECTION_H_
#define KTUNE_TESTS_TESTING_REFLECTION_H_

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>

#include <string>

namespace ktune::testing {

// Sets every field of `m` (recursively) to a value distinct from its
// default and from the other fields' values; maps and repeated fields get
// two entries. Timestamps get whole milliseconds (the store's precision).
inline void FillEveryField(google::protobuf::Message& m, int& counter) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  if (d->full_name() == "google.protobuf.Timestamp") {
    r->SetInt64(&m, d->FindFieldByName("seconds"), 1'700'000'000 + ++counter);
    r->SetInt32(&m, d->FindFieldByName("nanos"), 1'000'000 * (++counter % 1000));
    return;
  }
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    // One member of a oneof: the last set would win anyway.
    if (f->containing_oneof() != nullptr && !f->containing_oneof()->is_synthetic() &&
        r->HasOneof(m, f->containing_oneof())) {
      continue;
    }
    const int entries = f->is_repeated() ? 2 : 1;
    for (int e = 0; e < entries; ++e) {
      const int n = ++counter;
      const double real = n + 0.25;  // never an integer: JSON keeps it a double
      const std::string text = "v" + std::to_string(n);
      if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        google::protobuf::Message* sub = f->is_repeated() ? r->AddMessage(&m, f) : r->MutableMessage(&m, f);
        FillEveryField(*sub, counter);
        continue;
      }
      if (f->is_repeated()) {
        switch (f->cpp_type()) {
          case google::protobuf::FieldDescriptor::CPPTYPE_INT32: r->AddInt32(&m, f, n); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_INT64: r->AddInt64(&m, f, n); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_UINT32: r->AddUInt32(&m, f, n); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_UINT64: r->AddUInt64(&m, f, n); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE: r->AddDouble(&m, f, real); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT: r->AddFloat(&m, f, static_cast<float>(real)); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_BOOL: r->AddBool(&m, f, true); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_STRING: r->AddString(&m, f, text); break;
          case google::protobuf::FieldDescriptor::CPPTYPE_ENUM: {
            const auto* values = f->enum_type();
            r->AddEnum(&m, f, values->value(values->value_count() - 1));
            break;
          }
          default: break;
        }
        continue;
      }
      switch (f->cpp_type()) {
        case google::protobuf::FieldDescriptor::CPPTYPE_INT32: r->SetInt32(&m, f, n); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_INT64: r->SetInt64(&m, f, n); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(&m, f, n); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(&m, f, n); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(&m, f, real); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(&m, f, static_cast<float>(real)); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_BOOL: r->SetBool(&m, f, true); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_STRING: r->SetString(&m, f, text); break;
        case google::protobuf::FieldDescriptor::CPPTYPE_ENUM: {
          const auto* values = f->enum_type();
          r->SetEnum(&m, f, values->value(values->value_count() - 1));
          break;
        }
        default: break;
      }
    }
  }
}

inline void FillEveryField(google::protobuf::Message& m) {
  int counter = 0;
  FillEveryField(m, counter);
}

}  // namespace ktune::testing

#endif  // KTUNE_TESTS_TESTING_REFLECTION_H_
