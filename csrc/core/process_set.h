// A process set: the ranks a collective runs among, with its own communicator
// and negotiation. Set 0 is every rank.
#pragma once

#include <memory>
#include <vector>

#include "core/controller.h"
#include "transport/communicator.h"
#include "transport/device_communicator.h"

namespace hvdlite::core {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int> ranks;  // global ranks, sorted
  // Only on members; null on ranks outside the set.
  std::unique_ptr<transport::Communicator> comm;
  // Negotiation's own communicator when the controller's transport is not
  // the data's (HVDLITE_CONTROLLER); null: negotiation uses comm.
  std::unique_ptr<transport::Communicator> control;
  std::unique_ptr<Controller> controller;
  // CUDA tensors: NCCL over the same ranks, bootstrapped through comm on
  // first use; with HVDLITE_HIERARCHICAL_ALLREDUCE=1 (global set only), its
  // allreduce in two levels (transport::hierarchicalDeviceCommunicator).
  std::unique_ptr<transport::DeviceCommunicator> device_comm;

  bool isMember() const { return comm != nullptr; }
  // This rank's rank within the set, or -1.
  int rankOf(int global_rank) const {
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] == global_rank) return static_cast<int>(i);
    }
    return -1;
  }
};

}  // namespace hvdlite::core
