// y = a * x + y over n floats. Each thread handles tile_size_x elements,
// block_size_x apart, so that a warp's accesses stay coalesced.
// Tunable: block_size_x, tile_size_x (as macros).
extern "C" __global__ void __launch_bounds__(block_size_x)
    saxpy(float* __restrict__ y, const float* __restrict__ x, float a, int n) {
  const int base = blockIdx.x * (block_size_x * tile_size_x) + threadIdx.x;
#pragma unroll
  for (int t = 0; t < tile_size_x; ++t) {
    const int i = base + t * block_size_x;
    if (i < n) y[i] = a * x[i] + y[i];
  }
}
