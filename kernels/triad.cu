// STREAM triad, a[i] = b[i] + s * c[i], over n floats: purely memory-bound.
// A grid-stride loop over vectors of `vector_width` floats, so the grid size
// is a parameter of its own (grid_blocks; 0 means one thread per vector).
// Tunable: block_size_x, grid_blocks, vector_width (as macros).
template <int W>
struct Vec;
template <>
struct Vec<1> {
  using T = float;
};
template <>
struct Vec<2> {
  using T = float2;
};
template <>
struct Vec<4> {
  using T = float4;
};

__device__ __forceinline__ float triad(float b, float c, float s) { return b + s * c; }
__device__ __forceinline__ float2 triad(float2 b, float2 c, float s) {
  return make_float2(b.x + s * c.x, b.y + s * c.y);
}
__device__ __forceinline__ float4 triad(float4 b, float4 c, float s) {
  return make_float4(b.x + s * c.x, b.y + s * c.y, b.z + s * c.z, b.w + s * c.w);
}

extern "C" __global__ void __launch_bounds__(block_size_x)
    triad_kernel(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
                 float s, unsigned long long n) {
  using V = typename Vec<vector_width>::T;
  const unsigned long long vectors = n / vector_width;
  V* av = reinterpret_cast<V*>(a);
  const V* bv = reinterpret_cast<const V*>(b);
  const V* cv = reinterpret_cast<const V*>(c);
  const unsigned long long stride = (unsigned long long)gridDim.x * block_size_x;
  for (unsigned long long i = blockIdx.x * (unsigned long long)block_size_x + threadIdx.x;
       i < vectors; i += stride) {
    av[i] = triad(bv[i], cv[i], s);
  }
  // The tail when n is not a multiple of the vector width.
  const unsigned long long tail = vectors * vector_width;
  const unsigned long long t = tail + blockIdx.x * (unsigned long long)block_size_x + threadIdx.x;
  if (t < n) a[t] = b[t] + s * c[t];
}
