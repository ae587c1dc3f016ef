#include "tuner/compile/nvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune {

struct Nvrtc::Api {
  void* handle = nullptr;
  decltype(&::nvrtcGetErrorString) GetErrorString = nullptr;
  decltype(&::nvrtcVersion) Version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) GetNumSupportedArchs = nullptr;
  decltype(&::nvrtcGetSupportedArchs) GetSupportedArchs = nullptr;
  decltype(&::nvrtcCreateProgram) CreateProgram = nullptr;
  decltype(&::nvrtcDestroyProgram) DestroyProgram = nullptr;
  decltype(&::nvrtcCompileProgram) CompileProgram = nullptr;
  decltype(&::nvrtcGetCUBINSize) GetCUBINSize = nullptr;
  decltype(&::nvrtcGetCUBIN) GetCUBIN = nullptr;
  decltype(&::nvrtcGetProgramLogSize) GetProgramLogSize = nullptr;
  decltype(&::nvrtcGetProgramLog) GetProgramLog = nullptr;
  decltype(&::nvrtcAddNameExpression) AddNameExpression = nullptr;
  decltype(&::nvrtcGetLoweredName) GetLoweredName = nullptr;
};

namespace {

template <typename F>
bool Bind(void* handle, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(handle, name));
  return *out != nullptr;
}

absl::StatusOr<const Nvrtc::Api*> LoadApi() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("KTUNE_NVRTC"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  }
  for (const char* name :
       {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so"}) {
    candidates.emplace_back(name);
  }
  std::string tried;
  void* handle = nullptr;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) break;
    const char* err = dlerror();
    tried += StrCat("\n  ", c, ": ", err != nullptr ? err : "not found");
  }
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        StrCat("NVRTC (the CUDA runtime compiler) is not available; tried:", tried,
               "\nInstall the CUDA toolkit or set KTUNE_NVRTC to libnvrtc.so's path."));
  }
  auto api = std::make_unique<Nvrtc::Api>();
  api->handle = handle;
  const bool ok = Bind(handle, "nvrtcGetErrorString", &api->GetErrorString) &&
                  Bind(handle, "nvrtcVersion", &api->Version) &&
                  Bind(handle, "nvrtcGetNumSupportedArchs", &api->GetNumSupportedArchs) &&
                  Bind(handle, "nvrtcGetSupportedArchs", &api->GetSupportedArchs) &&
                  Bind(handle, "nvrtcCreateProgram", &api->CreateProgram) &&
                  Bind(handle, "nvrtcDestroyProgram", &api->DestroyProgram) &&
                  Bind(handle, "nvrtcCompileProgram", &api->CompileProgram) &&
                  Bind(handle, "nvrtcGetCUBINSize", &api->GetCUBINSize) &&
                  Bind(handle, "nvrtcGetCUBIN", &api->GetCUBIN) &&
                  Bind(handle, "nvrtcGetProgramLogSize", &api->GetProgramLogSize) &&
                  Bind(handle, "nvrtcGetProgramLog", &api->GetProgramLog) &&
                  Bind(handle, "nvrtcAddNameExpression", &api->AddNameExpression) &&
                  Bind(handle, "nvrtcGetLoweredName", &api->GetLoweredName);
  if (!ok) {
    return absl::FailedPreconditionError(
        "the loaded libnvrtc lacks functions ktune needs (too old; CUDA 11.1+ is needed)");
  }
  return api.release();  // lives for the process
}

// Owns an nvrtcProgram.
struct ProgramPtrDeleter {
  const Nvrtc::Api* api;
  using pointer = nvrtcProgram;
  void operator()(nvrtcProgram p) const noexcept {
    if (p != nullptr) api->DestroyProgram(&p);
  }
};

}  // namespace

int ParseArchitecture(const std::string& arch) {
  if (arch.size() < 4 || arch.rfind("sm_", 0) != 0) return -1;
  int v = 0;
  for (std::size_t i = 3; i < arch.size(); ++i) {
    if (arch[i] < '0' || arch[i] > '9') return -1;
    v = v * 10 + (arch[i] - '0');
    if (v > 10000) return -1;
  }
  return v;
}

absl::StatusOr<const Nvrtc*> Nvrtc::Get() {
  static absl::StatusOr<const Nvrtc*>* instance = [] {
    auto* result = new absl::StatusOr<const Nvrtc*>(absl::UnknownError(""));
    absl::StatusOr<const Api*> api = LoadApi();
    if (!api.ok()) {
      *result = api.status();
      return result;
    }
    auto* n = new Nvrtc();
    n->api_ = *api;
    (*api)->Version(&n->major_, &n->minor_);
    int count = 0;
    if ((*api)->GetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      n->archs_.resize(static_cast<std::size_t>(count));
      (*api)->GetSupportedArchs(n->archs_.data());
    }
    *result = n;
    return result;
  }();
  return *instance;
}

