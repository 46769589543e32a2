#include "core/config.h"

#include <cctype>
#include <cstdlib>

#include "common/errors.h"
#include "transport/transport.h"

namespace hvdlite::core {
namespace {

class EnvReader {
 public:
  explicit EnvReader(const std::map<std::string, std::string>& env) : env_(env) {}

  // Looks up HVDLITE_<name>, then HOROVOD_<name>. Returns the variable's
  // full name through *source for messages.
  bool find(const std::string& name, std::string* value, std::string* source) const {
    for (const char* prefix : {"HVDLITE_", "HOROVOD_"}) {
      auto it = env_.find(prefix + name);
      if (it != env_.end() && !it->second.empty()) {
        *value = it->second;
        *source = it->first;
        return true;
      }
    }
    return false;
  }
  void str(const std::string& name, std::string* out) const {
    std::string source;
    find(name, out, &source);
  }
  template <typename T>
  void number(const std::string& name, T* out, double min_value) const {
    std::string value, source;
    if (!find(name, &value, &source)) return;
    char* end = nullptr;
    double parsed = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || parsed < min_value) {
      throw InvalidArgument(source + "='" + value + "' is not a valid value: expected a number >= " +
                            std::to_string(min_value));
    }
    *out = static_cast<T>(parsed);
  }
  // A flag whose absence means something of its own: *out keeps its value
  // (e.g. -1, "automatic") unless the variable says 1 or 0.
  void flag(const std::string& name, int* out) const {
    bool value = false;
    std::string text, source;
    if (!find(name, &text, &source)) return;
    flag(name, &value);
    *out = value ? 1 : 0;
  }
  void flag(const std::string& name, bool* out) const {
    std::string value, source;
    if (!find(name, &value, &source)) return;
    if (value == "1" || value == "true" || value == "True" || value == "yes") *out = true;
    else if (value == "0" || value == "false" || value == "False" || value == "no") *out = false;
    else throw InvalidArgument(source + "='" + value + "' is not a boolean: use 1 or 0");
  }

 private:
  const std::map<std::string, std::string>& env_;
};

// HVDLITE_GPU_OPERATIONS (read after HOROVOD_GPU_ALLREDUCE, so that it wins;
// Horovod picks these when it is built, here they take effect at run time,
// for every CUDA collective): "nccl", or "host" (Horovod's MPI: CUDA tensors
// over the CPU transport, staged in pinned memory).
std::string gpuOperations(const std::string& value) {
  std::string lower;
  for (char ch : value) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower == "nccl") return "nccl";
  if (lower == "host" || lower == "mpi" || lower == "gloo") return "host";
  throw InvalidArgument("HVDLITE_GPU_OPERATIONS (or HOROVOD_GPU_OPERATIONS / HOROVOD_GPU_ALLREDUCE)='" + value +
                        "' is not a valid value: use nccl (NCCL on the GPU) or host (CUDA tensors staged through "
                        "host memory and the CPU transport; Horovod's MPI)");
}

// The store and every data connection trust whoever knows the secret, so an
// empty one would let anyone in (Note [No computable secret] in
// hvdlite/common/rendezvous.py).
void checkSecret(const std::map<std::string, std::string>& env, const Config& c) {
  const char* how = "give every rank the same secret (export HVDLITE_SECRET=$(openssl rand -hex 16)), or start "
                    "the job with hvdliterun, mpirun, srun or torchrun, which find one (README \"Launching\")";
  for (const char* name : {"HVDLITE_SECRET", "HOROVOD_SECRET"}) {
    auto it = env.find(name);
    if (it != env.end() && it->second.find_first_not_of(" \t\r\n") == std::string::npos) {
      throw InvalidArgument(std::string(name) + " is set but empty: an empty secret lets anyone into the job's "
                            "store and data connections; " + how);
    }
  }
  if (c.size > 1 && c.secret.empty() && transport::needsStore(c.transport, c.controller)) {
    throw InvalidArgument("HVDLITE_SIZE=" + std::to_string(c.size) + " with a rendezvous store at " + c.store_addr +
                          " but no job secret (HVDLITE_SECRET): the job would be open to anyone; " + how);
  }
}

}  // namespace

