// Every field of a measurement survives the way it travels: from the API's
// message into the store and back out as the API's message. The message is
// filled by protobuf reflection, so a field added to MeasurementRecord or
// to Conditions later is covered without touching this test: if the store
// or the conversions drop it, this fails.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/reflection.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <string>

#include "server/common/convert.h"
#include "tests/testing/temp_dir.h"
#include "tuner/store/store.h"

namespace ktune {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Sets every field of `m` (recursively) to a value distinct from its
// default and from the other fields' values; maps and repeated fields get
// two entries. Timestamps get whole milliseconds (the store's precision).
void FillEveryField(Message& m, int& counter) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  if (d->full_name() == "google.protobuf.Timestamp") {
    r->SetInt64(&m, d->FindFieldByName("seconds"), 1'700'000'000 + ++counter);
    r->SetInt32(&m, d->FindFieldByName("nanos"), 1'000'000 * (++counter % 1000));
    return;
  }
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
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
      if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        Message* sub = f->is_repeated() ? r->AddMessage(&m, f) : r->MutableMessage(&m, f);
        FillEveryField(*sub, counter);
        continue;
      }
      if (f->is_repeated()) {
        switch (f->cpp_type()) {
          case FieldDescriptor::CPPTYPE_INT32: r->AddInt32(&m, f, n); break;
          case FieldDescriptor::CPPTYPE_INT64: r->AddInt64(&m, f, n); break;
          case FieldDescriptor::CPPTYPE_UINT32: r->AddUInt32(&m, f, n); break;
          case FieldDescriptor::CPPTYPE_UINT64: r->AddUInt64(&m, f, n); break;
          case FieldDescriptor::CPPTYPE_DOUBLE: r->AddDouble(&m, f, real); break;
          case FieldDescriptor::CPPTYPE_FLOAT: r->AddFloat(&m, f, static_cast<float>(real)); break;
          case FieldDescriptor::CPPTYPE_BOOL: r->AddBool(&m, f, true); break;
          case FieldDescriptor::CPPTYPE_STRING: r->AddString(&m, f, text); break;
          case FieldDescriptor::CPPTYPE_ENUM: {
            const auto* values = f->enum_type();
            r->AddEnum(&m, f, values->value(values->value_count() - 1));
            break;
          }
          default: break;
        }
        continue;
      }
      switch (f->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32: r->SetInt32(&m, f, n); break;
        case FieldDescriptor::CPPTYPE_INT64: r->SetInt64(&m, f, n); break;
        case FieldDescriptor::CPPTYPE_UINT32: r->SetUInt32(&m, f, n); break;
        case FieldDescriptor::CPPTYPE_UINT64: r->SetUInt64(&m, f, n); break;
        case FieldDescriptor::CPPTYPE_DOUBLE: r->SetDouble(&m, f, real); break;
        case FieldDescriptor::CPPTYPE_FLOAT: r->SetFloat(&m, f, static_cast<float>(real)); break;
        case FieldDescriptor::CPPTYPE_BOOL: r->SetBool(&m, f, true); break;
        case FieldDescriptor::CPPTYPE_STRING: r->SetString(&m, f, text); break;
        case FieldDescriptor::CPPTYPE_ENUM: {
          const auto* values = f->enum_type();
          r->SetEnum(&m, f, values->value(values->value_count() - 1));
          break;
        }
        default: break;
      }
    }
  }
}

// A record with every field set, as a measured configuration's would be:
// ok (so its time and objective are kept) and with its configuration's
// names in the order of its values.
v1::MeasurementRecord EveryFieldSet() {
  v1::MeasurementRecord m;
  int counter = 0;
  FillEveryField(m, counter);
  m.set_status(v1::OK);
  v1::Configuration& config = *m.mutable_config();
  config.clear_names();
  std::map<std::string, v1::ParameterValue> sorted(config.values().begin(), config.values().end());
  for (const auto& [name, value] : sorted) config.add_names(name);
  return m;
}

JobRecord AJob() {
  JobRecord j;
  j.id = "job";
  j.kernel_name = "k";
  j.source_hash = "h";
  j.parameters = {"a"};
  j.device.id = "cuda:0";
  j.device.name = "GPU";
  j.device.uuid = "GPU-0";
  j.problem = {{"N", 4}};
  j.spec = "x";
  j.spec_json = "{}";
  j.strategy = "random";
  return j;
}

TEST(MeasurementRoundTripTest, TheFillerReachesEveryField) {
  const v1::MeasurementRecord m = EveryFieldSet();
  std::vector<const FieldDescriptor*> set;
  m.GetReflection()->ListFields(m, &set);
  EXPECT_EQ(static_cast<int>(set.size()), m.GetDescriptor()->field_count());
  std::vector<const FieldDescriptor*> conditions;
  m.conditions().GetReflection()->ListFields(m.conditions(), &conditions);
  EXPECT_EQ(static_cast<int>(conditions.size()), m.conditions().GetDescriptor()->field_count());
}

TEST(MeasurementRoundTripTest, EveryFieldSurvivesTheStoreAndTheApi) {
  testing::TempDir dir;
  absl::StatusOr<Store> store = Store::Open(dir.path() + "/s.db", true);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(store->StartJob(AJob(), nullptr).ok());

  const v1::MeasurementRecord sent = EveryFieldSet();
  StoredMeasurement in = MeasurementFromProto(sent);
  in.loss = in.objective;
  ASSERT_TRUE(store->AddMeasurement("job", in).ok());
  absl::StatusOr<std::vector<StoredMeasurement>> back = store->LoadMeasurements("job");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 1u);
  v1::MeasurementRecord received;
  MeasurementToProto((*back)[0], &received);

  google::protobuf::util::MessageDifferencer differ;
  std::string differences;
  differ.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differ.Compare(sent, received)) << differences;
}

TEST(MeasurementRoundTripTest, TheConditionsAreWrittenByTheirFieldNames) {
  // The store's text is protobuf's JSON with the .proto's names: what
  // earlier releases wrote reads back.
  absl::StatusOr<Conditions> old = ConditionsFromJson(
      R"({"sm_clock_mhz_before":1980,"raced":true,"gpu_busy_ms":12.5,"load":"UNDER_LOAD",)"
      R"("load_rates":{"h2d_gbs":26.8},"device":"cuda:1"})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->sm_clock_mhz_before(), 1980);
  EXPECT_TRUE(old->raced());
  EXPECT_DOUBLE_EQ(old->gpu_busy_ms(), 12.5);
  EXPECT_EQ(old->load(), v1::LoadProfile::UNDER_LOAD);
  EXPECT_DOUBLE_EQ(old->load_rates().at("h2d_gbs"), 26.8);
  EXPECT_EQ(old->device(), "cuda:1");
  EXPECT_EQ(ConditionsToJson(*old).find("smClock"), std::string::npos);
  // Damaged text is refused, not read as zeros.
  EXPECT_EQ(ConditionsFromJson(R"({"raced": "maybe"})").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ConditionsFromJson("[1, 2]").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace ktune
