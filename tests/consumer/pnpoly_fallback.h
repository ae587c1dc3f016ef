// The checked-in fallback of the consumer test's tuned header: what a build
// uses when the daemon cannot be reached.
#ifndef KTUNE_TUNED_CN_PNPOLY_H_
#define KTUNE_TUNED_CN_PNPOLY_H_
#define between_method 0
#define block_size_x 32
#define tile_size 1
#define use_method 0
#endif  // KTUNE_TUNED_CN_PNPOLY_H_
