// The measurement worker: one process per GPU, the only ktune process that
// talks to the CUDA driver. The parent drives it over a socket with
// WorkerRequest / WorkerResponse messages and kills it when a candidate
// hangs or leaves the context unusable; a fresh worker then takes over.
//
// The benchmark protocol it runs for each candidate:
//  1. load the CUBIN, check the launch against the kernel's limits;
//  2. one untimed launch on restored inputs and poisoned outputs, which is
//     also the verification run (outputs compared with the reference on the
//     GPU under atol/rtol, NaN never equal; guard zones around every buffer
//     catch stray writes); a wrong kernel is never timed;
//  3. a busy warm-up after start or any idle gap;
//  4. samples timed with events on the launch stream, several launches a
//     sample (or a CUDA graph) for kernels shorter than a threshold; inputs
//     the kernel modifies are restored and L2 is optionally flushed before
//     each sample, outside the events;
//  5. at least min_samples, stopping when the relative standard error of
//     the mean is under the target, at max_samples or at the time cap, or
//     early (racing) once the candidate is clearly slower than the best;
//  6. the SM clock before and after, and samples taken while the GPU was
//     thermally or hardware throttled are discarded.
//
// The parts: worker.h (the protocol for one candidate), buffers.h,
// verification.h, canary.h and load.h, pipeline.h, clock_sampler.h,
// sampling_policy.h (when to stop, decided on the CPU), helper_kernels.h.
#ifndef KTUNE_TUNER_MEASURE_MEASURE_WORKER_H_
#define KTUNE_TUNER_MEASURE_MEASURE_WORKER_H_

#include <string>
#include <vector>

namespace ktune {

// The worker's main loop. Returns the process exit code.
int RunMeasureWorker(const std::vector<std::string>& args);

}  // namespace ktune

#endif  // KTUNE_TUNER_MEASURE_MEASURE_WORKER_H_
