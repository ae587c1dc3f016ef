// What a job asks of a GPU, worked out from its spec before any GPU work:
// the measurement worker's set-up (arguments with their contents, the
// benchmark settings, what is verified against what, the load, the
// pipeline), the kernels to compile besides the candidates (a reference,
// companions), and for each configuration its launch (grid, block, shared
// memory, scalars, instances and streams, pipeline chunks) or why it
// cannot launch. Pure: no processes, no GPU, no compiler; tested on any
// machine.
#ifndef KTUNE_TUNER_DEVICE_JOB_PLAN_H_
#define KTUNE_TUNER_DEVICE_JOB_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ktune/v1/worker.pb.h"
#include "tuner/device/device.h"
#include "tuner/expr/expr.h"

namespace ktune {

// What the plan needs to know of the GPU.
struct PlanTarget {
  int ordinal = 0;
  std::string architecture;  // "sm_90"
  std::int64_t memory_bytes = 0;
  int multiprocessors = 0;
};

// Defaults of the benchmark protocol (documented with the job file).
inline constexpr double kDefaultAtol = 1e-5;
inline constexpr double kDefaultRtol = 1e-4;

// Value type. The job's space must outlive it.
class JobPlan {
 public:
  // INVALID_ARGUMENT naming the field (and for expressions the fault) when
  // the spec cannot run on a GPU: no source or grid, a buffer that depends
  // on the parameters or does not fit, an unknown verified output, a file
  // that cannot be read.
  static absl::StatusOr<JobPlan> Make(const JobBinding& job, const PlanTarget& target);

  // The worker's set-up; the companions' images are filled in by
  // SetCompanionImage.
  const v1::WorkerSetup& setup() const { return setup_; }

  // The load's companion kernels to compile, in order.
  const std::vector<v1::CompileRequest>& companion_requests() const { return companion_requests_; }
  // The image of companion `index` as compiled. INVALID_ARGUMENT (with the
  // log) when it did not compile; INTERNAL for a compiler failure.
  absl::Status SetCompanionImage(int index, const v1::CompileResult& compiled);

  // The reference (a configuration or a kernel of its own), when the job
  // has one: what to compile, and the candidate that makes it once the
  // image is in.
  const std::optional<v1::CompileRequest>& reference_request() const { return reference_request_; }
  const v1::WorkerCandidate& reference_template() const { return reference_template_; }

  // The request that compiles `config`.
  v1::CompileRequest CompileRequestFor(const Config& config) const;

  // Fills `c`'s launch for `config`. A configuration that cannot launch
  // (a dimension out of range, an expression that fails) sets *why and
  // leaves `c` partly filled; the status is an error only for a broken
  // plan.
  absl::Status LaunchFor(const Config& config, v1::WorkerCandidate* c, std::string* why) const;

  // Whether candidates are verified before timing.
  bool verifies() const { return !setup_.verified().empty() || (pipeline_ && reference_request_); }
  v1::LoadProfile::Kind load_kind() const { return load_kind_; }
  bool pipeline() const { return pipeline_; }
  std::int64_t pipeline_bytes() const { return pipe_bytes_; }
  // The spec's cap on one launch (0: derived from the best time).
  Millis kernel_timeout() const { return kernel_timeout_; }
  Millis max_candidate_time() const { return max_candidate_; }

 private:
  struct ScalarArg {
    Expr expr;
    v1::ElementType type;
  };

  JobPlan() = default;
  absl::Status PlanLaunch(const v1::JobSpec& spec);
  absl::Status PlanArguments(const v1::JobSpec& spec, const PlanTarget& target);
  absl::Status PlanSettings(const v1::JobSpec& spec);
  absl::Status PlanLoad(const v1::JobSpec& spec, const PlanTarget& target);
  absl::Status PlanCompanion(const v1::CompanionKernel& ck, int index, v1::WorkerCompanion* out);
  absl::Status PlanPipeline(const v1::JobSpec& spec, const PlanTarget& target);
  absl::Status PlanExpectedData(const v1::JobSpec& spec);
  absl::Status PlanReference(const v1::JobSpec& spec);
  absl::StatusOr<Expr> Compile(const std::string& field, const std::string& text,
                               ValueType type);

  const Space* space_ = nullptr;
  v1::JobSpec spec_;
  std::string source_;
  std::string base_dir_;
  std::string arch_;
  SymbolTable symbols_;
  std::vector<std::vector<Scalar>> param_scalars_;
  v1::WorkerSetup setup_;
  std::vector<std::string> buffer_names_;  // by buffer index
  std::vector<Expr> block_, grid_;
  std::optional<Expr> shared_bytes_;
  std::vector<ScalarArg> scalars_;
  v1::LoadProfile::Kind load_kind_ = v1::LoadProfile::ISOLATED;
  std::optional<Expr> instances_, streams_;  // CONCURRENT
  bool pipeline_ = false;
  std::optional<Expr> pipe_chunk_, pipe_streams_, pipe_pinned_;
  std::int64_t pipe_bytes_ = 0;
  Millis kernel_timeout_{0};
  Millis max_candidate_{1000};
  std::vector<v1::CompileRequest> companion_requests_;
  std::optional<v1::CompileRequest> reference_request_;
  v1::WorkerCandidate reference_template_;
};

}  // namespace ktune

#endif  // KTUNE_TUNER_DEVICE_JOB_PLAN_H_
