// A kernel that misbehaves on purpose, one way per value of `mode`, for
// testing that failures are recorded and the job goes on:
//   0, 1  correct (y = 2x)
//   2     illegal memory access
//   3     never returns
//   4     does not compile
//   5     asks for too much shared memory (see the job's launch)
//   6     wrong result
//   7     writes one element past the end of y
extern "C" __global__ void faults(float* __restrict__ y, const float* __restrict__ x, int n) {
  const int i = blockIdx.x * block_size_x + threadIdx.x;
#if mode == 2
  if (i == 0) *reinterpret_cast<volatile float*>(static_cast<unsigned long long>(16)) = 1.0f;
#elif mode == 3
  // A branch to itself, written in PTX: the compiler cannot remove it.
  if (i == 0) asm volatile("ktune_hang: bra ktune_hang;");
#elif mode == 4
  this is not CUDA;
#elif mode == 6
  if (i < n) y[i] = x[i] + 1.0f;
  return;
#elif mode == 7
  if (i == 0) y[n] = 0.0f;
#endif
  if (i < n) y[i] = 2.0f * x[i];
}
