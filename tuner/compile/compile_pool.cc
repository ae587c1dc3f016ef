#include "tuner/compile/compile_pool.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "absl/status/status.h"
#include "tuner/base/file.h"
#include "tuner/base/sha256.h"
#include "tuner/base/strings.h"
#include "tuner/compile/nvrtc.h"
#include "tuner/ipc/subprocess.h"

// Built with AddressSanitizer or ThreadSanitizer (GCC and clang say so
// differently).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KTUNE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KTUNE_SANITIZED 1
#endif
#endif
#ifndef KTUNE_SANITIZED
#define KTUNE_SANITIZED 0
#endif

namespace ktune {

std::string CompileCache::Key(const v1::CompileRequest& request, const std::string& nvrtc_version) {
  Sha256 h;
  auto field = [&](std::string_view s) {
    h.Update(StrCat(s.size(), ":"));
    h.Update(s);
  };
  field("ktune cubin v1");
  field(nvrtc_version);
  field(request.architecture());
  field(request.kernel_expression());
  field(request.is_name_expression() ? "name" : "plain");
  field(request.source());
  for (const std::string& o : request.options()) field(o);
  return h.FinishHex();
}

std::optional<v1::CompileResult> CompileCache::Get(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) return it->second;
  }
  if (dir_.empty()) return std::nullopt;
  absl::StatusOr<std::string> bytes = ReadFileContents(StrCat(dir_, "/", key, ".bin"));
  if (!bytes.ok()) return std::nullopt;
  v1::CompileResult r;
  if (!r.ParseFromString(*bytes) || !r.error().empty()) return std::nullopt;  // corrupt: recompile
  std::lock_guard<std::mutex> lock(mu_);
  memory_.emplace(key, r);
  return r;
}

void CompileCache::Put(const std::string& key, const v1::CompileResult& result) {
  if (!result.error().empty()) return;  // infrastructure failures are not results
  {
    std::lock_guard<std::mutex> lock(mu_);
    memory_[key] = result;
  }
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  // A cache that cannot be written only costs recompiles.
  (void)WriteFileAtomically(StrCat(dir_, "/", key, ".bin"), result.SerializeAsString());
}

std::string CompileCache::DefaultDir() {
  if (const char* d = std::getenv("KTUNE_CACHE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return StrCat(x, "/ktune/cubin");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return StrCat(home, "/.cache/ktune/cubin");
  }
  return std::string();
}

CompilePool::CompilePool(CompilePoolOptions options)
    : options_(std::move(options)), cache_(options_.cache_dir) {}

absl::StatusOr<std::unique_ptr<CompilePool>> CompilePool::Start(CompilePoolOptions options) {
  if (options.worker_argv.empty()) {
    return absl::InvalidArgumentError("compile pool: no worker command");
  }
  if (options.workers < 1) options.workers = 1;
  std::unique_ptr<CompilePool> pool(new CompilePool(std::move(options)));
  pool->busy_since_.resize(static_cast<std::size_t>(pool->options_.workers));
  for (int i = 0; i < pool->options_.workers; ++i) {
    pool->threads_.emplace_back([p = pool.get(), i] { p->WorkerLoop(i); });
  }
  return pool;
}

CompilePool::~CompilePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  for (Task& t : queue_) {
    v1::CompileResult r;
    r.set_id(t.request.id());
    r.set_error("compile pool stopped");
    t.promise.set_value(r);
  }
}

std::shared_future<v1::CompileResult> CompilePool::Submit(v1::CompileRequest request) {
  const std::string key = CompileCache::Key(request, options_.nvrtc_version);
  std::unique_lock<std::mutex> lock(mu_);
  request.set_id(next_id_++);
  if (auto it = in_flight_.find(key); it != in_flight_.end()) {
    ++hits_;
    return it->second;
  }
  lock.unlock();
  if (std::optional<v1::CompileResult> cached = cache_.Get(key)) {
    std::promise<v1::CompileResult> p;
    cached->set_id(request.id());
    p.set_value(*std::move(cached));
    lock.lock();
    ++hits_;
    return p.get_future().share();
  }
  lock.lock();
  request.set_try_minimal(options_.minimal &&
                          needs_full_.count(std::hash<std::string>()(request.source())) == 0);
  Task task;
  task.request = std::move(request);
  task.key = key;
  std::shared_future<v1::CompileResult> f = task.promise.get_future().share();
  in_flight_.emplace(key, f);
  queue_.push_back(std::move(task));
  lock.unlock();
  cv_.notify_one();
  return f;
}

std::int64_t CompilePool::compiled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiled_;
}

std::int64_t CompilePool::cache_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

