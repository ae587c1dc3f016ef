// out = transpose(in) for a rows x cols float matrix, through a shared
// tile_dim x tile_dim tile (padded by `padding` words to avoid bank
// conflicts); a block of tile_dim x block_rows threads moves one tile.
extern "C" __global__ void transpose(float* __restrict__ out, const float* __restrict__ in,
                                     int rows, int cols) {
  __shared__ float tile[tile_dim][tile_dim + padding];
  int x = blockIdx.x * tile_dim + threadIdx.x;
  int y = blockIdx.y * tile_dim + threadIdx.y;
#pragma unroll
  for (int j = 0; j < tile_dim; j += block_rows) {
    if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * cols + x];
  }
  __syncthreads();
  x = blockIdx.y * tile_dim + threadIdx.x;
  y = blockIdx.x * tile_dim + threadIdx.y;
#pragma unroll
  for (int j = 0; j < tile_dim; j += block_rows) {
    if (x < rows && y + j < cols) out[(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
  }
}
