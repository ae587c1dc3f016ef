// A job file, from its bytes to a resolved job: JSON and schema, the
// parameters, constraints and launch expressions, the space counted and
// sampled as a session starts it. Paths in it name a folder that does not
// exist, so nothing outside is read.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tuner/base/rng.h"
#include "tuner/session/job.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecJson(text, "fuzz.json");
  if (!spec.ok()) return 0;
  if (spec->kernel().source_case() == v1::Kernel::kFile) return 0;  // would read a file
  absl::StatusOr<Job> job = ResolveJob(*spec, "/nonexistent-ktune-fuzz");
  if (!job.ok()) return 0;
  (void)job->space->Count();
  Rng rng(1);
  for (int i = 0; i < 4; ++i) (void)job->space->Sample(rng);
  Space::Enumerator it = job->space->Enumerate();
  Config c;
  for (int i = 0; i < 16 && it.Next(&c); ++i) (void)job->objective.Loss(c, 1.0);
  (void)ArgumentBytes(*job);
  return 0;
}
