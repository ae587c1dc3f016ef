#include "ktune/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <google/protobuf/util/json_util.h>
#include "ktune/v1/tuner.grpc.pb.h"
#include "server/common/address.h"
#include "tuner/base/file.h"
#include "tuner/base/json.h"
#include "tuner/base/strings.h"
#include "tuner/store/store.h"

namespace ktune {

std::int64_t TunedConfig::Int(const std::string& name, std::int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (it->second.kind == Value::kInt) return it->second.i;
  if (it->second.kind == Value::kBool) return it->second.i;
  return fallback;
}

double TunedConfig::Float(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (it->second.kind == Value::kFloat) return it->second.f;
  if (it->second.kind == Value::kInt) return static_cast<double>(it->second.i);
  return fallback;
}

bool TunedConfig::Bool(const std::string& name, bool fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (it->second.kind == Value::kBool || it->second.kind == Value::kInt) return it->second.i != 0;
  return fallback;
}

std::string TunedConfig::String(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.kind != Value::kString) return fallback;
  return it->second.s;
}

bool TunedConfig::Has(const std::string& name) const { return values_.count(name) > 0; }

struct BestConfigs::Impl {
  // How the answers were loaded, for Refresh.
  std::string database;  // Open
  std::vector<std::string> kernels;
  std::string address;  // Connect
  std::vector<BestRequest> requests;
  ConnectOptions options;
  // tune_on_miss: the job queued for each request's exact problem.
  std::unordered_map<std::string, std::string> tuning;

  std::vector<BestRecord> records;
  // Exact answers by (kernel, device, problem), and fallbacks once computed.
  std::unordered_map<std::string, std::unique_ptr<TunedConfig>> exact;
  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::unique_ptr<TunedConfig>> found;  // guarded by mu

  static std::string Key(const std::string& kernel, const std::string& device,
                         const ProblemSize& problem) {
    std::string k = kernel;
    k += '\x1f';
    k += device;
    for (const auto& [name, v] : problem) {
      k += '\x1f';
      k += name;
      k += '=';
      k += std::to_string(v);
    }
    return k;
  }

  static std::unique_ptr<TunedConfig> Make(const BestRecord& b, const std::string& match,
                                           bool source_differs) {
    auto c = std::make_unique<TunedConfig>();
    c->kernel_ = b.kernel_name;
    c->key_ = b.key;
    c->device_ = b.device.name;
    c->architecture_ = b.device.architecture;
    c->problem_ = b.problem;
    c->time_ms_ = b.time_ms;
    c->match_ = match;
    c->source_differs_ = source_differs;
    c->job_id_ = b.job_id;
    if (absl::StatusOr<Json> j = ParseJson(b.config_json); j.ok() && j->is_object()) {
      for (const auto& [name, v] : j->as_object()) {
        TunedConfig::Value value;
        if (v.is_bool()) {
          value.kind = TunedConfig::Value::kBool;
          value.i = v.as_bool() ? 1 : 0;
        } else if (v.is_int()) {
          value.kind = TunedConfig::Value::kInt;
          value.i = v.as_int();
        } else if (v.is_number()) {
          value.kind = TunedConfig::Value::kFloat;
          value.f = v.as_double();
        } else if (v.is_string()) {
          value.kind = TunedConfig::Value::kString;
          value.s = v.as_string();
        } else {
          continue;
        }
        c->values_[name] = std::move(value);
      }
    }
    return c;
  }

  // Each record answers exactly for its device's name, id and uuid.
  void IndexRecords() {
    for (const BestRecord& b : records) {
      for (const std::string* d : {&b.device.name, &b.device.id, &b.device.uuid}) {
        if (d->empty()) continue;
        const std::string k = Key(b.kernel_name, *d, b.problem);
        if (exact.count(k) == 0) exact[k] = Make(b, "exact", false);
      }
    }
  }
};

BestConfigs::BestConfigs() : impl_(std::make_unique<Impl>()) {}
BestConfigs::~BestConfigs() = default;

std::size_t BestConfigs::size() const { return impl_->records.size(); }

std::unique_ptr<BestConfigs> BestConfigs::Open(const std::string& database,
                                               const std::vector<std::string>& kernels,
                                               std::string* error) {
  auto fail = [&](const std::string& message) -> std::unique_ptr<BestConfigs> {
    if (error != nullptr) *error = message;
    return nullptr;
  };
  if (kernels.empty()) return fail("name at least one kernel");
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(database, /*create=*/false);
  if (!store.ok()) return fail(std::string(store.status().message()));
  std::unique_ptr<BestConfigs> out(new BestConfigs());
  out->impl_->database = database;
  out->impl_->kernels = kernels;
  for (const std::string& kernel : kernels) {
    absl::StatusOr<std::vector<BestRecord>> found =
        (*store)->FindBest(kernel, std::nullopt, std::nullopt, std::nullopt);
    if (!found.ok()) return fail(std::string(found.status().message()));
    for (BestRecord& b : *found) out->impl_->records.push_back(std::move(b));
  }
  if (out->impl_->records.empty()) {
    return fail(StrCat(database, ": no best configuration of ", StrJoin(kernels, ", ")));
  }
  out->impl_->IndexRecords();
  return out;
}

