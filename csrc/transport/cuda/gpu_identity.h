// Which physical GPU each rank of a communicator is on, so that two ranks on
// one GPU are named before NCCL refuses them with a bare "invalid usage".
//
// Note [A GPU shared by two ranks]
// NCCL cannot put two ranks of one communicator on one GPU, nor on two MIG
// instances of one GPU (NVIDIA/nccl#1716): ncclCommInitRank fails with
// ncclInvalidUsage, naming neither. That happens when a cluster shows every
// rank the same device (Slurm or Kubernetes giving each task "GPU 0" of a
// shared card, MIG slices) or when a script pins cuda:0 on every local rank.
// So when an NCCL communicator is created, its ranks exchange their GPU's
// identity (its UUID, and its PCI bus id with the host, since MIG instances
// of one GPU have UUIDs of their own but share the bus id) over the set's CPU
// communicator; every rank sees the same list and so fails alike, at once,
// naming the ranks, the GPU and the ways out.
#pragma once

#include <string>
#include <vector>

#include "transport/cuda/cuda_api.h"

namespace hvdlite::transport::cuda {

struct GpuIdentity {
  std::string host;        // gethostname()
  int device = -1;         // the ordinal this rank sees
  std::string uuid;        // "GPU-xxxxxxxx-...", "" when the runtime cannot say
  std::string pci_bus_id;  // "0000:3b:00.0", "" when the runtime cannot say
  std::string name;        // "NVIDIA H200"

  std::string encode() const;
  static GpuIdentity decode(const std::string& text);  // throws TransportError on garbage
};

// Several encoded identities as one message, and back (throws TransportError
// on garbage).
std::string joinIdentities(const std::vector<std::string>& encoded);
std::vector<GpuIdentity> splitIdentities(const std::string& joined);

// The identity of `device` as this process sees it.
GpuIdentity identifyGpu(const CudaApi& cuda, int device);

// "" when every rank is on a GPU of its own; else the message of Note [A GPU
// shared by two ranks]. `global_ranks[i]` is set rank i's rank in the job.
std::string sharedGpuProblem(const std::vector<GpuIdentity>& by_set_rank, const std::vector<int>& global_ranks);

}  // namespace hvdlite::transport::cuda
