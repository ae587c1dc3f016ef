// Replies of a measurement worker as the parent reads them: any bytes on
// the socket (length prefix included), received as a WorkerResponse; a
// measurement in it is taken in as the CUDA device takes it (status,
// samples to statistics, conditions).
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ktune/v1/worker.pb.h"
#include "tuner/ipc/subprocess.h"
#include "tuner/space/measurement.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace ktune;
  if (size > 65536) return 0;  // within one socket buffer: written at once
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return 0;
  FileDescriptor worker_end(fds[1]);
  MessageChannel parent{FileDescriptor(fds[0])};
  if (size > 0 && write(worker_end.get(), data, size) != static_cast<ssize_t>(size)) return 0;
  worker_end = FileDescriptor();  // the worker is gone after its reply
  v1::WorkerResponse resp;
  if (!parent.Receive(&resp, std::chrono::steady_clock::now() + std::chrono::milliseconds(50))
           .ok()) {
    return 0;
  }
  if (!resp.has_measurement()) return 0;
  const v1::WorkerMeasurement& w = resp.measurement();
  Measurement m;
  m.status = CandidateStatusFromProto(w.status());
  m.message = w.message();
  m.conditions = w.conditions();
  m.samples_ms.assign(w.samples_ms().begin(), w.samples_ms().end());
  m.stats = ComputeStats(m.samples_ms);
  m.time = m.stats.median;
  (void)RelativeStandardError(m.samples_ms);
  return 0;
}
