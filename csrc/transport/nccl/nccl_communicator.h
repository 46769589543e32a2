// A process set's collectives on CUDA memory through one NCCL communicator,
// created once (at the set's first device response) from a unique id that
// set rank 0 sends over the set's CPU communicator. What every CUDA
// communicator shares (streams, events, staging, buffers) is CudaCommunicator's.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transport/cuda/cuda_communicator.h"
#include "transport/nccl/nccl_library.h"

namespace hvdlite::transport::nccl {

// The first NCCL whose 1-rank premultiplied sums cover every element
// (Note [One-rank scaled sums] in nccl_communicator.cc).
constexpr int kOneRankScaledSumFixed = 22907;

using NcclLoader = std::function<std::shared_ptr<const NcclLibrary>()>;

class NcclCommunicator final : public cuda::CudaCommunicator {
 public:
  // `load` is called at the first useDevice(); `resources` and `cpu` must
  // outlive this. `timeout_seconds` bounds creation, finalize and host waits.
  NcclCommunicator(NcclLoader load, cuda::DeviceResources& resources, Communicator& cpu, double timeout_seconds)
      : CudaCommunicator(resources, cpu, timeout_seconds), load_(std::move(load)) {}
  // ncclCommAbort unless close() finalized and destroyed the communicator.
  ~NcclCommunicator() override;

  std::string describe() const override { return "nccl"; }

 private:
  // Communicator's and DeviceCommunicator's hooks (Note [Hook lists]).
  HVDLITE_COLLECTIVE_HOOKS;
  HVDLITE_SCALED_HOOKS;

  // CudaCommunicator's hooks.
  void bind(int device) override;
  std::string backendError() override;
  void abortBackend() override;
  void closeBackend(bool everyone_ok) override;

  // Runs fn(comm), then waits out ncclInProgress (non-blocking
  // communicators) and checks the result (Note [Calls against abort]).
  // `what` (a literal: nothing is built per call) names the call in errors.
  template <typename Fn>
  void call(const char* what, Fn&& fn);
  // fn(comm) while abort() cannot free the communicator; false (fn not
  // run) once it was aborted.
  template <typename Fn>
  bool withComm(Fn&& fn);
  void settle(ncclResult_t result, const char* what);
  // Fails every member alike when two of them are on one GPU (Note [A GPU
  // shared by two ranks] in cuda/gpu_identity.h); collective over the set.
  void requireOwnGpus(int device);
  ncclResult_t reduceScatterWith(ncclComm_t comm, const void* in, void* out, const std::vector<size_t>& counts,
                                 DataType dtype, ncclRedOp_t op);
  // The premultiplied-sum operator for `factor` in dtype's representation
  // (Note [Scaled-sum operators]).
  ncclRedOp_t scaledSum(DataType dtype, double factor);
  void destroyScaledSums();
  // (first element, count) of the calls a scaled sum of `count` elements
  // takes (Note [One-rank scaled sums]).
  std::vector<std::pair<size_t, size_t>> scaledPieces(size_t count, size_t esize) const;
  const NcclApi& api() const { return nccl_->api(); }

  NcclLoader load_;
  std::shared_ptr<const NcclLibrary> nccl_;
  std::atomic<ncclComm_t> comm_{nullptr};  // read by the watchdog
  bool finished_ = false;  // close() finalized and destroyed comm_
  std::atomic<int> in_flight_{0};  // calls between their abort check and their return
  // Note [Scaled-sum operators]: by (dtype, factor), for comm_'s life.
  std::map<std::pair<DataType, double>, ncclRedOp_t> scaled_sums_;
};

// NCCL's type for a core dtype (bool travels as uint8) and its reduction
// (bool sum = logical or = max, product = and = min).
ncclDataType_t ncclType(DataType dtype);
ncclRedOp_t ncclOp(DataType dtype, ReduceOp op);

}  // namespace hvdlite::transport::nccl
