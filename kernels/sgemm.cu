// C = A * B in fp32, row-major, M x K times K x N (the textbook shared-memory
// tiled design with a register tile per thread).
//
// A block of block_size_x x block_size_y threads computes a BM x BN tile of
// C, BM = block_size_y * tile_size_y and BN = block_size_x * tile_size_x,
// walking K in steps of BK = 16 through shared-memory tiles of BM x 16 (of
// A, stored transposed) and 16 x BN (of B). Each thread accumulates a
// tile_size_y x tile_size_x register tile whose rows are block_size_y apart
// and whose columns are block_size_x apart, so shared-memory reads are
// broadcasts or consecutive words (no bank conflicts) and stores to C are
// coalesced. Requires M % BM == 0, N % BN == 0, K % 16 == 0.
#define BM (block_size_y * tile_size_y)
#define BN (block_size_x * tile_size_x)
#define BK 16
#define THREADS (block_size_x * block_size_y)

extern "C" __global__ void __launch_bounds__(THREADS)
    sgemm(float* __restrict__ C, const float* __restrict__ A, const float* __restrict__ B, int M,
          int N, int K) {
  __shared__ float As[BK][BM];
  __shared__ __align__(16) float Bs[BK][BN];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int tid = ty * block_size_x + tx;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  float acc[tile_size_y][tile_size_x];
#pragma unroll
  for (int i = 0; i < tile_size_y; ++i)
#pragma unroll
    for (int j = 0; j < tile_size_x; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += BK) {
    // A tile: BM rows of 16 floats, four float4 per row, stored transposed.
    for (int idx = tid; idx < BM * (BK / 4); idx += THREADS) {
      const int m = idx / (BK / 4), kq = (idx % (BK / 4)) * 4;
      const float4 v = *reinterpret_cast<const float4*>(&A[(row0 + m) * K + k0 + kq]);
      As[kq + 0][m] = v.x;
      As[kq + 1][m] = v.y;
      As[kq + 2][m] = v.z;
      As[kq + 3][m] = v.w;
    }
    // B tile: 16 rows of BN floats, as float4.
    for (int idx = tid; idx < BK * (BN / 4); idx += THREADS) {
      const int k = idx / (BN / 4), n = (idx % (BN / 4)) * 4;
      *reinterpret_cast<float4*>(&Bs[k][n]) =
          *reinterpret_cast<const float4*>(&B[(k0 + k) * N + col0 + n]);
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[tile_size_y], b[tile_size_x];
#pragma unroll
      for (int i = 0; i < tile_size_y; ++i) a[i] = As[k][ty + i * block_size_y];
#pragma unroll
      for (int j = 0; j < tile_size_x; ++j) b[j] = Bs[k][tx + j * block_size_x];
#pragma unroll
      for (int i = 0; i < tile_size_y; ++i)
#pragma unroll
        for (int j = 0; j < tile_size_x; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < tile_size_y; ++i)
#pragma unroll
    for (int j = 0; j < tile_size_x; ++j) {
      C[(row0 + ty + i * block_size_y) * N + col0 + tx + j * block_size_x] = acc[i][j];
    }
}
