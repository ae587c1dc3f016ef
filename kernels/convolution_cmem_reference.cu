// The reference for convolution_cmem: one thread per output, the filter
// from the same __constant__ array (ktune fills the reference's module
// too), summed in the same order.
__constant__ float filter[FH * FW];

extern "C" __global__ void convolution_cmem_reference(float* out, const float* in, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  const int in_w = w + FW - 1;
  float sum = 0.0f;
  for (int j = 0; j < FH; ++j) {
    for (int i = 0; i < FW; ++i) sum += in[(y + j) * in_w + x + i] * filter[j * FW + i];
  }
  out[y * w + x] = sum;
}
