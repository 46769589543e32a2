// The one interface through which the core moves bytes among the ranks of a
// process set. Implementations: tcp/ and shm/ (built in), mpi/ (when MPI is
// found at build time), nccl/ (CUDA tensors, through DeviceCommunicator).
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
//
// Note [Checked entry points]
// The collectives are non-virtual: each checks its arguments once, here
// (communicator.cc), and then calls the transport's do* hook, which may
// assume them (one size per rank, root in range, a reduce op the transports
// implement, a known dtype, buffers wherever bytes move). A bad call throws
// InvalidArgument naming the call, this rank and the bad value before any
// byte is sent, so no peer is left waiting half-way through a collective.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The global (world) rank of set rank r, for messages.
  virtual int globalRank(int r) const = 0;
  // How this set's bytes move, for logs and process_set_transport():
  // "tcp", "shared memory", "mpi", "two levels: ...".
  virtual std::string describe() const = 0;

  // In place over `count` elements; every rank ends with bitwise-identical
  // values. op is one of kSum, kMin, kMax, kProduct, kBitAnd.
  void allreduce(void* data, size_t count, DataType dtype, ReduceOp op);

  // out = concat over r of rank r's bytes, in rank order; bytes_per_rank[r] is
  // rank r's contribution (may be 0) and `in` holds this rank's. out must hold
  // the sum. `in` may point inside `out` at this rank's own offset.
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank);

  // root's `bytes` bytes of data are copied to every rank's data.
  void broadcast(void* data, size_t bytes, int root);

  // `in` holds send_bytes[r] bytes for each rank r, in rank order; `out`
  // receives recv_bytes[r] from each rank r, in rank order.
  void alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                 const std::vector<size_t>& recv_bytes);

  // `in` holds sum(counts) elements on every rank; they are reduced with op and
  // rank r receives elements [offset_r, offset_r + counts[r]) into `out`.
  void reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op);

  void barrier() { doBarrier(); }

  // An allreduce of `count` elements whose input and output are scattered
  // (the tensors of a fused batch, or one tensor reduced out of place):
  // pack(dst, begin, end) writes bytes [begin, end) of this rank's input to
  // dst; unpack(src, begin, end) takes reduced bytes [begin, end) from src.
  // combine(dst, other, begin, end), when given, writes op(bytes [begin, end)
  // of this rank's input as pack would write them, other) to dst without
  // packing them first. Every byte is packed or combined, and unpacked,
  // exactly once. `staging` has room for count elements (see doAllreduceGathered).
  using PackFn = std::function<void(uint8_t* dst, size_t begin, size_t end)>;
  using UnpackFn = std::function<void(const uint8_t* src, size_t begin, size_t end)>;
  using CombineFn = std::function<void(uint8_t* dst, const uint8_t* other, size_t begin, size_t end)>;
  void allreduceGathered(size_t count, DataType dtype, ReduceOp op, const PackFn& pack,
                         const UnpackFn& unpack, uint8_t* staging, const CombineFn& combine = {});

  // The chunk in which the executor should feed a large allreduce to this
  // communicator (Note [Pipelined allreduce]), or 0 for the whole batch at
  // once: worthwhile only where the transport already works in steps of
  // that size, so that chunks add no synchronization of their own.
  virtual size_t pipelineChunkBytes() const { return 0; }

  // Negotiation messages, whose sizes are not known in advance.
  // The largest message gather/broadcastMessage take from a peer: the
  // negotiation's request and response lists (a request is ~100-300 bytes
  // with its name and call site: a million tensors in one cycle fit), the
  // shutdown exchange, autotune parameters. A peer claiming more is broken
  // or hostile, and every transport refuses the claim before it sizes a
  // buffer (Note [Checked peer messages] in core/message.cc).
  static constexpr uint64_t kMaxMessageBytes = uint64_t{1} << 30;

  // gather: the root returns every rank's message in rank order; others return {}.
  std::vector<std::string> gather(const std::string& mine, int root);
  // broadcast: every rank's `message` becomes root's.
  void broadcastMessage(std::string& message, int root);

 protected:
  // The transport's side of each call above, with its arguments checked
  // (Note [Checked entry points]).
  virtual void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) = 0;
  virtual void doAllgatherv(const void* in, void* out,
                            const std::vector<size_t>& bytes_per_rank) = 0;
  virtual void doBroadcast(void* data, size_t bytes, int root) = 0;
  virtual void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) = 0;
  virtual void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                               DataType dtype, ReduceOp op) = 0;
  virtual void doBarrier() = 0;
  // This default stages the whole in `staging` around doAllreduce(); shared
  // memory packs straight into its segment and unpacks straight out of it,
  // two copies fewer (Note [Gathered allreduce] in shm_communicator.cc); it
  // reduces this rank's share with `combine` where given.
  virtual void doAllreduceGathered(size_t count, DataType dtype, ReduceOp op, const PackFn& pack,
                                   const UnpackFn& unpack, uint8_t* staging, const CombineFn& combine);
  virtual std::vector<std::string> doGather(const std::string& mine, int root) = 0;
  virtual void doBroadcastMessage(std::string& message, int root) = 0;

  // The checks, for the calls that subclasses add (DeviceCommunicator).
  // Each throws InvalidArgument naming `call`, this rank and the bad value.
  // `what` names the vector: one entry per rank of the set.
  void checkPerRank(const char* call, const char* what, const std::vector<size_t>& values) const;
  // dtype is one of DataType's; op one the transports implement (never
  // kAverage or kAdasum, which the executor resolves).
  void checkReduction(const char* call, DataType dtype, ReduceOp op) const;
  void checkRoot(const char* call, int root) const;
  // A reducescatter's counts (one per rank) and its buffers; dtype is known.
  void checkScatter(const char* call, const void* in, const void* out,
                    const std::vector<size_t>& counts, DataType dtype) const;
  // A buffer that `bytes` bytes are read from or written to.
  void checkBuffer(const char* call, const char* what, const void* buffer, size_t bytes) const;
  // Throws InvalidArgument: "`call` on rank R (global rank G) ...: `why`".
  [[noreturn]] void fail(const char* call, const std::string& why) const;
};

}  // namespace hvdlite::transport

// Note [Hook lists]
// Every transport overrides the same hooks with the same signatures, so its
// class declares them with these lists instead of copying each signature: a
// new collective's hook is written once, here, and the link then names every
// transport that does not define it yet.
//
// Communicator's collectives; arguments checked (Note [Checked entry points]).
#define HVDLITE_COLLECTIVE_HOOKS                                                                    \
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;                 \
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override; \
  void doBroadcast(void* data, size_t bytes, int root) override;                                    \
  void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,                \
                   const std::vector<size_t>& recv_bytes) override;                                 \
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,                \
                       DataType dtype, ReduceOp op) override
// barrier() and the negotiation messages: a host transport's own; a device
// communicator leaves them to its process set's CPU communicator.
#define HVDLITE_MESSAGE_HOOKS                                                    \
  void doBarrier() override;                                                     \
  std::vector<std::string> doGather(const std::string& mine, int root) override; \
  void doBroadcastMessage(std::string& message, int root) override
