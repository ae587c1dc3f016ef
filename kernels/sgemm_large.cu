// C = A * B in fp32 on the CUDA cores (no tensor cores), row-major, M x K
// times K x N: a warp-tiled SGEMM whose every design choice is a tunable
// parameter, for a space of tens of thousands of configurations.
//
// A block of THREADS = 32 * (BM / WM) * (BN / WN) threads computes a BM x BN
// tile of C, walking its share of K (K / SPLITK, blockIdx.z picking which)
// in steps of BK through STAGES shared-memory buffers: with STAGES >= 2 the
// next tiles are copied by cp.async (VEC floats at a time) while the
// current one is multiplied; with STAGES == 1 loads and compute alternate.
// Each warp owns a WM x WN tile, split into WMITER x WNITER sub-tiles; a
// thread computes a TM x TN register tile of each (TM consecutive rows, TN
// consecutive columns), so a warp's reads of B are consecutive vectors and
// its reads of A broadcasts. The inner k loop is unrolled UNROLL times.
// A is kept row-major in shared memory with rows padded by 4 floats (no
// transpose, so cp.async can copy it; the padding spreads a column's rows
// over the banks).
//
// With SPLITK > 1 each split writes its partial tile to `workspace`
// (SPLITK x M x N floats); the last split of a tile to arrive (a counter per
// tile, left at zero again) adds them in split order and writes C.
//
// Requires M % BM == 0, N % BN == 0, K % (BK * SPLITK) == 0 (the job's
// constraints), sm_80 or later for cp.async.
#define THREADS (32 * (BM / WM) * (BN / WN))
#define WMITER ((WM * WN) / (32 * TM * TN * WNITER))
#define WSUBM (WM / WMITER)
#define WSUBN (WN / WNITER)
#define AS_STRIDE (BK + 4)
#define STAGE_FLOATS (BM * AS_STRIDE + BK * BN)
#define KTUNE_PRAGMA(x) _Pragma(#x)
#define KTUNE_UNROLL(n) KTUNE_PRAGMA(unroll n)

// One vector of VEC floats from global to shared memory: asynchronous with
// STAGES >= 2, a plain load and store otherwise.
__device__ __forceinline__ void CopyVector(float* dst, const float* src) {
#if STAGES > 1
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(src), "n"(VEC * 4));
#else
#if VEC == 4
  *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
#elif VEC == 2
  *reinterpret_cast<float2*>(dst) = *reinterpret_cast<const float2*>(src);
#else
  *dst = *src;
#endif
#endif
}

