#include "strategies/brute_force.h"

namespace ktune {

std::vector<Config> BruteForce::Ask(std::size_t n) {
  std::vector<Config> out;
  Config c;
  while (out.size() < n && enumerator_.Next(&c)) out.push_back(c);
  return out;
}

}  // namespace ktune
