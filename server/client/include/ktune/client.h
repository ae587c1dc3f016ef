// ktune's run-time client library: the best tuned configuration of a kernel
// for a device and a problem, looked up in process.
//
//   #include <ktune/client.h>
//   std::string error;
//   auto best = ktune::BestConfigs::Open("results.db", {"gemm"}, &error);
//   if (const ktune::TunedConfig* c = best->Find("gemm", "NVIDIA H200", {{"M", 4096}})) {
//     launch(c->Int("block_size_x", 16), ...);
//   }
//
// Open (a database file or a fleet's PostgreSQL URI, read once) or Connect (a ktuned daemon, asked
// once per request) load the answers; Find then answers from memory without I/O: the exact device
// and problem, else the nearest problem size on that device (log scale), else the same kernel on
// another device of the same architecture. CMake: find_package(ktune) and link ktune::client.
#ifndef KTUNE_CLIENT_H_
#define KTUNE_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#if defined(__GNUC__)
#define KTUNE_CLIENT_API __attribute__((visibility("default")))
#else
#define KTUNE_CLIENT_API
#endif

namespace ktune {

using ProblemSize = std::map<std::string, std::int64_t>;

// One tuned configuration. Values are read by parameter name; a missing
// name (or one of another type) gives the fallback.
class KTUNE_CLIENT_API TunedConfig {
 public:
  std::int64_t Int(const std::string& name, std::int64_t fallback) const;
  double Float(const std::string& name, double fallback) const;
  bool Bool(const std::string& name, bool fallback) const;
  std::string String(const std::string& name, const std::string& fallback) const;
  bool Has(const std::string& name) const;

  const std::string& kernel() const { return kernel_; }
  const std::string& key() const { return key_; }  // values joined by commas
  const std::string& device() const { return device_; }
  const std::string& architecture() const { return architecture_; }
  const ProblemSize& problem() const { return problem_; }  // what was tuned
  double time_ms() const { return time_ms_; }
  // How it was found: "exact", "nearest_problem" or "same_architecture".
  const std::string& match() const { return match_; }
  bool source_differs() const { return source_differs_; }
  const std::string& job_id() const { return job_id_; }
  // From a daemon asked with tune_on_miss: the job tuning the exact problem
  // when this answer is a fallback (empty when none was queued).
  const std::string& tuning_job_id() const { return tuning_job_id_; }

 private:
  friend class BestConfigs;
  struct Value {
    enum Kind { kInt, kFloat, kBool, kString } kind = kInt;
    std::int64_t i = 0;
    double f = 0;
    std::string s;
  };
  std::string kernel_, key_, device_, architecture_, match_ = "exact", job_id_, tuning_job_id_;
  ProblemSize problem_;
  double time_ms_ = 0;
  bool source_differs_ = false;
  std::map<std::string, Value> values_;
};

struct ConnectOptions {
  std::string token_file;  // bearer token, for a daemon that asks one
  std::string tls_ca;      // PEM file: use TLS, trusting this CA
  double timeout_s = 10;   // deadline of each call
};

// What to ask a daemon: a kernel on a device (name, id or UUID; empty: any)
// for a problem.
struct BestRequest {
  std::string kernel;
  std::string device;
  ProblemSize problem;
  std::string source_hash;  // optional: told when the stored source differs
  // When the daemon has nothing exact, have it tune this exact kernel,
  // device and problem (once, whoever asks): with the job file in
  // `spec_json` (proto3 JSON, as ktune tune reads), or else the spec of
  // the job the fallback came from. Refresh later for the exact answer.
  bool tune_on_miss = false;
  std::string spec_json;
};

class KTUNE_CLIENT_API BestConfigs {
 public:
  // Every best configuration of these kernels in the database (read only):
  // a SQLite file, or a PostgreSQL URI (postgresql://USER@HOST/DB). nullptr
  // with *error set when it cannot be read or holds none.
  static std::unique_ptr<BestConfigs> Open(const std::string& database,
                                           const std::vector<std::string>& kernels,
                                           std::string* error);
  // The daemon's answer to each request. Requests it cannot answer
  // (NOT_FOUND) are left out; any other failure gives nullptr and *error.
  static std::unique_ptr<BestConfigs> Connect(const std::string& address,
                                              const std::vector<BestRequest>& requests,
                                              const ConnectOptions& options, std::string* error);

  ~BestConfigs();
  BestConfigs(const BestConfigs&) = delete;
  BestConfigs& operator=(const BestConfigs&) = delete;

  // The best configuration for `kernel` on `device` for `problem`, through
  // the fallback chain; nullptr when nothing loaded fits. Thread-safe; no
  // I/O. The pointer stays valid as long as this object.
  const TunedConfig* Find(const std::string& kernel, const std::string& device,
                          const ProblemSize& problem) const;

  std::size_t size() const;  // configurations loaded

  // The same requests asked again (or the database read again), as a new
  // object: answers that were fallbacks may be exact now. This object and
  // its pointers stay valid. nullptr with *error as Open or Connect.
  std::unique_ptr<BestConfigs> Refresh(std::string* error) const;

  // For a request with tune_on_miss: the job the daemon queued for its
  // exact problem (also when it had no answer at all yet); empty if none.
  std::string TuningJob(const std::string& kernel, const std::string& device,
                        const ProblemSize& problem) const;

 private:
  BestConfigs();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ktune

#endif  // KTUNE_CLIENT_H_
