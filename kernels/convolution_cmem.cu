// 2D convolution with the filter in constant memory: out[y][x] is the sum
// over j < FH, i < FW of in[y + j][x + i] * filter[j][i], for a w x h
// output; in is (h + FH - 1) x (w + FW - 1), row-major. The filter is a
// `constant` argument of the job: ktune fills this __constant__ array
// after each candidate's module is loaded. Every thread of a warp reads
// the same filter element at once, which constant memory broadcasts.
// Tunable: block_size_x, block_size_y, tile_size_x, tile_size_y (macros);
// FW and FH are fixed by the job (kernel.defines).
__constant__ float filter[FH * FW];

extern "C" __global__ void __launch_bounds__(block_size_x * block_size_y)
    convolution_cmem(float* __restrict__ out, const float* __restrict__ in, int w, int h) {
  const int in_w = w + FW - 1;
  const int x0 = blockIdx.x * (block_size_x * tile_size_x) + threadIdx.x;
  const int y0 = blockIdx.y * (block_size_y * tile_size_y) + threadIdx.y;
  float sum[tile_size_y][tile_size_x];
#pragma unroll
  for (int ty = 0; ty < tile_size_y; ++ty) {
#pragma unroll
    for (int tx = 0; tx < tile_size_x; ++tx) sum[ty][tx] = 0.0f;
  }
  for (int j = 0; j < FH; ++j) {
    for (int i = 0; i < FW; ++i) {
      const float f = filter[j * FW + i];
#pragma unroll
      for (int ty = 0; ty < tile_size_y; ++ty) {
        const int y = y0 + ty * block_size_y;
#pragma unroll
        for (int tx = 0; tx < tile_size_x; ++tx) {
          const int x = x0 + tx * block_size_x;
          if (x < w && y < h) sum[ty][tx] += in[(y + j) * in_w + x + i] * f;
        }
      }
    }
  }
#pragma unroll
  for (int ty = 0; ty < tile_size_y; ++ty) {
#pragma unroll
    for (int tx = 0; tx < tile_size_x; ++tx) {
      const int x = x0 + tx * block_size_x;
      const int y = y0 + ty * block_size_y;
      if (x < w && y < h) out[y * w + x] = sum[ty][tx];
    }
  }
}
