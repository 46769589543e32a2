#include "core/collective_math.h"

#include <algorithm>

#include "common/reduce.h"

namespace hvdlite::core {
namespace {

int64_t rowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::vector<int64_t> withFirstDim(std::vector<int64_t> shape, int64_t first) {
  if (shape.empty()) shape.push_back(first);
  else shape[0] = first;
  return shape;
}

std::vector<int64_t> scatterRows(int64_t rows, int size) {
  std::vector<int64_t> out(size, rows / size);
  for (int r = 0; r < rows % size; ++r) out[r] += 1;
  return out;
}

}  // namespace

// Floats fold both steps into one multiply; integers divide exactly first (a
// multiply by 1/n can land just below a whole number).
void finishReduction(void* data, size_t count, const Response& r) {
  const int ranks = std::max(1, r.average_ranks);
  if (r.reduce_op != ReduceOp::kAverage) return scaleInPlace(data, count, r.dtype, r.postscale);
  if (isFloatingPoint(r.dtype)) return scaleInPlace(data, count, r.dtype, r.postscale / ranks);
  divideInPlace(data, count, r.dtype, ranks);
  scaleInPlace(data, count, r.dtype, r.postscale);
}

AllgatherLayout allgatherLayout(const Response& r) {
  const size_t row_bytes = rowElements(r.shape) * dtypeSize(r.dtype);
  AllgatherLayout layout;
  int64_t rows = 0;
  for (auto n : r.per_rank) {
    layout.bytes.push_back(static_cast<size_t>(n) * row_bytes);
    layout.total += layout.bytes.back();
    rows += n;
  }
  layout.out_shape = withFirstDim(r.shape, rows);
  return layout;
}

AlltoallLayout alltoallLayout(const Response& r, int size, int rank) {
  const size_t row_bytes = rowElements(r.shape) * dtypeSize(r.dtype);
  AlltoallLayout layout;
  int64_t rows = 0;
  for (int peer = 0; peer < size; ++peer) {
    layout.send.push_back(static_cast<size_t>(r.per_rank[rank * size + peer]) * row_bytes);
    layout.received.push_back(r.per_rank[peer * size + rank]);
    layout.recv.push_back(static_cast<size_t>(layout.received.back()) * row_bytes);
    rows += layout.received.back();
  }
  layout.out_shape = withFirstDim(r.shape, rows);
  return layout;
}

ReducescatterLayout reducescatterLayout(const Response& r, int size, int rank) {
  const int64_t row = rowElements(r.shape);
  auto rows = scatterRows(r.shape.empty() ? 1 : r.shape[0], size);
  ReducescatterLayout layout;
  for (auto n : rows) layout.counts.push_back(static_cast<size_t>(n * row));
  layout.out_shape = withFirstDim(r.shape, rows[rank]);
  return layout;
}

std::vector<int64_t> reducescatterOutputShape(const std::vector<int64_t>& shape, int size, int rank) {
  return withFirstDim(shape, scatterRows(shape.empty() ? 1 : shape[0], size)[rank]);
}

}  // namespace hvdlite::core
