#include "transport/cuda/gpu_identity.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "common/errors.h"

namespace hvdlite::transport::cuda {
namespace {

constexpr char kSeparator = '\x1f';  // ASCII unit separator: in no host, bus id or GPU name
constexpr char kRecordSeparator = '\x1e';  // between the identities of several ranks

std::string uuidText(const unsigned char* b) {
  char text[48];
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

std::string thisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// "GPU 0 (NVIDIA H200, GPU-…, PCI 0000:3b:00.0)"
std::string describe(const GpuIdentity& gpu) {
  std::string details = gpu.name;
  for (const auto* part : {&gpu.uuid, &gpu.pci_bus_id}) {
    if (part->empty()) continue;
    if (!details.empty()) details += ", ";
    details += (part == &gpu.pci_bus_id ? "PCI " : "") + *part;
  }
  return "GPU " + std::to_string(gpu.device) + (details.empty() ? "" : " (" + details + ")");
}

bool sameGpu(const GpuIdentity& a, const GpuIdentity& b) {
  if (!a.uuid.empty() && a.uuid == b.uuid) return true;
  // MIG instances of one GPU: UUIDs of their own, one bus id (on one host).
  return !a.pci_bus_id.empty() && a.pci_bus_id == b.pci_bus_id && a.host == b.host;
}

}  // namespace

std::string GpuIdentity::encode() const {
  return host + kSeparator + std::to_string(device) + kSeparator + uuid + kSeparator + pci_bus_id + kSeparator + name;
}

GpuIdentity GpuIdentity::decode(const std::string& text) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == kSeparator) parts.emplace_back();
    else parts.back() += c;
  }
  if (parts.size() != 5) throw TransportError("a peer sent a malformed GPU identity (" + std::to_string(parts.size()) + " fields)");
  GpuIdentity gpu;
  gpu.host = parts[0];
  try {
    gpu.device = std::stoi(parts[1]);
  } catch (const std::exception&) {
    throw TransportError("a peer sent a malformed GPU identity (device '" + parts[1] + "')");
  }
  gpu.uuid = parts[2];
  gpu.pci_bus_id = parts[3];
  gpu.name = parts[4];
  return gpu;
}

std::string joinIdentities(const std::vector<std::string>& encoded) {
  std::string joined;
  for (size_t i = 0; i < encoded.size(); ++i) {
    if (encoded[i].find(kRecordSeparator) != std::string::npos) {
      throw TransportError("a GPU identity holds a record separator");
    }
    joined += (i ? std::string(1, kRecordSeparator) : std::string()) + encoded[i];
  }
  return joined;
}

std::vector<GpuIdentity> splitIdentities(const std::string& joined) {
  std::vector<GpuIdentity> gpus;
  size_t start = 0;
  while (start <= joined.size()) {
    size_t end = joined.find(kRecordSeparator, start);
    if (end == std::string::npos) end = joined.size();
    gpus.push_back(GpuIdentity::decode(joined.substr(start, end - start)));
    start = end + 1;
  }
  return gpus;
}

GpuIdentity identifyGpu(const CudaApi& cuda, int device) {
  GpuIdentity gpu;
  gpu.host = thisHost();
  gpu.device = device;
  if (cuda.GetDeviceProperties) {
    // Room for any generation's cudaDeviceProp; only its prefix is read.
    auto room = std::make_unique<unsigned char[]>(kDevicePropertiesRoom);
    if (cuda.GetDeviceProperties(room.get(), device) == cudaSuccess) {
      DevicePropertiesPrefix prefix;
      std::memcpy(&prefix, room.get(), sizeof prefix);
      prefix.name[sizeof prefix.name - 1] = '\0';
      gpu.name = prefix.name;
      gpu.uuid = uuidText(prefix.uuid);
    }
  }
  if (cuda.DeviceGetPCIBusId) {
    char bus[32] = {};
    if (cuda.DeviceGetPCIBusId(bus, sizeof bus - 1, device) == cudaSuccess) gpu.pci_bus_id = bus;
  }
  return gpu;
}

std::string sharedGpuProblem(const std::vector<GpuIdentity>& by_set_rank, const std::vector<int>& global_ranks) {
  for (size_t a = 0; a < by_set_rank.size(); ++a) {
    std::string sharers;
    for (size_t b = a + 1; b < by_set_rank.size(); ++b) {
      if (!sameGpu(by_set_rank[a], by_set_rank[b])) continue;
      sharers += ", rank " + std::to_string(global_ranks[b]) + " on its " + describe(by_set_rank[b]);
    }
    if (sharers.empty()) continue;
    const GpuIdentity& gpu = by_set_rank[a];
    return "two ranks of one NCCL communicator are on the same GPU of host " + gpu.host + ": rank " +
           std::to_string(global_ranks[a]) + " on its " + describe(gpu) + sharers +
           " (NCCL refuses a GPU, or MIG instances of one GPU, shared by ranks of one communicator). Give each "
           "rank its own GPU: pin it with torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count()) "
           "(docs/gpus.md has TensorFlow's and JAX's), run no more ranks on a host than it has GPUs, "
           "or show each rank a different GPU (CUDA_VISIBLE_DEVICES, Slurm --gpus-per-task=1); or set "
           "HVDLITE_GPU_OPERATIONS=host to move CUDA tensors through host memory and the CPU transport instead "
           "of NCCL (docs/gpus.md)";
  }
  return {};
}

}  // namespace hvdlite::transport::cuda
