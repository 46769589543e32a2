// A quick bandwidth and latency check of the TCP transport's allreduce, ranks
// as threads over loopback. Prints numbers (bus bandwidth as nccl-tests and
// bench/ define it: algbw * 2(n-1)/n) and checks every element of the results; set
// HVDLITE_BENCH_SIZES="bytes,bytes,..." to measure other sizes, and pass
// "shm" as the first argument to measure the shared-memory transport.
#include <algorithm>
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

// Rank `rank`'s input at element i: non-zero and different on every rank and
// at neighbouring elements, so a lost, repeated or misplaced block shows.
float allreduceInput(int rank, size_t i) { return static_cast<float>(rank + 1 + i % 5); }

// Checks every element of one allreduce's result against the sum of the ranks' inputs.
void checkAllreduceSum(const std::vector<float>& data, int size) {
  for (size_t i = 0; i < data.size(); ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r) want += allreduceInput(r, i);
    if (data[i] != want) CHECK_EQ(data[i], want);  // names the first wrong element's values
  }
}

// Times `iterations` allreduces of `bytes` (float32) after one warm-up; the
// warm-up's and a last call's results are checked element by element.
Result timeAllreduce(int size, size_t bytes, int iterations) {
  Result result;
  hvdlite::testing::runRanks(size, [&](int rank, Transport& transport) {
    std::vector<int> ranks(size);
    for (int r = 0; r < size; ++r) ranks[r] = r;
    auto comm = transport.communicator(ranks);
    size_t count = bytes / sizeof(float);
    std::vector<float> input(count);
    for (size_t i = 0; i < count; ++i) input[i] = allreduceInput(rank, i);
    std::vector<float> data = input;
    comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    checkAllreduceSum(data, size);
    comm->barrier();
    // The timed calls sum their own results again, so values grow (to inf
    // after a few hundred calls: same speed as finite floats, unlike denormals);
    // they are not checked, the call after them is.
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    }
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    data = input;
    comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    checkAllreduceSum(data, size);
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

// Rank `rank`'s block at byte i: never zero, and different on every rank.
char allgatherInput(int rank, size_t i) { return static_cast<char>(1 + (rank * 31 + i) % 251); }

// Checks every byte of an allgather's output: block r must be rank r's input.
void checkAllgather(const std::vector<char>& out, int size) {
  size_t block = out.size() / size;
  for (size_t i = 0; i < out.size(); ++i) {
    int from = static_cast<int>(i / block);
    if (out[i] != allgatherInput(from, i % block)) CHECK_EQ(int(out[i]), int(allgatherInput(from, i % block)));
  }
}

// Times `iterations` allgathers of `total` bytes (even blocks) after one
// warm-up, on the transport runRanks builds: seconds per call on rank 0. The
// output is checked byte by byte after the warm-up and after the timed calls.
double timeAllgather(int size, size_t total, int iterations) {
  double seconds = 0;
  hvdlite::testing::runRanks(size, [&](int rank, Transport& transport) {
    std::vector<int> ranks(size);
    for (int r = 0; r < size; ++r) ranks[r] = r;
    auto comm = transport.communicator(ranks);
    std::vector<size_t> sizes(size, total / size);
    std::vector<char> mine(total / size), out(total / size * size);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = allgatherInput(rank, i);
    comm->allgatherv(mine.data(), out.data(), sizes);
    checkAllgather(out, size);
    std::fill(out.begin(), out.end(), 0);
    comm->barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) comm->allgatherv(mine.data(), out.data(), sizes);
    double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    checkAllgather(out, size);
    if (rank == 0) seconds = elapsed / iterations;
  });
  return seconds;
}

// Sets ranksPerFakeHost() for one scope.
struct ScopedFakeHosts {
  explicit ScopedFakeHosts(int n) : saved(hvdlite::testing::ranksPerFakeHost()) {
    hvdlite::testing::ranksPerFakeHost() = n;
  }
  ~ScopedFakeHosts() { hvdlite::testing::ranksPerFakeHost() = saved; }
  int saved;
};

}  // namespace

// `test_tcp_bench two-level`: allgather on 2 and 3 fake hosts x 2 ranks, the
// flat ring against two levels at every size (Note [Two-level allgather]),
// for its threshold. Loopback has no link to save bytes on:
// this shows what the two shared-memory steps cost, not what they save.
// Without "two-level" (as ctest runs it) the same runs check their results at
// three sizes with a few calls each, so the two-level path is checked there too.
TEST(allgather_flat_and_in_two_levels) {
  bool benchmark = hvdlite::testing::ranksPerFakeHost() > 0;
  ScopedFakeHosts hosts(2);
  std::string saved_transport = hvdlite::testing::defaultTransport();
  hvdlite::testing::ScopedAllgatherHierarchy hierarchy(Hierarchy::kOn);
  std::vector<size_t> totals = {64, 4 << 10, 32 << 10, 128 << 10, 256 << 10, 1 << 20, 8 << 20, 64 << 20};
  if (!benchmark) totals = {64, 32 << 10, 1 << 20};
  if (const char* sizes = std::getenv("HVDLITE_BENCH_SIZES"); benchmark && sizes) {
    totals.clear();
    std::stringstream list(sizes);
    for (std::string item; std::getline(list, item, ',');) totals.push_back(std::stoull(item));
  }
  for (int size : {4, 6}) {
    for (size_t total : totals) {
      int iterations = !benchmark ? 3 : total < (1 << 20) ? 1000 : total < (16 << 20) ? 50 : 5;
      hvdlite::testing::defaultTransport() = "tcp";  // the fake hosts' flat ring
      double flat = timeAllgather(size, total, iterations) * 1e6;
      hvdlite::testing::defaultTransport() = "shm";
      double two = timeAllgather(size, total, iterations) * 1e6;
      std::printf("  allgather %dx2 %10zu B: flat ring %9.1f us  two levels %9.1f us  (flat/two %.2f)\n",
                  size / 2, total, flat, two, flat / two);
    }
  }
  hvdlite::testing::defaultTransport() = saved_transport;
}

TEST(allreduce_bandwidth_and_latency) {
  if (hvdlite::testing::ranksPerFakeHost() > 0) return;  // allgather_flat_and_in_two_levels
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
  hvdlite::testing::useTransportArgument(argc, argv);
  return RUN_ALL_TESTS();
}
