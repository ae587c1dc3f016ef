// Compilation for the GPU: a pool of NVRTC worker processes behind a cache
// of CUBIN images (in memory and on disk).
//
// NVRTC scales poorly across threads of one process and well across
// processes, so each worker is a process compiling one kernel at a time;
// a compile that runs past its deadline or its memory limit costs that
// process, which is restarted, and becomes a compile error of its candidate.
#ifndef KTUNE_TUNER_COMPILE_COMPILE_POOL_H_
#define KTUNE_TUNER_COMPILE_COMPILE_POOL_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"

namespace ktune {

// Compiled images keyed by a hash of source, options, kernel expression,
// architecture and NVRTC version. Compile errors are cached too (they are
// as deterministic as successes). Thread-safe.
class CompileCache {
 public:
  // `dir` empty: memory only. Otherwise images are also kept as files there
  // (created on first write).
  explicit CompileCache(std::string dir) : dir_(std::move(dir)) {}

  static std::string Key(const v1::CompileRequest& request, const std::string& nvrtc_version);

  std::optional<v1::CompileResult> Get(const std::string& key);
  void Put(const std::string& key, const v1::CompileResult& result);

  // The default folder: $KTUNE_CACHE_DIR, else $XDG_CACHE_HOME/ktune/cubin,
  // else $HOME/.cache/ktune/cubin; empty if none can be found.
  static std::string DefaultDir();

 private:
  std::string dir_;
  std::mutex mu_;
  std::unordered_map<std::string, v1::CompileResult> memory_;
};

struct CompilePoolOptions {
  // The worker command: runs RunCompileWorker (e.g.
  // {"/path/ktune-worker", "__worker", "compile"}).
  std::vector<std::string> worker_argv;
  int workers = 1;
  std::chrono::milliseconds timeout{120'000};  // per compile
  std::int64_t memory_limit_bytes = std::int64_t{16} << 30;
  std::string cache_dir;      // see CompileCache
  std::string nvrtc_version;  // part of the cache key
  // Compile with NVRTC's -minimal first (see Nvrtc::Compile); a source that
  // needs the full front end once gets it for every later variant.
  bool minimal = true;
  // Start the worker processes now and have each compile a tiny kernel, so
  // the first job finds NVRTC loaded and warm (otherwise on first use).
  bool start_warm = false;
  // Scheduling niceness of the worker processes (0 to 19): above 0 the
  // compilers yield the CPU to the measurement side, whose host work the
  // GPU waits for.
  int nice = 0;
};

// What a pool is doing, at one moment.
struct CompilePoolStats {
  int workers = 0;
  int busy = 0;              // workers compiling now
  std::int64_t backlog = 0;  // compiles waiting for a worker
  std::int64_t compiled = 0;
  std::int64_t cache_hits = 0;
  double busy_seconds = 0;  // summed over workers, since the pool started
};

// Thread-safe. The destructor stops the workers (pending futures get an
// error result).
class CompilePool {
 public:
  static absl::StatusOr<std::unique_ptr<CompilePool>> Start(CompilePoolOptions options);
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  // Queues `request` (its id is replaced). Cached results are ready at once.
  std::shared_future<v1::CompileResult> Submit(v1::CompileRequest request);

  int workers() const { return static_cast<int>(threads_.size()); }
  // Compiles actually run by workers (cache misses), and cache hits.
  std::int64_t compiled() const;
  std::int64_t cache_hits() const;
  CompilePoolStats stats() const;

 private:
  struct Task {
    v1::CompileRequest request;
    std::string key;
    std::promise<v1::CompileResult> promise;
  };

  explicit CompilePool(CompilePoolOptions options);
  void WorkerLoop(int index);

  CompilePoolOptions options_;
  CompileCache cache_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  // Identical requests in flight share one compile.
  std::unordered_map<std::string, std::shared_future<v1::CompileResult>> in_flight_;
  bool stopping_ = false;
  std::uint64_t next_id_ = 1;
  std::int64_t compiled_ = 0;
  std::int64_t hits_ = 0;
  int busy_ = 0;
  // Time workers spent on finished compiles; those under way count from
  // their start (busy_since_).
  std::chrono::steady_clock::duration busy_time_{};
  std::vector<std::optional<std::chrono::steady_clock::time_point>> busy_since_;
  // Sources (by hash) that -minimal cannot compile.
  std::unordered_set<std::size_t> needs_full_;
  std::vector<std::thread> threads_;
};

// The compile worker's main loop: reads CompileRequests from the parent,
// answers CompileResults. Flags: --memory-limit BYTES, --nice N, --warm
// (compile a tiny kernel before the first request). Returns the exit code.
// `before_each`, when given, sees each request before it is compiled (a
// test's fake worker dies or hangs there).
int RunCompileWorker(const std::vector<std::string>& args,
                     const std::function<void(const v1::CompileRequest&)>& before_each = {});

}  // namespace ktune

#endif  // KTUNE_TUNER_COMPILE_COMPILE_POOL_H_
