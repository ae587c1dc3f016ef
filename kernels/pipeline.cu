// One chunk of a copy/compute pipeline: out[i] = f(in[i]) over n floats,
// with `work` rounds of arithmetic per element (a define of the job), so the
// kernel's time is comparable with the copies'. The pipeline job copies
// each chunk in, runs this, and copies it out, over several streams.
// Tunable here: block_size_x (as a macro); the pipeline's own parameters
// (streams, chunk size, pinned memory) are the job's.
extern "C" __global__ void __launch_bounds__(block_size_x)
    process(const float* __restrict__ in, float* __restrict__ out, unsigned long long n) {
  const unsigned long long stride = (unsigned long long)gridDim.x * block_size_x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)block_size_x + threadIdx.x; i < n;
       i += stride) {
    float v = in[i];
#pragma unroll 8
    for (int k = 0; k < work; ++k) v = fmaf(v, 0.999f, __sinf(v) * 1e-3f);
    out[i] = v;
  }
}
