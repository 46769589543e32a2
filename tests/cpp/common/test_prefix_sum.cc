// Tests csrc/common/prefix_sum.h, the layout of every variable-size collective.
#include "common/prefix_sum.h"

#include "testing.h"

using namespace hvdlite;

TEST(prefix_sum_of_nothing_is_empty) { CHECK(exclusivePrefixSum({}).empty()); }

TEST(prefix_sum_of_one_part_starts_at_zero) {
  CHECK(exclusivePrefixSum({7}) == std::vector<size_t>{0});
}

TEST(prefix_sum_lays_parts_end_to_end) {
  std::vector<size_t> sizes = {3, 0, 5, 2, 0};
  auto offsets = exclusivePrefixSum(sizes);
  CHECK(offsets == (std::vector<size_t>{0, 3, 3, 8, 10}));
  // Each part ends where the next begins, and the last ends at the total.
  for (size_t i = 0; i + 1 < sizes.size(); ++i) CHECK_EQ(offsets[i] + sizes[i], offsets[i + 1]);
  CHECK_EQ(offsets.back() + sizes.back(), size_t{10});
}

TEST(prefix_sum_handles_sizes_beyond_32_bits) {
  const size_t big = size_t{3} << 32;
  auto offsets = exclusivePrefixSum({big, big, 1});
  CHECK(offsets == (std::vector<size_t>{0, big, 2 * big}));
}

int main() { return RUN_ALL_TESTS(); }
