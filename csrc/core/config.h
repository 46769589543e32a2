// Everything the core reads from the environment, parsed once at init.
// Each HVDLITE_X is also accepted under Horovod's name HOROVOD_X; HVDLITE_X wins.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace hvdlite::core {

// Note [Stall shutdown]
// A job whose ranks wait for something no rank will do (different
// collectives, a rank that stopped submitting, a peer frozen in a transfer)
// would wait forever, so by default what stalled kStallShutdownFactor times
// the stall check time fails with the stall report's message, and an
// uncaught error ends the job with that reason (10 minutes at the default
// 60 s). HVDLITE_STALL_SHUTDOWN_TIME_SECONDS sets another time; 0 waits
// forever, as Horovod does by default.
inline constexpr double kStallShutdownFactor = 10.0;

struct Config {
  // Job layout, from the launcher (or mpirun/srun/torchrun via the Python layer).
  int rank = 0;
  int size = 1;
  int local_rank = -1;  // -1: derive from hostnames at rendezvous
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;
  std::string hostname;  // this rank's host identity; "" = gethostname()

  // Rendezvous.
  std::string store_addr;  // "" = single process without a store (size must be 1)
  int store_port = 0;
  std::string secret;
  std::string job_id = "job";
  std::string bind_addr;  // address data connections listen on and publish
  double start_timeout_s = 60.0;
  // HVDLITE_PEER_TIMEOUT_SECONDS: a silent peer host fails its links after
  // this long (Note [Socket tuning] in transport/tcp/socket.cc); 0 = kernel's.
  double peer_timeout_s = 10.0;
  // Which rendezvous round of the job this init() joins (HVDLITE_RENDEZVOUS_ROUND):
  // set by elastic training, where processes started at different times must
  // agree on it; -1 = count this process's own inits (0, 1, 2, ...).
  int rendezvous_round = -1;
  std::string transport = "auto";  // HVDLITE_CPU_OPERATIONS; HVDLITE_SHM_DISABLE=1 -> "tcp"
  std::string controller = "auto";  // HVDLITE_CONTROLLER: auto (= transport's), mpi, tcp (gloo)
  // Not from the environment: the Fortran handle of the MPI communicator
  // given to hvdlite.init(comm=...); -1 = MPI_COMM_WORLD.
  int64_t mpi_comm = -1;

  // Tuning.
  int64_t fusion_threshold = 128LL * 1024 * 1024;
  int64_t pipeline_chunk = -1;  // Note [Pipelined allreduce]; -1 = the transport's, 0 = off
  double cycle_time_ms = 1.0;
  int64_t cache_capacity = 1024;
  double stall_warning_s = 60.0;  // 0 disables the stall inspector
  // Fail what stalled this long: tensors some rank never submitted, a join,
  // a wait inside a transfer (Note [Stall shutdown]); 0 = never. Unset:
  // kStallShutdownFactor x stall_warning_s.
  double stall_shutdown_s = 0.0;
  // Note [Divergence] in coordinator.cc. HVDLITE_DIVERGENCE_CHECK_TIME_SECONDS:
  // report ranks waiting on different collectives after this (0 = never);
  // HVDLITE_DIVERGENCE_SHUTDOWN_TIME_SECONDS: fail them once every rank is
  // blocked and this has passed (0 = leave it to the stall shutdown).
  double divergence_warning_s = 5.0;
  double divergence_shutdown_s = 10.0;
  // HVDLITE_CALL_SITES: bindings record where the program called each
  // collective (Note [Call sites] in core/call_site.h); 0 = off.
  bool call_sites = true;
  // HVDLITE_JOIN_AVERAGE_ACTIVE: Average over the ranks that have not joined
  // (Note [Join] in coordinator.cc); off = Horovod's, divide by the set size.
  bool join_average_active = false;
  // HVDLITE_TEST_CORRUPT_REQUESTS: tests only, "" (off), "count", "rank" or
  // "shape" (Note [Corrupt requests for tests] in controller.cc).
  std::string test_corrupt_requests;
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  std::string log_level = "warning";  // HVDLITE_LOG_LEVEL (common/logging.h)
  bool log_hide_time = false;         // HVDLITE_LOG_HIDE_TIME

  // HVDLITE_AUTOTUNE: search fusion threshold and cycle time online (Note [Autotune search]).
  bool autotune = false;
  std::string autotune_log;  // CSV of every scored window, written by rank 0
  int autotune_warmup_samples = 3;
  int autotune_steps_per_sample = 10;
  int autotune_samples_per_candidate = 2;

  // CUDA tensors (Note [GPU library search] in transport/cuda/cuda_runtime.h).
  std::string nccl_library;      // HVDLITE_NCCL_LIBRARY: this libnccl.so.2 and no other
  std::string cudart_library;    // HVDLITE_CUDART_LIBRARY: this libcudart.so.13/.12 and no other
  std::string gpu_library_path;  // HVDLITE_GPU_LIBRARY_PATH: ':'-separated directories
  // libmpi (Note [MPI at run time] in transport/mpi/mpi_loader.h).
  std::string mpi_library;       // HVDLITE_MPI_LIBRARY: this libmpi and no other
  std::string mpi_library_path;  // HVDLITE_MPI_LIBRARY_PATH: ':'-separated directories
  // HVDLITE_HIERARCHICAL_ALLREDUCE: -1 unset (CPU: two levels where a set
  // spans hosts of several ranks each; CUDA: off, as in Horovod), 1 on, 0 off.
  int hierarchical_allreduce = -1;
  // HVDLITE_HIERARCHICAL_ALLGATHER: -1 unset or 1: two levels for the same
  // sets as the allreduce (Note [Two-level allgather]); 0 off.
  int hierarchical_allgather = -1;
  // HVDLITE_NCCL_TIMEOUT_SECONDS: a GPU batch unfinished this long, or an NCCL
  // communicator not created in this time, fails the job (Note [Failing, not hanging]).
  double nccl_timeout_s = 300.0;
  // HVDLITE_CUDA_DEVICE: this rank's GPU before any CUDA tensor of its own
  // showed it (Note [A rank's own GPU]); -1 = its local rank.
  int cuda_device = -1;
  // HVDLITE_GPU_OPERATIONS (HOROVOD_GPU_OPERATIONS, HOROVOD_GPU_ALLREDUCE):
  // "nccl", or "host" (transport/cuda/host_staged_communicator.h).
  std::string gpu_operations = "nccl";
  // CUDA_VISIBLE_DEVICES as this process got it ("" when unset), and the
  // NCCL_* variables set ("NAME=value" separated by spaces): for messages
  // and the info log only (Note [A GPU per rank] in core/rank_device.h).
  std::string cuda_visible_devices;
  std::string nccl_variables;
  // HVDLITE_BATCHED_COPIES: pack and unpack a fused CUDA batch with one
  // cudaMemcpyBatchAsync each where the runtime has it (CUDA >= 12.8).
  bool batched_copies = true;

  // Parses `env` (name -> value, normally the process environment). A malformed
  // value throws InvalidArgument naming the variable and the value.
  static Config fromEnvironment(const std::map<std::string, std::string>& env);
};

}  // namespace hvdlite::core
