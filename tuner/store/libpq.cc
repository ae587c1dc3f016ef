#include "tuner/store/libpq.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "tuner/base/strings.h"

namespace ktune::pg {
namespace {

// Set once, under LoadLibPq's lock, before any connection exists.
std::atomic<const LibPq*> loaded{nullptr};

template <typename F>
void Bind(void* handle, const char* name, F& f, std::string* missing) {
  f = reinterpret_cast<F>(dlsym(handle, name));
  if (f == nullptr && missing->empty()) *missing = name;
}

}  // namespace

absl::StatusOr<const LibPq*> LoadLibPqFrom(const char* soname) {
  void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(
        StrCat("a PostgreSQL database needs libpq, which could not be loaded (",
               why != nullptr ? why : soname,
               "); install it (Debian and Ubuntu: apt-get install libpq5) or use a SQLite file"));
  }
  auto api = std::make_unique<LibPq>();
  std::string missing;
#define KTUNE_BIND(name) Bind(h, #name, api->name, &missing)
  KTUNE_BIND(PQclear);
  KTUNE_BIND(PQcmdTuples);
  KTUNE_BIND(PQconnectdb);
  KTUNE_BIND(PQconninfoFree);
  KTUNE_BIND(PQconninfoParse);
  KTUNE_BIND(PQerrorMessage);
  KTUNE_BIND(PQexec);
  KTUNE_BIND(PQexecParams);
  KTUNE_BIND(PQfinish);
  KTUNE_BIND(PQfreemem);
  KTUNE_BIND(PQgetResult);
  KTUNE_BIND(PQgetisnull);
  KTUNE_BIND(PQgetlength);
  KTUNE_BIND(PQgetvalue);
  KTUNE_BIND(PQntuples);
  KTUNE_BIND(PQputCopyData);
  KTUNE_BIND(PQputCopyEnd);
  KTUNE_BIND(PQreset);
  KTUNE_BIND(PQresultErrorField);
  KTUNE_BIND(PQresultErrorMessage);
  KTUNE_BIND(PQresultStatus);
  KTUNE_BIND(PQsetNoticeProcessor);
  KTUNE_BIND(PQstatus);
  KTUNE_BIND(PQunescapeBytea);
#undef KTUNE_BIND
  if (!missing.empty()) {
    dlclose(h);
    return absl::FailedPreconditionError(
        StrCat("the libpq found (", soname, ") has no ", missing,
               "; a PostgreSQL database needs libpq 10 or later (Debian and Ubuntu: libpq5)"));
  }
  // Kept loaded for the life of the process, as the connections it makes.
  return api.release();
}

absl::StatusOr<const LibPq*> LoadLibPq() {
  // Loaded once; a failure is reported again on the next attempt (the
  // library may have been installed since).
  static std::mutex* const mu = new std::mutex;
  std::lock_guard<std::mutex> lock(*mu);
  if (const LibPq* api = loaded.load(std::memory_order_acquire)) return api;
  absl::StatusOr<const LibPq*> api = LoadLibPqFrom("libpq.so.5");
  if (api.ok()) loaded.store(*api, std::memory_order_release);
  return api;
}

const LibPq& Pq() {
  const LibPq* api = loaded.load(std::memory_order_acquire);
  if (api == nullptr) {
    std::fprintf(stderr, "ktune: fatal: libpq used before it was loaded\n");
    std::abort();
  }
  return *api;
}

}  // namespace ktune::pg
