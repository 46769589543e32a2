// The Communicator of the shared-memory transport: the members of one process
// set, all on this host, move data through one mapped segment.
#pragma once

#include <memory>
#include <vector>

#include "transport/communicator.h"
#include "transport/shm/progress.h"
#include "transport/shm/segment.h"

namespace hvdlite::transport::shm {

// Note [Shared-memory steps]
// The segment holds, after the control block, two buffers of kSlotBytes per
// member. Every collective is a sequence of steps; step g uses buffer g % 2
// and moves each member's counter through 3g+1 (my slot is written), 3g+2 (my
// share of the reduction is written) and 3g+3 (I have read what I need).
// Before writing into a buffer a member waits until everyone finished step
// g-2, which used the same buffer: so while one step is reduced and copied
// out, the next one is already being copied in (pipelined chunks).
// Allreduce of a large buffer splits each step's reduction evenly: member r
// combines elements [r*c/n, (r+1)*c/n) of every slot, in parallel with the
// others, and then everyone copies the reduced pieces out. Small buffers skip
// the split: every member combines all slots itself, in rank order, so the
// results are bitwise identical with one wait instead of two.
// Not thread-safe: the thread running the runtime's cycle is its only user.
class ShmCommunicator : public Communicator {
 public:
  // `segment` is mapped by every member and was initialised by rank 0.
  ShmCommunicator(std::shared_ptr<Segment> segment, std::shared_ptr<Progress> progress,
                  std::vector<int> global_ranks, int rank);

  static constexpr size_t kSlotBytes = 1 << 20;
  static constexpr size_t kSmallBytes = 16 << 10;
  static size_t segmentBytes(int size);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int globalRank(int r) const override { return ranks_.at(r); }
  std::string describe() const override { return "shared memory"; }

  // One step's slot: feeding the steps one at a time costs no extra wait.
  size_t pipelineChunkBytes() const override { return kSlotBytes; }

 private:
  // Communicator's hooks (Note [Hook lists]).
  HVDLITE_COLLECTIVE_HOOKS;
  HVDLITE_MESSAGE_HOOKS;
  void doAllreduceGathered(size_t count, DataType dtype, ReduceOp op, const PackFn& pack,
                           const UnpackFn& unpack, uint8_t* staging, const CombineFn& combine) override;
  void checkPeerLength(uint64_t length, int peer, const char* what) const;

  // One step of Note [Shared-memory steps]; returns the step's buffer index.
  int beginStep(const char* what);
  uint32_t phase(int k) const { return static_cast<uint32_t>(3 * step_ + k); }
  char* slot(int member, int buffer) const;
  void allreduceSmall(char* data, size_t count, DataType dtype, ReduceOp op);
  // One step of a split allreduce over bytes [offset, offset + count * element)
  // (Note [Reducing from the staging buffer] in shm_communicator.cc).
  void allreduceSplit(uint8_t* staging, size_t offset, size_t count, DataType dtype, ReduceOp op,
                      const PackFn& pack, const UnpackFn& unpack, const CombineFn& combine);

  std::shared_ptr<Segment> segment_;
  std::shared_ptr<Progress> progress_;
  std::vector<int> ranks_;
  int rank_;
  uint64_t step_ = 0;  // the current step; step_ of the next one after endStep
};

}  // namespace hvdlite::transport::shm
