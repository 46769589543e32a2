#include "core/rank_device.h"

namespace hvdlite::core {

int rankDevice(int visible, int local_rank, int local_size) {
  if (visible == 1) return 0;
  if (visible >= local_size && local_rank < visible) return local_rank;
  return -1;
}

std::string rankDeviceProblem(int visible, int rank, int local_rank, int local_size,
                              const std::string& cuda_visible_devices) {
  if (visible < 1 || rankDevice(visible, local_rank, local_size) >= 0) return {};
  std::string devices;
  for (int d = 0; d < visible; ++d) devices += (d ? ", " : "") + std::to_string(d);
  return "rank " + std::to_string(rank) + " is local rank " + std::to_string(local_rank) + " of " +
         std::to_string(local_size) + " on its host but sees " + std::to_string(visible) + " GPUs (" + devices +
         (cuda_visible_devices.empty() ? std::string("; CUDA_VISIBLE_DEVICES unset")
                                       : "; CUDA_VISIBLE_DEVICES=" + cuda_visible_devices) +
         "), so some ranks of this host would share a GPU, which NCCL refuses. Give each rank its own GPU: show "
         "every rank all of the host's GPUs (local rank i takes GPU i) or exactly one (Slurm --gpus-per-task=1, "
         "one GPU per container), or start at most " + std::to_string(visible) +
         " ranks on this host (hvdliterun -H host:" + std::to_string(visible) +
         "); or set HVDLITE_GPU_OPERATIONS=host to move CUDA tensors through host memory instead of NCCL "
         "(docs/gpus.md)";
}

}  // namespace hvdlite::core
