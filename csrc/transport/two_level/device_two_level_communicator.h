// HVDLITE_HIERARCHICAL_ALLREDUCE=1 for CUDA tensors: the global set's
// allreduce in two levels, NCCL inside each host and the CPU transport across
// hosts (Note [Hierarchical allreduce]); every other collective runs on the
// flat device communicator over all members. The device counterpart of
// TwoLevelCommunicator, made by hierarchicalDeviceCommunicator().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/device_communicator.h"

namespace hvdlite::transport::two_level {

// Device work (binding, ready waits, buffers, staging) goes through the
// local communicator, which every allreduce binds; the flat one shares its
// GPU's one stream (Note [Device ordering]) and is bound at the first
// collective that needs it, so a job that only allreduces never creates it.
// A batch's done event is recorded by the communicator that ran its
// collective (Note [Whose done event] in the .cc).
class DeviceTwoLevelCommunicator final : public DeviceCommunicator {
 public:
  // flat: over every member (the set's rank order); local: this host's
  // members, bootstrapped through local_cpu (kept alive here); cross: the
  // members at this rank's position on each host (a CPU communicator).
  DeviceTwoLevelCommunicator(std::unique_ptr<DeviceCommunicator> flat, std::unique_ptr<Communicator> local_cpu,
                             std::unique_ptr<DeviceCommunicator> local, std::unique_ptr<Communicator> cross);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  int globalRank(int r) const override { return flat_->globalRank(r); }
  std::string describe() const override;

  void useDevice(int device) override { local_->useDevice(device); }
  int device() const override { return local_->device(); }
  ThreadCudaState saveThread() override { return local_->saveThread(); }
  void restoreThread(const ThreadCudaState& state) override { local_->restoreThread(state); }
  void waitFor(void* ready_event, void* stream) override { local_->waitFor(ready_event, stream); }
  DeviceEvent recordDone(const std::string& what) override;
  void* reserve(size_t bytes, int slot, std::string& failure) override {
    return local_->reserve(bytes, slot, failure);
  }
  void copy(void* dst, const void* src, size_t bytes) override { local_->copy(dst, src, bytes); }
  void copyMany(const std::vector<DeviceCopy>& copies) override { local_->copyMany(copies); }
  void* stageToHost(const void* device, size_t bytes) override { return local_->stageToHost(device, bytes); }
  void copyFromHost(void* device, const void* host, size_t bytes) override {
    local_->copyFromHost(device, host, bytes);
  }
  // Over the whole set (Note [Allocation failures] in core/device_executor.cc).
  int firstFailedRank(bool ok) override { return flat_->firstFailedRank(ok); }
  std::string health(double timeout_seconds) override;
  void abort() override;
  void close() override;

  // Equal parts, one per local rank.
  size_t allreduceRoom(size_t count) const override;

 private:
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override;
  void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) override;
  void doAllreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op,
                                  const HostFinish& finish) override;
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    flat().allgatherv(in, out, bytes_per_rank);
  }
  void doBroadcast(void* data, size_t bytes, int root) override { flat().broadcast(data, bytes, root); }
  void doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    flat().alltoallv(in, send_bytes, out, recv_bytes);
  }
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    flat().reducescatter(in, out, counts, dtype, op);
  }
  void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                             double factor) override {
    flat().reducescatterScaled(in, out, counts, dtype, factor);
  }
  // Messages need no GPU: the flat communicator passes them to the set's CPU one.
  void doBarrier() override { flat_->barrier(); }
  std::vector<std::string> doGather(const std::string& mine, int root) override { return flat_->gather(mine, root); }
  void doBroadcastMessage(std::string& message, int root) override { flat_->broadcastMessage(message, root); }

  // The flat communicator, bound to the local one's GPU on first use (every
  // member reaches the same collective first: binding is collective).
  DeviceCommunicator& flat();
  // Reduce-scatter inside the host by `scatter`, `op` across hosts on the
  // host copy of this rank's part, `finish` (may be null) on it there, and
  // allgather inside the host.
  template <typename Scatter>
  void inTwoLevels(void* data, size_t count, DataType dtype, ReduceOp op, Scatter&& scatter,
                   const HostFinish* finish);

  std::unique_ptr<DeviceCommunicator> flat_;
  std::unique_ptr<Communicator> local_cpu_;  // local_ bootstraps through it: declared first, destroyed last
  std::unique_ptr<DeviceCommunicator> local_;
  std::unique_ptr<Communicator> cross_;
  // Which communicators ran a collective since the last recordDone(); only
  // the thread that runs batches touches them.
  bool flat_ran_ = false;
  bool local_ran_ = false;
};

}  // namespace hvdlite::transport::two_level
