// Runs negotiated responses: pack into the fusion buffer, run the collective
// through the process set's communicator, unpack, and complete each entry.
#pragma once

#include <functional>
#include <vector>

#include "core/adasum.h"
#include "core/device_executor.h"
#include "core/fusion.h"
#include "core/message.h"
#include "core/tensor_queue.h"
#include "core/timeline.h"
#include "transport/communicator.h"

namespace hvdlite::core {

// Process-set changes are negotiated like tensors; the runtime applies them.
class ProcessSetRegistry {
 public:
  virtual ~ProcessSetRegistry() = default;
  virtual int32_t addProcessSet(const std::vector<int>& ranks) = 0;  // returns the new id
  virtual void removeProcessSet(int32_t id) = 0;
};

class Executor {
 public:
  Executor(int64_t fusion_threshold, Timeline& timeline, ProcessSetRegistry& registry)
      : fusion_threshold_(fusion_threshold), timeline_(timeline), registry_(registry), device_(timeline) {}

  // Executes `responses` (identical on every member, same order) for one set.
  // Entries this rank lacks (it has joined) take part with neutral values.
  // A TransportError propagates; entries taken but not completed stay in
  // inFlight() for the runtime to fail.
  // Responses on CUDA tensors run through `device` (DeviceExecutor).
  void execute(const std::vector<Response>& responses, transport::Communicator& comm,
               const DeviceComms& device, TensorQueue& queue);

  // Entries taken from the queue whose batch did not finish (after a throw).
  std::vector<TensorEntryPtr> takeInFlight() { return std::move(in_flight_); }

  void setFusionThreshold(int64_t bytes) { fusion_threshold_ = bytes; }
  // Chunk of a pipelined allreduce (Note [Pipelined allreduce]); 0 = whole
  // batches, -1 = the communicator's pipelineChunkBytes().
  void setPipelineChunk(int64_t bytes) { pipeline_bytes_ = bytes; }

 private:
  void runBatch(const Batch& batch, transport::Communicator& comm, const DeviceComms& device,
                TensorQueue& queue);
  void allreduce(const Batch& batch, transport::Communicator& comm);
  void adasum(const Batch& batch, transport::Communicator& comm);
  void allgather(const Response& r, TensorEntry* e, transport::Communicator& comm);
  void broadcast(const Response& r, TensorEntry* e, transport::Communicator& comm);
  void alltoall(const Response& r, TensorEntry* e, transport::Communicator& comm);
  void reducescatter(const Response& r, TensorEntry* e, transport::Communicator& comm);
  void fusedReducescatter(const Batch& batch, transport::Communicator& comm);
  void control(const Response& r, TensorEntry* e);
  void completeAll(const Status& status);
  // Throws BadPeerMessage where a response's sizes do not fit this rank's entry.
  void checkEntries(const Batch& batch, transport::Communicator& comm) const;

  int64_t fusion_threshold_;
  int64_t pipeline_bytes_ = -1;
  Timeline& timeline_;
  ProcessSetRegistry& registry_;
  FusionBuffer fusion_buffer_;
  FusionBuffer scratch_;  // outputs of a joined rank, which nobody reads; a fused reducescatter's share
  Adasum adasum_;
  DeviceExecutor device_;
  std::vector<TensorEntryPtr> in_flight_;  // this batch's entries, index-aligned with members
  Batch lone_;                             // execute()'s batch of a lone response
};

// Runs an entry's callback, never letting an exception escape into the core.
void complete(TensorEntry& entry, const Status& status);

}  // namespace hvdlite::core
