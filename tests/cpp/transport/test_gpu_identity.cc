// Tests csrc/transport/cuda/gpu_identity.cc: what ranks exchange about their
// GPU, and when two of them share one (Note [A GPU shared by two ranks]).
// The exchange itself, on ranks over the fake CUDA runtime, is tested from
// Python (tests/common/test_gpu_device_choice.py).
#include <string>
#include <vector>

#include "common/errors.h"
#include "testing.h"
#include "transport/cuda/gpu_identity.h"

using namespace hvdlite;
using namespace hvdlite::transport::cuda;

namespace {

GpuIdentity gpu(const std::string& host, int device, const std::string& uuid, const std::string& bus) {
  GpuIdentity g;
  g.host = host;
  g.device = device;
  g.uuid = uuid;
  g.pci_bus_id = bus;
  g.name = "NVIDIA H200";
  return g;
}

}  // namespace

TEST(an_identity_travels_whole) {
  GpuIdentity sent = gpu("node-1", 3, "GPU-5e2f", "0000:3b:00.0");
  GpuIdentity got = GpuIdentity::decode(sent.encode());
  CHECK(got.host == "node-1" && got.device == 3 && got.uuid == "GPU-5e2f" && got.pci_bus_id == "0000:3b:00.0" &&
        got.name == "NVIDIA H200");
  CHECK_THROWS(GpuIdentity::decode("node-1"), TransportError, "malformed GPU identity");
}

TEST(the_identities_of_every_rank_travel_as_one_message) {
  std::string joined = joinIdentities({gpu("a", 0, "GPU-1", "x").encode(), gpu("b", 2, "", "").encode()});
  std::vector<GpuIdentity> gpus = splitIdentities(joined);
  CHECK_EQ(gpus.size(), size_t{2});
  CHECK(gpus[0].uuid == "GPU-1" && gpus[1].host == "b" && gpus[1].device == 2 && gpus[1].uuid.empty());
  CHECK_THROWS(splitIdentities(joined + "\x1e"), TransportError, "malformed GPU identity");
}

TEST(gpus_of_their_own_are_no_problem_even_with_the_same_bus_id_on_other_hosts) {
  // Identical servers: every host's first GPU sits at the same bus id.
  std::vector<GpuIdentity> gpus = {gpu("a", 0, "GPU-1", "0000:3b:00.0"), gpu("a", 1, "GPU-2", "0000:5e:00.0"),
                                   gpu("b", 0, "GPU-3", "0000:3b:00.0")};
  CHECK(sharedGpuProblem(gpus, {0, 1, 2}).empty());
}

TEST(one_gpu_for_two_ranks_is_named_with_the_ranks_and_the_way_out) {
  std::vector<GpuIdentity> gpus = {gpu("a", 0, "GPU-1", "0000:3b:00.0"), gpu("a", 1, "GPU-2", "0000:5e:00.0"),
                                   gpu("a", 0, "GPU-1", "0000:3b:00.0")};
  std::string why = sharedGpuProblem(gpus, {4, 5, 6});
  for (const char* part : {"same GPU of host a", "rank 4 on its GPU 0 (NVIDIA H200, GPU-1, PCI 0000:3b:00.0)",
                           "rank 6 on its GPU 0", "HVDLITE_GPU_OPERATIONS=host"}) {
    CHECK(why.find(part) != std::string::npos);
  }
  CHECK(why.find("rank 5") == std::string::npos);
}

TEST(two_mig_instances_of_one_gpu_are_one_gpu_to_nccl) {
  std::vector<GpuIdentity> gpus = {gpu("a", 0, "MIG-1", "0000:3b:00.0"), gpu("a", 0, "MIG-2", "0000:3b:00.0")};
  CHECK(!sharedGpuProblem(gpus, {0, 1}).empty());
}

TEST(a_runtime_that_cannot_say_compares_nothing) {
  std::vector<GpuIdentity> gpus = {gpu("a", 0, "", ""), gpu("a", 0, "", "")};
  CHECK(sharedGpuProblem(gpus, {0, 1}).empty());
}

int main() { return RUN_ALL_TESTS(); }
