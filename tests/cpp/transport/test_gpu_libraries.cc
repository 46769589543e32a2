// Tests the run-time loading of NCCL and the CUDA runtime (csrc/transport/cuda/
// dynamic_library.cc, cuda_runtime.cc, nccl/nccl_library.cc) on a machine that
// may have neither: the search order, and what a failure says. Loading real or
// fake libraries is tested from Python (tests/common/test_gpu_libraries.py),
// which can build them.
#include <string>
#include <vector>

#include "common/errors.h"
#include "testing.h"
#include "transport/device_communicator.h"
#include "transport/cuda/cuda_runtime.h"
#include "transport/nccl/nccl_communicator.h"
#include "transport/nccl/nccl_library.h"

using namespace hvdlite;
using namespace hvdlite::transport;
using namespace hvdlite::transport::cuda;
using namespace hvdlite::transport::nccl;

TEST(an_explicit_library_is_the_only_candidate) {
  LibrarySearch search;
  search.nccl_library = "/opt/nccl/libnccl.so.2";
  search.directories = {"/somewhere"};
  CHECK(ncclCandidates(search) == std::vector<std::string>{"/opt/nccl/libnccl.so.2"});
}

TEST(search_order_is_loaded_copy_then_directories_then_system) {
  LibrarySearch search;
  search.directories = {"/wheel/nvidia/nccl/lib", "", "/torch/lib"};
  std::vector<std::string> expected = {alreadyLoaded("libnccl.so.2"), "/wheel/nvidia/nccl/lib/libnccl.so.2",
                                       "/torch/lib/libnccl.so.2", "libnccl.so.2"};
  CHECK(ncclCandidates(search) == expected);
}

// Note [GPU library search]: the framework's copy of either generation first,
// then CUDA 13 before 12 in each place.
TEST(the_cuda_runtime_is_looked_for_in_both_generations_newest_first) {
  LibrarySearch search;
  search.directories = {"/wheel/nvidia/cu13/lib"};
  std::vector<std::string> expected = {alreadyLoaded("libcudart.so.13"),
                                       alreadyLoaded("libcudart.so.12"),
                                       alreadyLoaded("libcudart.so"),
                                       "/wheel/nvidia/cu13/lib/libcudart.so.13",
                                       "/wheel/nvidia/cu13/lib/libcudart.so.12",
                                       "/wheel/nvidia/cu13/lib/libcudart.so",
                                       "libcudart.so.13",
                                       "libcudart.so.12",
                                       "libcudart.so"};
  CHECK(cudartCandidates(search) == expected);
  search.cudart_library = "/opt/cuda/libcudart.so.12";
  CHECK(cudartCandidates(search) == std::vector<std::string>{"/opt/cuda/libcudart.so.12"});
  CHECK_EQ(cudaVersionName(13000), std::string("13.0"));
  CHECK_EQ(cudaVersionName(12080), std::string("12.8"));
}

TEST(a_missing_library_reports_each_path_it_tried) {
  DynamicLibrary lib({alreadyLoaded("libhvdlite_no_such.so"), "/nonexistent/libnccl.so.2"});
  CHECK(!lib.loaded());
  CHECK(lib.symbol("ncclGetVersion") == nullptr);
  // A library that is merely not loaded yet is no failure worth reporting.
  CHECK(lib.failures().find("libhvdlite_no_such.so") == std::string::npos);
  CHECK(lib.failures().find("/nonexistent/libnccl.so.2") != std::string::npos);
}

TEST(a_library_already_in_the_process_is_found_without_a_path) {
  DynamicLibrary lib({alreadyLoaded("libc.so.6")});
  CHECK(lib.loaded());
  CHECK(lib.symbol("malloc") != nullptr);
  CHECK(lib.location().find("/libc.so.6") != std::string::npos);  // the file, for reports
}

TEST(nccl_version_is_zero_when_the_named_file_does_not_exist) {
  CHECK_EQ(ncclVersion(DeviceTransportOptions{"/nonexistent/libnccl.so.2", "", ""}), 0);
}

TEST(loading_names_the_missing_file_and_what_to_install) {
  LibrarySearch search;
  search.nccl_library = "/nonexistent/libnccl.so.2";
  search.cudart_library = "/nonexistent/libcudart.so.13";
  CHECK_THROWS(NcclLibrary::load(search), TransportError, "NCCL (libnccl.so.2) could not be loaded");
  CHECK_THROWS(NcclLibrary::load(search), TransportError, "/nonexistent/libnccl.so.2");
  CHECK_THROWS(NcclLibrary::load(search), TransportError, "nvidia-nccl-cu13");
  CHECK_THROWS(NcclLibrary::load(search), TransportError, "HVDLITE_GPU_OPERATIONS=host");
  CHECK_THROWS(CudaRuntime::load(search), TransportError, "the CUDA runtime (libcudart.so.13 or libcudart.so.12)");
  CHECK_THROWS(CudaRuntime::load(search), TransportError, "/nonexistent/libcudart.so.13");
}

// HVDLITE_GPU_OPERATIONS=host needs the CUDA runtime only: what fails is the
// runtime, never NCCL, and the report says which operations are in use.
TEST(host_operations_never_load_nccl) {
  DeviceTransportOptions options{"/nonexistent/libnccl.so.2", "/nonexistent/libcudart.so.12", "", 300, "host"};
  auto transport = createDeviceTransport(options);
  CHECK_THROWS(transport->requireAvailable(), TransportError, "/nonexistent/libcudart.so.12");
  auto report = transport->report();
  CHECK_EQ(report.operations, std::string("host"));
  CHECK(report.error.find("libnccl") == std::string::npos);
  CHECK(report.error.find("/nonexistent/libcudart.so.12") != std::string::npos);
  transport->requireReducible(DataType::kInt16);  // the CPU transport reduces every dtype
  auto nccl = createDeviceTransport({"/nonexistent/libnccl.so.2", "", "", 300, "nccl"});
  CHECK_THROWS(nccl->requireReducible(DataType::kInt16), InvalidArgument, "NCCL has no int16 type");
}

TEST(a_device_transport_loads_nothing_until_asked) {
  auto transport = createDeviceTransport({"/nonexistent/libnccl.so.2", "/nonexistent/libcudart.so.13", ""});
  // Created without loading; the first need names what it could not load.
  CHECK_THROWS(transport->requireAvailable(), TransportError, "/nonexistent/libcudart.so.13");
  CHECK_THROWS(transport->requireAvailable(), TransportError, "/nonexistent/libcudart.so.13");  // remembered
}

TEST(dtypes_and_reduce_ops_map_to_nccls) {
  CHECK_EQ(static_cast<int>(ncclType(DataType::kFloat32)), static_cast<int>(ncclFloat32));
  CHECK_EQ(static_cast<int>(ncclType(DataType::kBFloat16)), static_cast<int>(ncclBfloat16));
  CHECK_EQ(static_cast<int>(ncclType(DataType::kBool)), static_cast<int>(ncclUint8));
  CHECK_EQ(ncclOp(DataType::kFloat32, ReduceOp::kProduct), ncclProd);
  // bool: sum is a logical or, product a logical and.
  CHECK_EQ(ncclOp(DataType::kBool, ReduceOp::kSum), ncclMax);
  CHECK_EQ(ncclOp(DataType::kBool, ReduceOp::kProduct), ncclMin);
  bool threw = false;
  try {
    ncclOp(DataType::kFloat32, ReduceOp::kAverage);
  } catch (const InvalidArgument&) {
    threw = true;
  }
  CHECK(threw);
}

int main() { return RUN_ALL_TESTS(); }
