// A quick bandwidth and latency check of the TCP transport's allreduce, ranks
// as threads over loopback. Prints numbers (bus bandwidth as nccl-tests and
// bench/ define it: algbw * 2(n-1)/n) and checks the results; set
// HVDLITE_BENCH_SIZES="bytes,bytes,..." to measure other sizes, and pass
// "shm" as the first argument to measure the shared-memory transport.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "ranks.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::transport;

namespace {

struct Result {
  double seconds_per_call = 0;
};

// Times `iterations` allreduces of `bytes` (float32) after one warm-up.
Result timeAllreduce(int size, size_t bytes, int iterations) {
  Result result;
  hvdlite::testing::runRanks(size, [&](int rank, Transport& transport) {
    std::vector<int> ranks(size);
    for (int r = 0; r < size; ++r) ranks[r] = r;
    auto comm = transport.communicator(ranks);
    size_t count = bytes / sizeof(float);
    // Zeros keep the sum finite however often it runs; test_tcp checks values.
    std::vector<float> data(count, 0.0f);
    comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    comm->barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (count > 0) CHECK_EQ(data[count - 1], 0.0f);
    if (rank == 0) result.seconds_per_call = elapsed / iterations;
  });
  return result;
}

void report(int size, size_t bytes, int iterations) {
  Result r = timeAllreduce(size, bytes, iterations);
  double algbw = bytes / r.seconds_per_call / 1e9;
  std::printf("  allreduce %d ranks %10zu B: %9.1f us  algbw %6.2f GB/s  busbw %6.2f GB/s\n",
              size, bytes, r.seconds_per_call * 1e6, algbw, algbw * 2 * (size - 1) / size);
}

}  // namespace

TEST(allreduce_bandwidth_and_latency) {
  if (const char* sizes = std::getenv("HVDLITE_BENCH_SIZES")) {
    std::stringstream list(sizes);
    for (std::string item; std::getline(list, item, ',');) {
      size_t bytes = std::stoull(item);
      report(2, bytes, bytes < (1 << 20) ? 2000 : 10);
    }
    return;
  }
  report(2, 4, 2000);
  report(2, 64 << 10, 500);
  report(2, 1 << 20, 100);
  report(2, 64 << 20, 5);
  report(3, 16 << 20, 3);
}

int main(int argc, char** argv) {
  if (argc > 1) hvdlite::testing::defaultTransport() = argv[1];
  return RUN_ALL_TESTS();
}
