// Arithmetic shared by the host and device executors: how a reduction is put
// on the wire and finished, and how rows are split among ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/message.h"

namespace hvdlite::core {

// Why the sizes of `r`, a response from the coordinator for a set of `size`
// ranks, cannot be executed ("" when they can): a shape or per-rank sizes
// whose bytes overflow, per-rank sizes that do not match the set, a root out
// of range (Note [Checked peer messages] in message.cc). The layouts below
// take only responses that passed it.
std::string checkResponse(const Response& r, int size);

// Why `r`, which passed checkResponse, does not fit this rank's own entry of
// `shape` and `dtype` ("" when it does): this rank would read or write
// another size than its buffers have. Rank 0 builds every response from
// this rank's own request, so only a broken or hostile coordinator fails it.
// `size` and `rank`: the process set's, as checkResponse had them.
std::string checkAgainstEntry(const Response& r, const std::vector<int64_t>& shape, DataType dtype, int size,
                              int rank);

// kAverage is a sum followed by a division by Response::average_ranks.
inline ReduceOp wireOp(const Response& r) {
  return r.reduce_op == ReduceOp::kAverage ? ReduceOp::kSum : r.reduce_op;
}

// After the reduction (host memory): divide by the response's average_ranks
// for kAverage (the set's size, joined ranks included: Note [Join] in
// coordinator.cc), then apply the postscale factor.
void finishReduction(void* data, size_t count, const Response& r);
// The same from `src` into `dst` (the same buffer or disjoint): floating-point
// results are copied and scaled in one pass (scaleInto).
void finishReductionInto(void* dst, const void* src, size_t count, const Response& r);

// Where each rank's bytes go in an allgather, and the output's shape.
struct AllgatherLayout {
  std::vector<size_t> bytes;  // per rank
  size_t total = 0;
  std::vector<int64_t> out_shape;
};
AllgatherLayout allgatherLayout(const Response& r);

// What `rank` sends to and receives from each rank in an alltoall.
struct AlltoallLayout {
  std::vector<size_t> send, recv;  // bytes per peer
  std::vector<int64_t> received;   // rows per peer
  std::vector<int64_t> out_shape;
};
AlltoallLayout alltoallLayout(const Response& r, int size, int rank);

// Elements of each rank's part in a reducescatter, and `rank`'s output shape.
// Rows of the first dimension are split as evenly as possible, the first
// (rows % size) ranks getting one more.
struct ReducescatterLayout {
  std::vector<size_t> counts;
  std::vector<int64_t> out_shape;
};
ReducescatterLayout reducescatterLayout(const Response& r, int size, int rank);
// The same output shape from the input's shape alone (known at enqueue).
std::vector<int64_t> reducescatterOutputShape(const std::vector<int64_t>& shape, int size, int rank);

}  // namespace hvdlite::core
