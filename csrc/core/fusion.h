// Tensor fusion: many small allreduces cost one collective's latency each, so
// compatible responses are packed into one buffer and reduced together.
#pragma once

#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "core/message.h"
#include "core/tensor_entry.h"

namespace hvdlite::core {

// Responses executed by one collective, in the order they are packed.
struct Batch {
  std::vector<const Response*> members;
  int64_t bytes = 0;
  // ends[i]: where member i's bytes end in the batch, so that a range finds
  // its first member by binary search. planFusion fills it; a batch without
  // it (one of a size other than members') is measured member by member.
  std::vector<size_t> ends;
};

// Groups allreduce responses that can share a buffer (same dtype, reduce op,
// scale factors, device and averaging divisor) up to
// threshold_bytes, and reducescatter responses by the same rule among
// themselves (Note [Fused reducescatter]); members of one group always share
// a batch, whatever its size. Every other response gets a batch of its own.
// Deterministic: every rank plans the same batches from the same responses.
// Batches keep the order of their first members.
std::vector<Batch> planFusion(const std::vector<Response>& responses, int64_t threshold_bytes);

int64_t responseBytes(const Response& response);  // allreduce or reducescatter payload size
int64_t batchBytes(const Response& response);     // what it adds to its batch's bytes (0: not fused)

// Bytes [begin, end) of a batch laid out back to back in member order. The
// fused allreduce moves a batch through a small buffer one range at a time
// (Note [Pipelined allreduce] in executor.cc). `entries` is index-aligned with
// batch.members; a null entry (this rank joined) contributes neutral values.
// A part already in place (out is the input, in is the output) is not copied.
// packRange applies the prescale as it copies, and unpackRange with `finish`
// applies finishReduction() as it copies (one pass over the bytes each:
// scaleInto, finishReductionInto).
void packRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
               size_t end, ReduceOp wire_op, uint8_t* out);
void unpackRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                 size_t end, const uint8_t* in, const Response* finish = nullptr);

// dst = wire_op(bytes [begin, end) of the batch as packRange would write
// them, other): the reduction of a range straight from each member's input,
// without packing it first (Note [Reducing from the staging buffer] in
// transport/shm/shm_communicator.cc). `other` and dst hold the range.
void combineRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                  size_t end, ReduceOp wire_op, const uint8_t* other, uint8_t* dst);

// Where bytes [begin, end) of a batch can be staged in place: the output of
// the one member that holds all of them, when this rank has that member (did
// not join); else nullptr. Packing a range into its own output copies nothing
// when the tensor is reduced in place, and unpacking it from there never does
// (Note [Reducing from the staging buffer] in transport/shm/shm_communicator.cc).
uint8_t* outputHolding(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                       size_t end);

// Where each member of a fused reducescatter batch goes (Note [Fused
// reducescatter] in fusion.cc). Byte offsets; every (rank, member) pair has a
// part, empty ones included, so part (r, i) is parts[r * members + i].
struct ScatterLayout {
  struct Part {
    size_t from = 0;   // in the member's input
    size_t at = 0;     // in the fused buffer
    size_t bytes = 0;
  };
  std::vector<size_t> counts;               // elements of each rank's share of the fused buffer
  std::vector<size_t> share_at;             // byte offset of each rank's share in the fused buffer
  std::vector<Part> parts;                  // rank-major
  std::vector<std::vector<int64_t>> shapes;  // each member's output shape on `rank`
  size_t total = 0;                         // bytes of the fused buffer
  size_t members = 0;
  const Part& part(int rank, size_t member) const { return parts[size_t(rank) * members + member]; }
};
ScatterLayout scatterLayout(const Batch& batch, int size, int rank);

// Copies every member's input into `out` (layout.total bytes) rank-major,
// scaled by the batch's prescale; a null entry (this rank joined)
// contributes neutral values of wire_op.
void packScatter(const Batch& batch, const ScatterLayout& layout, const std::vector<TensorEntryPtr>& entries,
                 ReduceOp wire_op, uint8_t* out);
// Copies `rank`'s share (`share`: its counts[rank] elements, as the
// reducescatter left them) into each member's output; outputs[i] null: skip.
void unpackScatter(const ScatterLayout& layout, int rank, const uint8_t* share, const std::vector<void*>& outputs);

// A growable byte buffer that keeps its capacity between cycles, so a steady
// training loop allocates once, and gives back what a one-off batch grew it
// to (Note [Fusion buffer gives back] in fusion.cc).
class FusionBuffer {
 public:
  // A buffer of at least `bytes`, uninitialised; valid until the next call.
  uint8_t* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

  // Reserves in a window: after this many, a buffer more than twice the
  // window's largest request shrinks to that request.
  static constexpr int kTrimWindow = 64;
  // Below this a buffer is never shrunk: not worth a reallocation.
  static constexpr size_t kTrimFloor = size_t{1} << 20;

 private:
  std::unique_ptr<uint8_t[]> storage_;
  size_t capacity_ = 0;
  size_t window_peak_ = 0;  // the largest request in the current window
  int window_uses_ = 0;
};

}  // namespace hvdlite::core