std::string Nvrtc::version_text() const { return StrCat(major_, ".", minor_); }

bool Nvrtc::has_minimal() const { return version() >= 12040; }

v1::CompileResult Nvrtc::Compile(const v1::CompileRequest& request) const {
  const auto start = std::chrono::steady_clock::now();
  const bool minimal =
      request.try_minimal() && has_minimal() &&
      std::none_of(request.options().begin(), request.options().end(),
                   [](const std::string& o) { return o == "-minimal" || o == "--minimal"; });
  v1::CompileResult out = CompileOnce(request, minimal);
  if (minimal && !out.ok() && out.error().empty()) {
    // The source may use what -minimal leaves out (textures, device-side
    // runtime calls, the runtime's types): the full front end decides, and
    // its log is the one a user sees.
    out = CompileOnce(request, false);
    out.set_minimal_refused(out.ok());
  }
  out.set_compile_ms(
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  return out;
}

v1::CompileResult Nvrtc::CompileOnce(const v1::CompileRequest& request, bool minimal) const {
  v1::CompileResult out;
  out.set_id(request.id());
  auto fail = [&](nvrtcResult rc, const char* call) {
    out.set_ok(false);
    out.set_error(StrCat(call, " failed: ", api_->GetErrorString(rc)));
    return out;
  };
  const int arch = ParseArchitecture(request.architecture());
  bool supported = false;
  for (int a : archs_) supported = supported || a == arch;
  if (!supported) {
    out.set_ok(false);
    std::string list;
    for (int a : archs_) list += StrCat(list.empty() ? "" : ", ", "sm_", a);
    out.set_log(StrCat("NVRTC ", version_text(), " cannot produce CUBIN for '",
                       request.architecture(), "' (it supports ", list, ")"));
    return out;
  }
  nvrtcProgram raw = nullptr;
  const std::string name = request.source_name().empty() ? "kernel.cu" : request.source_name();
  nvrtcResult rc =
      api_->CreateProgram(&raw, request.source().c_str(), name.c_str(), 0, nullptr, nullptr);
  if (rc != NVRTC_SUCCESS) return fail(rc, "nvrtcCreateProgram");
  std::unique_ptr<nvrtcProgram, ProgramPtrDeleter> program(raw, ProgramPtrDeleter{api_});
  if (request.is_name_expression()) {
    rc = api_->AddNameExpression(raw, request.kernel_expression().c_str());
    if (rc != NVRTC_SUCCESS) return fail(rc, "nvrtcAddNameExpression");
  }
  std::vector<std::string> options(request.options().begin(), request.options().end());
  options.push_back(StrCat("--gpu-architecture=", request.architecture()));
  if (minimal) options.push_back("-minimal");
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const std::string& o : options) argv.push_back(o.c_str());
  const nvrtcResult compiled =
      api_->CompileProgram(raw, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  if (api_->GetProgramLogSize(raw, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    std::string log(log_size, '\0');
    api_->GetProgramLog(raw, log.data());
    log.resize(log_size - 1);
    out.set_log(std::move(log));
  }
  if (compiled != NVRTC_SUCCESS) {
    out.set_ok(false);
    if (compiled != NVRTC_ERROR_COMPILATION) {
      out.set_log(StrCat(out.log(), out.log().empty() ? "" : "\n",
                         "nvrtcCompileProgram: ", api_->GetErrorString(compiled)));
    }
  } else {
    std::size_t size = 0;
    rc = api_->GetCUBINSize(raw, &size);
    if (rc != NVRTC_SUCCESS) return fail(rc, "nvrtcGetCUBINSize");
    std::string cubin(size, '\0');
    rc = api_->GetCUBIN(raw, cubin.data());
    if (rc != NVRTC_SUCCESS) return fail(rc, "nvrtcGetCUBIN");
    out.set_cubin(std::move(cubin));
    if (request.is_name_expression()) {
      const char* lowered = nullptr;
      rc = api_->GetLoweredName(raw, request.kernel_expression().c_str(), &lowered);
      if (rc != NVRTC_SUCCESS) return fail(rc, "nvrtcGetLoweredName");
      out.set_lowered_name(lowered);
    } else {
      out.set_lowered_name(request.kernel_expression());
    }
    out.set_ok(true);
  }
  return out;
}

}  // namespace ktune
