#include "core/collective_math.h"

#include <algorithm>
#include <cstring>

#include "common/checked_math.h"
#include "common/errors.h"
#include "common/reduce.h"

namespace hvdlite::core {
namespace {

// Elements of one row (every dimension but the first); the shape passed
// checkResponse, so an overflow here is a bug.
int64_t rowElements(const std::vector<int64_t>& shape) {
  auto n = checkedProduct(shape, 1);
  HVD_CHECK(n, "shape ", shapeString(shape), " has no row size");
  return *n;
}

size_t rowBytes(const Response& r) {
  auto n = toSize(checkedProduct(r.shape, 1, static_cast<int64_t>(dtypeSize(r.dtype))));
  HVD_CHECK(n, "shape ", shapeString(r.shape), " has no row size");
  return *n;
}

// rows * row_bytes, checked (rows came from a peer: checkResponse).
size_t bytesOf(int64_t rows, size_t row_bytes) {
  auto n = rows >= 0 ? checkedMul(static_cast<size_t>(rows), row_bytes) : std::nullopt;
  HVD_CHECK(n, rows, " rows of ", row_bytes, " bytes");
  return *n;
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

bool hasRows(OpType op) {
  return op == OpType::kAllgather || op == OpType::kAlltoall || op == OpType::kReducescatter;
}

}  // namespace

// Note [Checked peer messages] in message.cc. Every size the executors
// derive from a response (elementCount, a row's bytes, each rank's rows
// times them, their total) must be a number that fits: checked here, on
// receipt, once per response the coordinator sends, so that the layouts
// below and the executors may multiply without checking.
std::string checkResponse(const Response& r, int size) {
  const std::string what = detail::concat(opTypeName(r.op), " of '", r.name, "'");
  if (r.error) return {};  // carries no sizes: its ranks only fail
  const int64_t esize = static_cast<int64_t>(dtypeSize(r.dtype));
  if (!checkedProduct(r.shape, 0, esize)) {
    return detail::concat(what, " of shape ", shapeString(r.shape),
                          ": a negative dimension, or more bytes than fit in 64 bits");
  }
  if (hasRows(r.op) && r.shape.empty()) return what + " of a scalar";
  if (r.op == OpType::kBroadcast && (r.root_rank < 0 || r.root_rank >= size)) {
    return detail::concat(what, " from root rank ", r.root_rank, " of a set of ", size, " ranks");
  }
  if (r.op == OpType::kAllgather || r.op == OpType::kAlltoall) {
    const size_t expected = r.op == OpType::kAllgather ? size_t(size) : size_t(size) * size_t(size);
    if (r.per_rank.size() != expected) {
      return detail::concat(what, " with ", r.per_rank.size(), " per-rank sizes for a set of ", size,
                            " ranks (expected ", expected, ")");
    }
    // Every rank's rows, and all of them together (an alltoall: every row of
    // the matrix and every column is at most that), in bytes.
    const auto rows = checkedSum(r.per_rank);
    const auto row_bytes = checkedProduct(r.shape, 1, esize);
    if (!rows || !row_bytes || !checkedMul(*rows, *row_bytes)) {
      return detail::concat(what, " with per-rank sizes ", shapeString(r.per_rank), " of rows of shape ",
                            shapeString(r.shape),
                            ": a negative size, or more bytes in all than fit in 64 bits");
    }
  }
  if (r.op == OpType::kAddProcessSet) {
    for (auto rank : r.process_set_ranks) {
      if (rank < 0 || rank >= size) return detail::concat(what, " naming rank ", rank, " in a job of ", size, " ranks");
    }
  }
  // The global set (0) is never removed: the API refuses it (api/request.cc).
  if (r.op == OpType::kRemoveProcessSet && r.process_set_id < 1) {
    return detail::concat(what, " of process set ", r.process_set_id);
  }
  return {};
}

std::string checkAgainstEntry(const Response& r, const std::vector<int64_t>& shape, DataType dtype, int size,
                              int rank) {
  if (r.error || !isTensorCollective(r.op)) return {};
  if (r.dtype != dtype) {
    return detail::concat(opTypeName(r.op), " of '", r.name, "' as ", dtypeName(r.dtype), ", but this rank submitted ",
                          dtypeName(dtype));
  }
  // What this rank will read from its input and write to its output,
  // compared in place: this runs for every tensor of every batch.
  bool fits = r.shape == shape;
  int64_t rows = 0;
  const bool own_rows = r.op == OpType::kAllgather || r.op == OpType::kAlltoall;
  if (own_rows) {
    // Sizes checked by checkResponse: the sum fits, the shape has rows.
    if (r.op == OpType::kAllgather) rows = r.per_rank.at(rank);
    else for (int peer = 0; peer < size; ++peer) rows += r.per_rank.at(size_t(rank) * size + peer);
    fits = !shape.empty() && shape[0] == rows && shape.size() == r.shape.size() &&
           std::equal(shape.begin() + 1, shape.end(), r.shape.begin() + 1);
  }
  if (fits) return {};
  return detail::concat(opTypeName(r.op), " of '", r.name, "' that has this rank send shape ",
                        shapeString(own_rows ? withFirstDim(r.shape, rows) : r.shape), ", but it submitted ",
                        shapeString(shape));
}

// Floats fold both steps into one multiply; integers divide exactly first (a
// multiply by 1/n can land just below a whole number).
void finishReduction(void* data, size_t count, const Response& r) { finishReductionInto(data, data, count, r); }

void finishReductionInto(void* dst, const void* src, size_t count, const Response& r) {
  const int ranks = std::max(1, r.average_ranks);
  if (r.reduce_op != ReduceOp::kAverage) return scaleInto(dst, src, count, r.dtype, r.postscale);
  if (isFloatingPoint(r.dtype)) return scaleInto(dst, src, count, r.dtype, r.postscale / ranks);
  if (dst != src) std::memcpy(dst, src, count * dtypeSize(r.dtype));
  divideInPlace(dst, count, r.dtype, ranks);
  scaleInPlace(dst, count, r.dtype, r.postscale);
}

AllgatherLayout allgatherLayout(const Response& r) {
  const size_t row_bytes = rowBytes(r);
  AllgatherLayout layout;
  int64_t rows = 0;
  for (auto n : r.per_rank) {
    layout.bytes.push_back(bytesOf(n, row_bytes));
    layout.total += layout.bytes.back();
    rows += n;
  }
  layout.out_shape = withFirstDim(r.shape, rows);
  return layout;
}

AlltoallLayout alltoallLayout(const Response& r, int size, int rank) {
  HVD_CHECK(r.per_rank.size() == size_t(size) * size_t(size), "alltoall of '", r.name, "' has ", r.per_rank.size(),
            " splits for ", size, " ranks");
  const size_t row_bytes = rowBytes(r);
  AlltoallLayout layout;
  int64_t rows = 0;
  for (int peer = 0; peer < size; ++peer) {
    layout.send.push_back(bytesOf(r.per_rank[rank * size + peer], row_bytes));
    layout.received.push_back(r.per_rank[peer * size + rank]);
    layout.recv.push_back(bytesOf(layout.received.back(), row_bytes));
    rows += layout.received.back();
  }
  layout.out_shape = withFirstDim(r.shape, rows);
  return layout;
}

ReducescatterLayout reducescatterLayout(const Response& r, int size, int rank) {
  const int64_t row = rowElements(r.shape);
  auto rows = scatterRows(r.shape.empty() ? 1 : r.shape[0], size);
  ReducescatterLayout layout;
  // Each part is at most the whole, whose element count fits (checkResponse).
  for (auto n : rows) layout.counts.push_back(static_cast<size_t>(n * row));
  layout.out_shape = withFirstDim(r.shape, rows[rank]);
  return layout;
}

std::vector<int64_t> reducescatterOutputShape(const std::vector<int64_t>& shape, int size, int rank) {
  return withFirstDim(shape, scatterRows(shape.empty() ? 1 : shape[0], size)[rank]);
}

}  // namespace hvdlite::core