__device__ __forceinline__ void CommitCopies() {
#if STAGES > 1
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most `n` groups of copies are in flight.
template <int n>
__device__ __forceinline__ void WaitCopies() {
#if STAGES > 1
  asm volatile("cp.async.wait_group %0;\n" ::"n"(n));
#endif
}

// The k-th BK-wide slice of this block's A rows and B columns into stage
// buffer `stage`.
__device__ __forceinline__ void LoadTile(float* stage, const float* A, const float* B, int N, int K,
                                         int row0, int col0, int k0, int tid) {
  float* as = stage;
  float* bs = stage + BM * AS_STRIDE;
  for (int v = tid; v < BM * (BK / VEC); v += THREADS) {
    const int m = v / (BK / VEC), k = (v % (BK / VEC)) * VEC;
    CopyVector(&as[m * AS_STRIDE + k], &A[(row0 + m) * K + k0 + k]);
  }
  for (int v = tid; v < BK * (BN / VEC); v += THREADS) {
    const int k = v / (BN / VEC), n = (v % (BN / VEC)) * VEC;
    CopyVector(&bs[k * BN + n], &B[(k0 + k) * N + col0 + n]);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    sgemm_large(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ B,
                float* __restrict__ workspace, unsigned* __restrict__ counters, int M, int N,
                int K) {
  extern __shared__ __align__(16) float smem[];
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  // This warp's tile within the block, and this thread's place in a
  // sub-tile: (WSUBN / TN) threads across, (WSUBM / TM) down.
  const int wm0 = (warp / (BN / WN)) * WM, wn0 = (warp % (BN / WN)) * WN;
  const int tn = lane % (WSUBN / TN), tm = lane / (WSUBN / TN);

  float acc[WMITER][WNITER][TM][TN];
#pragma unroll
  for (int a = 0; a < WMITER; ++a)
#pragma unroll
    for (int b = 0; b < WNITER; ++b)
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[a][b][i][j] = 0.0f;

  const int k_share = K / SPLITK;
  const int k_begin = blockIdx.z * k_share;
  const int tiles = k_share / BK;

  auto compute = [&](const float* stage) {
    const float* as = stage;
    const float* bs = stage + BM * AS_STRIDE;
    KTUNE_UNROLL(UNROLL)
    for (int k = 0; k < BK; ++k) {
      float a[WMITER][TM], b[WNITER][TN];
#pragma unroll
      for (int wi = 0; wi < WMITER; ++wi)
#pragma unroll
        for (int i = 0; i < TM; ++i)
          a[wi][i] = as[(wm0 + wi * WSUBM + tm * TM + i) * AS_STRIDE + k];
#pragma unroll
      for (int wj = 0; wj < WNITER; ++wj) {
        const float* row = &bs[k * BN + wn0 + wj * WSUBN + tn * TN];
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          const float4 v = *reinterpret_cast<const float4*>(row + j);
          b[wj][j] = v.x;
          b[wj][j + 1] = v.y;
          b[wj][j + 2] = v.z;
          b[wj][j + 3] = v.w;
        }
      }
#pragma unroll
      for (int wi = 0; wi < WMITER; ++wi)
#pragma unroll
        for (int wj = 0; wj < WNITER; ++wj)
#pragma unroll
          for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j)
              acc[wi][wj][i][j] = fmaf(a[wi][i], b[wj][j], acc[wi][wj][i][j]);
    }
  };

#if STAGES > 1
  // The first STAGES - 1 tiles in flight, one group each (empty groups past
  // the end keep the count of groups uniform).
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) LoadTile(smem + s * STAGE_FLOATS, A, B, N, K, row0, col0, k_begin + s * BK, tid);
    CommitCopies();
  }
  for (int t = 0; t < tiles; ++t) {
    WaitCopies<STAGES - 2>();  // tile t has landed
    __syncthreads();           // ...for every thread, and stage t - 1 is read
    const int next = t + STAGES - 1;
    if (next < tiles) {
      LoadTile(smem + (next % STAGES) * STAGE_FLOATS, A, B, N, K, row0, col0, k_begin + next * BK,
               tid);
    }
    CommitCopies();
    compute(smem + (t % STAGES) * STAGE_FLOATS);
  }
#else
  for (int t = 0; t < tiles; ++t) {
    LoadTile(smem, A, B, N, K, row0, col0, k_begin + t * BK, tid);
    __syncthreads();
    compute(smem);
    __syncthreads();
  }
#endif

  // Where this thread's results go: C itself, or this split's partial.
  float* out = SPLITK == 1 ? C : workspace + static_cast<size_t>(blockIdx.z) * M * N;
#pragma unroll
  for (int wi = 0; wi < WMITER; ++wi)
#pragma unroll
    for (int wj = 0; wj < WNITER; ++wj)
#pragma unroll
      for (int i = 0; i < TM; ++i) {
        const int r = row0 + wm0 + wi * WSUBM + tm * TM + i;
        const int c = col0 + wn0 + wj * WSUBN + tn * TN;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
          *reinterpret_cast<float4*>(&out[r * N + c + j]) =
              make_float4(acc[wi][wj][i][j], acc[wi][wj][i][j + 1], acc[wi][wj][i][j + 2],
                          acc[wi][wj][i][j + 3]);
        }
      }
#if SPLITK > 1
  // The last split of this tile to finish adds the partials, in split
  // order, and leaves the tile's counter at zero for the next launch.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  const int tile = blockIdx.y * gridDim.x + blockIdx.x;
  if (tid == 0) {
    last = atomicAdd(&counters[tile], 1u) == SPLITK - 1;
    if (last) counters[tile] = 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int v = tid; v < BM * (BN / 4); v += THREADS) {
    const int r = row0 + v / (BN / 4), c = col0 + (v % (BN / 4)) * 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int z = 0; z < SPLITK; ++z) {
      const float4 p = __ldcg(reinterpret_cast<const float4*>(
          &workspace[static_cast<size_t>(z) * M * N + static_cast<size_t>(r) * N + c]));
      sum.x += p.x;
      sum.y += p.y;
      sum.z += p.z;
      sum.w += p.w;
    }
    *reinterpret_cast<float4*>(&C[r * N + c]) = sum;
  }
#endif
}