Config Config::fromEnvironment(const std::map<std::string, std::string>& env) {
  EnvReader read(env);
  Config c;
  read.number("RANK", &c.rank, 0);
  read.number("SIZE", &c.size, 1);
  read.number("LOCAL_RANK", &c.local_rank, 0);
  read.number("LOCAL_SIZE", &c.local_size, 1);
  read.number("CROSS_RANK", &c.cross_rank, 0);
  read.number("CROSS_SIZE", &c.cross_size, 1);
  read.str("HOSTNAME", &c.hostname);
  read.str("STORE_ADDR", &c.store_addr);
  read.number("STORE_PORT", &c.store_port, 0);
  read.str("SECRET", &c.secret);
  read.str("JOB_ID", &c.job_id);
  read.str("BIND_ADDR", &c.bind_addr);
  // Horovod's ranks take their rendezvous and connection timeout from
  // HOROVOD_GLOO_TIMEOUT_SECONDS (horovodrun --gloo-timeout-seconds); a
  // START_TIMEOUT variable wins over it.
  read.number("GLOO_TIMEOUT_SECONDS", &c.start_timeout_s, 0);
  read.number("START_TIMEOUT", &c.start_timeout_s, 0);
  read.number("PEER_TIMEOUT_SECONDS", &c.peer_timeout_s, 0);
  read.number("RENDEZVOUS_ROUND", &c.rendezvous_round, 0);
  read.str("CPU_OPERATIONS", &c.transport);
  for (auto& ch : c.transport) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  // Horovod's name for its built-in transport is gloo: ours is "auto"
  // (shared memory within a host, TCP across hosts); "tcp" forces TCP.
  if (c.transport == "gloo") c.transport = "auto";
  read.str("CONTROLLER", &c.controller);
  for (auto& ch : c.controller) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (c.controller == "gloo") c.controller = "tcp";
  bool shm_disabled = false;
  read.flag("SHM_DISABLE", &shm_disabled);
  if (shm_disabled && (c.transport == "auto" || c.transport == "shm")) c.transport = "tcp";
  read.number("FUSION_THRESHOLD", &c.fusion_threshold, 0);
  read.number("CYCLE_TIME", &c.cycle_time_ms, 0);
  read.number("PIPELINE_CHUNK", &c.pipeline_chunk, -1);
  read.number("CACHE_CAPACITY", &c.cache_capacity, 0);
  read.number("STALL_CHECK_TIME_SECONDS", &c.stall_warning_s, 0);
  bool stall_disabled = false;
  read.flag("STALL_CHECK_DISABLE", &stall_disabled);
  if (stall_disabled) c.stall_warning_s = 0;
  c.stall_shutdown_s = c.stall_warning_s * kStallShutdownFactor;  // Note [Stall shutdown]
  read.number("STALL_SHUTDOWN_TIME_SECONDS", &c.stall_shutdown_s, 0);
  read.number("DIVERGENCE_CHECK_TIME_SECONDS", &c.divergence_warning_s, 0);
  read.number("DIVERGENCE_SHUTDOWN_TIME_SECONDS", &c.divergence_shutdown_s, 0);
  read.flag("CALL_SITES", &c.call_sites);
  read.flag("JOIN_AVERAGE_ACTIVE", &c.join_average_active);
  read.str("TEST_CORRUPT_REQUESTS", &c.test_corrupt_requests);
  if (!c.test_corrupt_requests.empty() && c.test_corrupt_requests != "count" && c.test_corrupt_requests != "rank" &&
      c.test_corrupt_requests != "shape") {
    throw InvalidArgument("HVDLITE_TEST_CORRUPT_REQUESTS='" + c.test_corrupt_requests +
                          "' is not a valid value: it is for hvdlite's own tests; unset it, or use count, rank or shape");
  }
  read.str("TIMELINE", &c.timeline_path);
  read.flag("TIMELINE_MARK_CYCLES", &c.timeline_mark_cycles);
  read.str("LOG_LEVEL", &c.log_level);
  read.flag("LOG_HIDE_TIME", &c.log_hide_time);
  read.flag("AUTOTUNE", &c.autotune);
  read.str("AUTOTUNE_LOG", &c.autotune_log);
  read.number("AUTOTUNE_WARMUP_SAMPLES", &c.autotune_warmup_samples, 0);
  read.number("AUTOTUNE_STEPS_PER_SAMPLE", &c.autotune_steps_per_sample, 1);
  read.number("AUTOTUNE_SAMPLES_PER_CANDIDATE", &c.autotune_samples_per_candidate, 1);
  read.str("NCCL_LIBRARY", &c.nccl_library);
  read.str("CUDART_LIBRARY", &c.cudart_library);
  read.str("GPU_LIBRARY_PATH", &c.gpu_library_path);
  read.str("MPI_LIBRARY", &c.mpi_library);
  read.str("MPI_LIBRARY_PATH", &c.mpi_library_path);
  read.flag("HIERARCHICAL_ALLREDUCE", &c.hierarchical_allreduce);
  read.flag("HIERARCHICAL_ALLGATHER", &c.hierarchical_allgather);
  read.number("NCCL_TIMEOUT_SECONDS", &c.nccl_timeout_s, 0.001);
  read.number("CUDA_DEVICE", &c.cuda_device, 0);
  read.str("GPU_ALLREDUCE", &c.gpu_operations);
  read.str("GPU_OPERATIONS", &c.gpu_operations);
  c.gpu_operations = gpuOperations(c.gpu_operations);
  read.flag("BATCHED_COPIES", &c.batched_copies);
  // Not hvdlite's own: read for messages and the info log, never acted on.
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end()) c.cuda_visible_devices = it->second;
  for (const auto& [name, value] : env) {
    if (name.rfind("NCCL_", 0) != 0) continue;
    c.nccl_variables += (c.nccl_variables.empty() ? "" : " ") + name + "=" + value;
  }
  if (c.rank >= c.size) {
    throw InvalidArgument("HVDLITE_RANK=" + std::to_string(c.rank) + " is not below HVDLITE_SIZE=" +
                          std::to_string(c.size));
  }
  if (c.size > 1 && c.store_addr.empty() && transport::needsStore(c.transport, c.controller)) {
    throw InvalidArgument(
        "HVDLITE_SIZE=" + std::to_string(c.size) +
        " but no rendezvous store is set (HVDLITE_STORE_ADDR/HVDLITE_STORE_PORT); start the job with "
        "hvdliterun, mpirun, srun or torchrun so the ranks can find each other");
  }
  checkSecret(env, c);
  return c;
}

}  // namespace hvdlite::core