CompilePoolStats CompilePool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CompilePoolStats s;
  s.workers = workers();
  s.busy = busy_;
  s.backlog = static_cast<std::int64_t>(queue_.size());
  s.compiled = compiled_;
  s.cache_hits = hits_;
  std::chrono::steady_clock::duration busy = busy_time_;
  const auto now = std::chrono::steady_clock::now();
  for (const auto& since : busy_since_) {
    if (since) busy += now - *since;
  }
  s.busy_seconds = std::chrono::duration<double>(busy).count();
  return s;
}

void CompilePool::WorkerLoop(int index) {
  std::optional<Subprocess> worker;
  auto start = [&]() -> absl::Status {
    std::vector<std::string> argv = options_.worker_argv;
    argv.push_back("--memory-limit");
    argv.push_back(std::to_string(options_.memory_limit_bytes));
    if (options_.start_warm) argv.push_back("--warm");
    if (options_.nice > 0) {
      argv.push_back("--nice");
      argv.push_back(std::to_string(std::min(options_.nice, 19)));
    }
    absl::StatusOr<Subprocess> started = Subprocess::Start(argv);
    if (!started.ok()) return started.status();
    worker.emplace(*std::move(started));
    return absl::OkStatus();
  };
  // A failure here is reported with the first task.
  if (options_.start_warm) (void)start();
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      task = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      busy_since_[static_cast<std::size_t>(index)] = std::chrono::steady_clock::now();
    }
    v1::CompileResult result;
    result.set_id(task.request.id());
    bool cacheable = true;  // not a timeout or a dead worker: those may pass
    if (!worker) {
      if (absl::Status s = start(); !s.ok()) {
        result.set_error(StrCat("compile worker ", index, ": ", s.message()));
      }
    }
    if (worker) {
      const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
      absl::Status s = worker->channel().Send(task.request);
      if (s.ok()) s = worker->channel().Receive(&result, deadline);
      if (!s.ok()) {
        const std::string how = worker->Kill();
        worker.reset();
        cacheable = false;
        result.Clear();
        result.set_id(task.request.id());
        result.set_ok(false);
        if (s.code() == absl::StatusCode::kDeadlineExceeded) {
          result.set_log(StrCat("compilation stopped after its time limit of ",
                                options_.timeout.count() / 1000.0, " s"));
        } else {
          result.set_log(StrCat("the compiler process died (", how,
                                "; out of memory past its limit of ",
                                options_.memory_limit_bytes >> 20, " MiB, or a crash)"));
        }
      }
    }
    if (cacheable) cache_.Put(task.key, result);
    std::lock_guard<std::mutex> lock(mu_);
    if (result.minimal_refused()) {
      needs_full_.insert(std::hash<std::string>()(task.request.source()));
    }
    ++compiled_;
    --busy_;
    auto& since = busy_since_[static_cast<std::size_t>(index)];
    busy_time_ += std::chrono::steady_clock::now() - *since;
    since.reset();
    in_flight_.erase(task.key);
    task.promise.set_value(std::move(result));
  }
}

int RunCompileWorker(const std::vector<std::string>& args,
                     const std::function<void(const v1::CompileRequest&)>& before_each) {
  DieWithParent();
  const bool warm = std::find(args.begin(), args.end(), "--warm") != args.end();
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--nice") {
      const int n = std::atoi(args[i + 1].c_str());
      if (n > 0 && n <= 19) (void)setpriority(PRIO_PROCESS, 0, n);
    }
    if (args[i] == "--memory-limit") {
#if !KTUNE_SANITIZED  // the sanitizers reserve terabytes of address space
      const rlim_t limit = std::strtoull(args[i + 1].c_str(), nullptr, 10);
      if (limit > 0) {
        rlimit rl{limit, limit};
        setrlimit(RLIMIT_AS, &rl);
      }
#endif
    }
  }
  MessageChannel channel = ParentChannel();
  absl::StatusOr<const Nvrtc*> nvrtc = Nvrtc::Get();
  if (warm && nvrtc.ok() && !(*nvrtc)->supported_archs().empty()) {
    // NVRTC's first compile in a process also loads its builtins: pay that
    // before any request.
    v1::CompileRequest r;
    r.set_source("extern \"C\" __global__ void ktune_warm(float* x) { x[threadIdx.x] += 1.0f; }");
    r.set_kernel_expression("ktune_warm");
    r.set_architecture(StrCat("sm_", (*nvrtc)->supported_archs().back()));
    r.set_try_minimal(true);
    (void)(*nvrtc)->Compile(r);
  }
  while (true) {
    v1::CompileRequest request;
    if (!channel.Receive(&request).ok()) return 0;  // parent gone or done
    if (before_each) before_each(request);
    v1::CompileResult result;
    if (!nvrtc.ok()) {
      result.set_id(request.id());
      result.set_error(std::string(nvrtc.status().message()));
    } else {
      result = (*nvrtc)->Compile(request);
    }
    if (!channel.Send(result).ok()) return 0;
  }
}

}  // namespace ktune
