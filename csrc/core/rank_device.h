// Which GPU a rank takes when nothing it did says so, and when the cluster's
// layout leaves it none of its own.
//
// Note [A GPU per rank]
// Clusters hand GPUs out in three ways, and a rank must find its own in each:
//  - one visible device per rank (Slurm --gpus-per-task=1, one GPU per
//    Kubernetes container, a MIG slice, CUDA_VISIBLE_DEVICES set per rank):
//    every rank sees "GPU 0", and that is its own;
//  - every GPU of the host visible to every rank (hvdliterun, mpirun, srun
//    without binding): local rank i takes GPU i, as in Horovod; with more
//    GPUs than local ranks the rest stay idle;
//  - anything else (2 GPUs for 4 local ranks) leaves some ranks sharing a
//    GPU, which one NCCL communicator refuses (Note [A GPU shared by two
//    ranks] in transport/cuda/gpu_identity.h): the first CUDA tensor fails
//    with the visible devices and the ways out.
// The idiom the docs and examples use, local_rank % device_count (docs/
// gpus.md), picks the same GPU in the first two layouts, so a script's own
// choice and the core's (a rank that joined before its first CUDA tensor)
// agree. HVDLITE_CUDA_DEVICE overrides the core's.
#pragma once

#include <string>

namespace hvdlite::core {

// The device a rank at `local_rank` of `local_size` takes when it sees
// `visible` GPUs, or -1 when the layout leaves it none of its own.
int rankDevice(int visible, int local_rank, int local_size);

// "" when rankDevice() finds a device; else why not and what to do.
// `cuda_visible_devices` is the variable's value ("" when unset).
std::string rankDeviceProblem(int visible, int rank, int local_rank, int local_size,
                              const std::string& cuda_visible_devices);

}  // namespace hvdlite::core