std::unique_ptr<BestConfigs> BestConfigs::Connect(const std::string& address,
                                                  const std::vector<BestRequest>& requests,
                                                  const ConnectOptions& options,
                                                  std::string* error) {
  auto fail = [&](const std::string& message) -> std::unique_ptr<BestConfigs> {
    if (error != nullptr) *error = message;
    return nullptr;
  };
  if (absl::Status s = CheckServerAddress(address); !s.ok()) return fail(std::string(s.message()));
  std::string token;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> t = ReadFileContents(options.token_file);
    if (!t.ok()) return fail(StrCat("token file: ", t.status().message()));
    token = std::string(StripSpace(*t));
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!options.tls_ca.empty()) {
    absl::StatusOr<std::string> pem = ReadFileContents(options.tls_ca);
    if (!pem.ok()) return fail(StrCat("TLS CA: ", pem.status().message()));
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *pem;
    creds = grpc::SslCredentials(ssl);
  }
  std::unique_ptr<v1::Tuner::Stub> stub = v1::Tuner::NewStub(grpc::CreateChannel(address, creds));
  std::unique_ptr<BestConfigs> out(new BestConfigs());
  out->impl_->address = address;
  out->impl_->requests = requests;
  out->impl_->options = options;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const BestRequest& r = requests[i];
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<std::int64_t>(options.timeout_s * 1e6)));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::GetBestRequest req;
    req.set_kernel(r.kernel);
    req.set_device(r.device);
    req.set_source_hash(r.source_hash);
    for (const auto& [name, v] : r.problem) (*req.mutable_problem())[name] = v;
    req.set_tune_on_miss(r.tune_on_miss);
    if (!r.spec_json.empty()) {
      if (const auto parsed =
              google::protobuf::util::JsonStringToMessage(r.spec_json, req.mutable_spec());
          !parsed.ok()) {
        return fail(StrCat("requests[", i, "].spec_json: ", std::string(parsed.message())));
      }
    }
    v1::GetBestResponse resp;
    const grpc::Status s = stub->GetBest(&ctx, req, &resp);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) continue;
    if (!s.ok()) return fail(StrCat(address, ": ", s.error_message()));
    const std::string key = Impl::Key(r.kernel, r.device, r.problem);
    if (!resp.tuning_job_id().empty()) out->impl_->tuning[key] = resp.tuning_job_id();
    // Nothing stored yet, but a job is tuning it.
    if (resp.match() == v1::GetBestResponse::MATCH_KIND_UNSPECIFIED) continue;
    BestRecord b;
    b.kernel_name = resp.kernel();
    b.source_hash = resp.source_hash();
    b.device.id = resp.device().id();
    b.device.name = resp.device().name();
    b.device.uuid = resp.device().uuid();
    b.device.architecture = resp.device().architecture();
    for (const auto& [name, v] : resp.problem()) b.problem[name] = v;
    b.objective = resp.objective();
    b.job_id = resp.job_id();
    b.key = resp.best().config().key();
    Json config = Json::MakeObject();
    for (const std::string& name : resp.best().config().names()) {
      auto it = resp.best().config().values().find(name);
      if (it == resp.best().config().values().end()) continue;
      const v1::ParameterValue& v = it->second;
      switch (v.kind_case()) {
        case v1::ParameterValue::kIntValue:
          config.Set(name, Json(static_cast<std::int64_t>(v.int_value())));
          break;
        case v1::ParameterValue::kFloatValue: config.Set(name, Json(v.float_value())); break;
        case v1::ParameterValue::kBoolValue: config.Set(name, Json(v.bool_value())); break;
        case v1::ParameterValue::kStringValue: config.Set(name, Json(v.string_value())); break;
        case v1::ParameterValue::KIND_NOT_SET: break;
      }
    }
    b.config_json = config.Dump();
    b.time_ms = resp.best().time_ms();
    b.loss = b.time_ms;
    const char* match = resp.match() == v1::GetBestResponse::NEAREST_PROBLEM ? "nearest_problem"
                        : resp.match() == v1::GetBestResponse::SAME_ARCHITECTURE
                            ? "same_architecture"
                            : "exact";
    // The answer to exactly this request, whatever the daemon fell back on.
    std::unique_ptr<TunedConfig> answer = Impl::Make(b, match, resp.source_differs());
    answer->tuning_job_id_ = resp.tuning_job_id();
    out->impl_->exact[key] = std::move(answer);
    out->impl_->records.push_back(std::move(b));
  }
  out->impl_->IndexRecords();
  return out;
}

const TunedConfig* BestConfigs::Find(const std::string& kernel, const std::string& device,
                                     const ProblemSize& problem) const {
  const std::string key = Impl::Key(kernel, device, problem);
  if (auto it = impl_->exact.find(key); it != impl_->exact.end()) return it->second.get();
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (auto it = impl_->found.find(key); it != impl_->found.end()) return it->second.get();
  BestQuery q;
  q.kernel = kernel;
  q.device = device;
  q.problem = problem;
  absl::StatusOr<BestMatch> m = SelectBestMatch(impl_->records, q);
  std::unique_ptr<TunedConfig> answer;
  if (m.ok()) answer = Impl::Make(m->best, BestMatchKindName(m->kind), false);
  const TunedConfig* p = answer.get();
  impl_->found[key] = std::move(answer);  // misses are remembered too
  return p;
}

std::unique_ptr<BestConfigs> BestConfigs::Refresh(std::string* error) const {
  if (!impl_->address.empty())
    return Connect(impl_->address, impl_->requests, impl_->options, error);
  return Open(impl_->database, impl_->kernels, error);
}

std::string BestConfigs::TuningJob(const std::string& kernel, const std::string& device,
                                   const ProblemSize& problem) const {
  auto it = impl_->tuning.find(Impl::Key(kernel, device, problem));
  return it == impl_->tuning.end() ? std::string() : it->second;
}

}  // namespace ktune
