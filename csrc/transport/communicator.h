// The one interface through which the core moves bytes among the ranks of a
// process set. Implementations: tcp/ (built in). shm/, mpi/, nccl/ follow the
// same contract.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"

namespace hvdlite::transport {

// Moves bytes among the ranks of one process set. Ranks here are ranks within
// the set (0..size()-1). Called only by the thread running the runtime's
// cycle, one call at a time, and every member calls the same sequence of methods with
// compatible arguments; implementations need no locks of their own.
// All calls block until this rank's part is done. Any failure of a peer or a
// connection throws TransportError naming the peer's global rank and the cause.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global (world) rank of set rank r, for messages.
  virtual int globalRank(int r) const = 0;

  // In place over `count` elements; every rank ends with bitwise-identical
  // values. op is one of kSum, kMin, kMax, kProduct, kBitAnd.
  virtual void allreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;

  // out = concat over r of rank r's bytes, in rank order; bytes_per_rank[r] is
  // rank r's contribution (may be 0) and `in` holds this rank's. out must hold
  // the sum. `in` may point inside `out` at this rank's own offset.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) = 0;

  // root's `bytes` bytes of data are copied to every rank's data.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;

  // `in` holds send_bytes[r] bytes for each rank r, in rank order; `out`
  // receives recv_bytes[r] from each rank r, in rank order.
  virtual void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                         const std::vector<size_t>& recv_bytes) = 0;

  // `in` holds sum(counts) elements on every rank; they are reduced with op and
  // rank r receives elements [offset_r, offset_r + counts[r]) into `out`.
  virtual void reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype, ReduceOp op) = 0;

  virtual void barrier() = 0;

  // An allreduce of `count` elements whose input and output are scattered
  // (the tensors of a fused batch, or one tensor reduced out of place):
  // pack(dst, begin, end) writes bytes [begin, end) of this rank's input to
  // dst; unpack(src, begin, end) takes reduced bytes [begin, end) from src.
  // Every byte is packed and unpacked exactly once. This default stages the
  // whole in `staging` (room for count elements) around allreduce(); shared
  // memory packs straight into its segment and unpacks straight out of it,
  // two copies fewer (Note [Gathered allreduce] in shm_communicator.cc).
  using PackFn = std::function<void(uint8_t* dst, size_t begin, size_t end)>;
  using UnpackFn = std::function<void(const uint8_t* src, size_t begin, size_t end)>;
  virtual void allreduceGathered(size_t count, DataType dtype, ReduceOp op, const PackFn& pack,
                                 const UnpackFn& unpack, uint8_t* staging) {
    const size_t bytes = count * dtypeSize(dtype);
    pack(staging, 0, bytes);
    allreduce(staging, count, dtype, op);
    unpack(staging, 0, bytes);
  }

  // The chunk in which the executor should feed a large allreduce to this
  // communicator (Note [Pipelined allreduce]), or 0 for the whole batch at
  // once: worthwhile only where the transport already works in steps of
  // that size, so that chunks add no synchronization of their own.
  virtual size_t pipelineChunkBytes() const { return 0; }

  // Negotiation messages, whose sizes are not known in advance.
  // gather: the root returns every rank's message in rank order; others return {}.
  virtual std::vector<std::string> gather(const std::string& mine, int root) = 0;
  // broadcast: every rank's `message` becomes root's.
  virtual void broadcastMessage(std::string& message, int root) = 0;
};

}  // namespace hvdlite::transport
