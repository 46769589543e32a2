// Where each part starts when parts of the given sizes lie end to end: the
// layout of every variable-size collective (allgatherv, alltoallv,
// reducescatter) and of the ring's blocks.
#pragma once

#include <cstddef>
#include <vector>

namespace hvdlite {

// offsets[0] = 0 and offsets[i] = sizes[0] + ... + sizes[i - 1]; as many
// offsets as sizes (the total is offsets.back() + sizes.back()).
inline std::vector<size_t> exclusivePrefixSum(const std::vector<size_t>& sizes) {
  std::vector<size_t> offsets(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) offsets[i] = offsets[i - 1] + sizes[i - 1];
  return offsets;
}

}  // namespace hvdlite
