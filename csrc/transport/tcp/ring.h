// The pipelined ring behind large allreduce, reducescatter and allgatherv.
//
// Note [Ring as one stream]
// In a ring every rank sends to its right neighbour and receives from its
// left one, and what it sends in step k+1 is exactly what it received (and,
// in reduce-scatter, reduced with its own contribution) in step k. Instead of
// n-1 lock-step rounds, each rank runs one loop over two byte streams:
//   incoming: segment 0, 1, ..., K-1 from the left
//   outgoing: `first` (this rank's own block), then incoming segments
//             0..K-2 as soon as they are ready
// A copied byte is ready when it arrives; a reduced byte when the piece it
// belongs to (piece_bytes, whole elements) has been received into a scratch
// buffer and combined with this rank's contribution. So sending a block
// overlaps receiving and reducing it, and a slow step does not stall the
// wire. Each block is reduced by exactly one rank per position along the ring,
// in the same order of operands on every run, and then copied verbatim, so
// every rank ends with bitwise-identical values.
#pragma once

#include <cstddef>
#include <vector>

#include "common/types.h"
#include "transport/tcp/link.h"

namespace hvdlite::transport::tcp {

struct RingPlan {
  struct Incoming {
    char* dst;
    // If set, dst = op(mine, received) element-wise; else dst = received.
    // mine may equal dst (in-place allreduce).
    const char* mine;
    size_t bytes;
  };
  const char* first = nullptr;  // sent before anything else
  size_t first_bytes = 0;
  std::vector<Incoming> incoming;
  // For reduced segments:
  DataType dtype = DataType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  char* piece = nullptr;  // scratch for one received piece
  size_t piece_bytes = 0;  // a multiple of the element size
};

// Runs the plan to completion (see Note [Ring as one stream]).
void runRing(Link& right, Link& left, const RingPlan& plan);

}  // namespace hvdlite::transport::tcp
