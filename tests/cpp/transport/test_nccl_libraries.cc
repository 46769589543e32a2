// Tests the run-time loading of NCCL and the CUDA runtime (csrc/transport/nccl/
// dynamic_library.cc, libraries.cc) on a machine that may have neither: the
// search order, and what a failure says. Loading real or fake libraries is
// tested from Python (tests/common/test_gpu_libraries.py), which can build them.
#include <string>
#include <vector>

#include "common/errors.h"
#include "testing.h"
#include "transport/device_communicator.h"
#include "transport/nccl/libraries.h"
#include "transport/nccl/nccl_communicator.h"

using namespace hvdlite;
using namespace hvdlite::transport;
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
  auto cudart = cudartCandidates(search);
  CHECK_EQ(cudart.front(), alreadyLoaded("libcudart.so.12"));
  CHECK_EQ(cudart.back(), std::string("libcudart.so"));
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
}

TEST(nccl_version_is_zero_when_the_named_file_does_not_exist) {
  CHECK_EQ(ncclVersion(DeviceTransportOptions{"/nonexistent/libnccl.so.2", "", ""}), 0);
}

TEST(loading_names_the_missing_file_and_what_to_install) {
  LibrarySearch search;
  search.nccl_library = "/nonexistent/libnccl.so.2";
  try {
    GpuLibraries::load(search);
    CHECK(false);
  } catch (const TransportError& e) {
    std::string what = e.what();
    CHECK(what.find("NCCL (libnccl.so.2) could not be loaded") != std::string::npos);
    CHECK(what.find("/nonexistent/libnccl.so.2") != std::string::npos);
    CHECK(what.find("pip install nvidia-nccl-cu12") != std::string::npos);
  }
}

TEST(a_device_transport_loads_nothing_until_asked) {
  auto transport = createDeviceTransport({"/nonexistent/libnccl.so.2", "", ""});
  bool threw = false;
  try {
    transport->requireAvailable();
  } catch (const TransportError& e) {
    threw = std::string(e.what()).find("/nonexistent/libnccl.so.2") != std::string::npos;
  }
  CHECK(threw);
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
