// Built with a header ktune_tuned_header() made at build time: prints the
// configuration it was compiled with.
#include <cstdio>

#include "pnpoly_tuned.h"

int main() {
  std::printf("block_size_x=%d tile_size=%d\n", block_size_x, tile_size);
  return 0;
}
