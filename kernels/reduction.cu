// The sum of n floats into out[0]: each block reduces a grid-stride range
// (tile_size_x elements per thread per step) through warp shuffles and
// shared memory, then adds its sum with one atomic. out[0] must be zero
// before each launch (it is an INOUT argument restored between samples).
// Tunable: block_size_x, tile_size_x; the grid (num_blocks) is tunable too.
extern "C" __global__ void __launch_bounds__(block_size_x)
    reduce_sum(float* __restrict__ out, const float* __restrict__ in, int n) {
  float sum = 0.0f;
  const int stride = gridDim.x * block_size_x * tile_size_x;
  for (int base = blockIdx.x * block_size_x * tile_size_x + threadIdx.x; base < n;
       base += stride) {
#pragma unroll
    for (int t = 0; t < tile_size_x; ++t) {
      const int i = base + t * block_size_x;
      if (i < n) sum += in[i];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[block_size_x / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = lane < block_size_x / 32 ? warp_sums[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) atomicAdd(out, sum);
  }
}
