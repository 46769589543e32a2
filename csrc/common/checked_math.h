// Arithmetic on sizes that came from another process (a peer's request, the
// coordinator's response): a count, a dimension or a product of them may be
// anything a buggy or hostile peer chose, so every step says whether it
// overflowed instead of wrapping around into a small, plausible size that
// would then size a buffer (Note [Checked peer messages] in core/message.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace hvdlite {

// a * b and a + b, or nullopt where the result does not fit in T.
template <typename T>
std::optional<T> checkedMul(T a, T b) {
  T out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <typename T>
std::optional<T> checkedAdd(T a, T b) {
  T out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// `times` * dims[begin] * dims[begin + 1] * ... (the elements of a shape, or
// of a row of it), or nullopt where a dimension is negative or the product
// overflows int64.
inline std::optional<int64_t> checkedProduct(const std::vector<int64_t>& dims, size_t begin = 0,
                                             int64_t times = 1) {
  std::optional<int64_t> n = times;
  for (size_t i = begin; i < dims.size() && n; ++i) {
    if (dims[i] < 0) return std::nullopt;
    n = checkedMul(*n, dims[i]);
  }
  return n;
}

// The sum of `values`, or nullopt where one is negative or the sum overflows.
inline std::optional<int64_t> checkedSum(const std::vector<int64_t>& values) {
  std::optional<int64_t> total = int64_t{0};
  for (size_t i = 0; i < values.size() && total; ++i) {
    if (values[i] < 0) return std::nullopt;
    total = checkedAdd(*total, values[i]);
  }
  return total;
}

// A non-negative int64 as a size_t (a byte count), or nullopt.
inline std::optional<size_t> toSize(std::optional<int64_t> n) {
  if (!n || *n < 0) return std::nullopt;
  return static_cast<size_t>(*n);
}

}  // namespace hvdlite
