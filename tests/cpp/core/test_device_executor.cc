// Tests the device executor's algorithms (csrc/core/device_executor.cc) without
// a GPU: a DeviceCommunicator over host memory and the CPU transport stands in
// for NCCL, and the ranks are threads. Covers what the Python tests over the
// fake NCCL cannot reach: hierarchical allreduce across "hosts" (Note
// [Hierarchical allreduce] in transport/two_level/device_two_level_communicator.cc),
// run by the executor through one communicator like any other, with padding,
// folded and host-side scaling.
#include <cstring>
#include <memory>
#include <vector>

#include "common/errors.h"
#include "common/reduce.h"
#include "core/collective_math.h"
#include "core/device_executor.h"
#include "testing.h"
#include "transport/ranks.h"
#include "transport/two_level/device_two_level_communicator.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

// "Device" memory is host memory; collectives go through a CPU communicator.
class HostDeviceComm final : public transport::DeviceCommunicator {
 public:
  explicit HostDeviceComm(transport::Communicator& cpu) : cpu_(cpu) {}
  int rank() const override { return cpu_.rank(); }
  int size() const override { return cpu_.size(); }
  int globalRank(int r) const override { return cpu_.globalRank(r); }
  std::string describe() const override { return "host device (test)"; }

  void useDevice(int device) override { device_ = device; }
  int device() const override { return device_; }
  transport::ThreadCudaState saveThread() override { return {}; }
  void restoreThread(const transport::ThreadCudaState&) override {}
  void waitFor(void* event, void*) override {
    ++waits;
    waited.push_back(event);
  }
  transport::DeviceEvent recordDone(const std::string&) override {
    ++done_records;
    return std::make_shared<int>(done_records);
  }
  void* reserve(size_t bytes, int slot, std::string& failure) override {
    if (fail_reserve) {
      failure = "no memory (test)";
      return nullptr;
    }
    if (buffers_[slot].size() < bytes) buffers_[slot].resize(bytes);
    return buffers_[slot].data();
  }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void copyMany(const std::vector<transport::DeviceCopy>& copies) override {
    ++copy_batches;
    DeviceCommunicator::copyMany(copies);
  }
  void* stageToHost(const void* device, size_t bytes) override {
    staging_.assign(static_cast<const uint8_t*>(device), static_cast<const uint8_t*>(device) + bytes);
    return staging_.data();
  }
  void copyFromHost(void* device, const void* host, size_t bytes) override { std::memmove(device, host, bytes); }
  int firstFailedRank(bool ok) override {
    int32_t first = ok ? size() : rank();
    cpu_.allreduce(&first, 1, DataType::kInt32, ReduceOp::kMin);
    return first;
  }

  int waits = 0, done_records = 0, copy_batches = 0, reducescatters = 0;
  std::vector<void*> waited;
  bool fail_reserve = false;  // as if the GPU were out of memory

 private:
  void doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) override {
    cpu_.allreduce(data, count, dtype, op);
  }
  void doAllgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    cpu_.allgatherv(in, out, bytes);
  }
  void doBroadcast(void* data, size_t bytes, int root) override { cpu_.broadcast(data, bytes, root); }
  void doAlltoallv(const void* in, const std::vector<size_t>& send, void* out,
                   const std::vector<size_t>& recv) override {
    cpu_.alltoallv(in, send, out, recv);
  }
  void doReducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    // NCCL allows out inside in (in place); the CPU contract does not: copy.
    ++reducescatters;
    std::vector<uint8_t> copy = inputOf(in, counts, dtype);
    cpu_.reducescatter(copy.data(), out, counts, dtype, op);
  }
  void doBarrier() override { cpu_.barrier(); }
  std::vector<std::string> doGather(const std::string& mine, int root) override { return cpu_.gather(mine, root); }
  void doBroadcastMessage(std::string& message, int root) override { cpu_.broadcastMessage(message, root); }
  void doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) override {
    scaleInPlace(data, count, dtype, factor);
    cpu_.allreduce(data, count, dtype, ReduceOp::kSum);
  }
  void doReducescatterScaled(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                             double factor) override {
    ++reducescatters;
    std::vector<uint8_t> copy = inputOf(in, counts, dtype);
    scaleInPlace(copy.data(), copy.size() / dtypeSize(dtype), dtype, factor);
    cpu_.reducescatter(copy.data(), out, counts, dtype, ReduceOp::kSum);
  }
  static std::vector<uint8_t> inputOf(const void* in, const std::vector<size_t>& counts, DataType dtype) {
    size_t total = 0;
    for (auto c : counts) total += c;
    auto* bytes = static_cast<const uint8_t*>(in);
    return std::vector<uint8_t>(bytes, bytes + total * dtypeSize(dtype));
  }

  transport::Communicator& cpu_;
  int device_ = -1;
  std::vector<uint8_t> buffers_[2];
  std::vector<uint8_t> staging_;
};

Response allreduceResponse(const std::string& name, DataType dtype, ReduceOp op, int64_t count, double prescale,
                           double postscale, int ranks) {
  Response r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.dtype = dtype;
  r.reduce_op = op;
  r.shape = {count};
  r.prescale = prescale;
  r.postscale = postscale;
  r.device = 0;
  r.average_ranks = ranks;
  return r;
}

template <typename T>
TensorEntryPtr entryOver(std::vector<T>& data, const Response& r) {
  auto e = std::make_unique<TensorEntry>();
  e->name = r.name;
  e->dtype = r.dtype;
  e->shape = r.shape;
  e->input = e->output = data.data();
  e->device = 0;
  return e;
}

// 4 ranks on 2 "hosts" of 2: local {0,1} {2,3}, cross {0,2} {1,3}, in one
// two-level communicator over host-memory "devices".
struct TwoHosts {
  TwoHosts(int rank, transport::Transport& transport) : everyone(transport.communicator({0, 1, 2, 3})) {
    auto local_cpu = transport.communicator(rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
    auto cross = transport.communicator(rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
    auto flat_owned = std::make_unique<HostDeviceComm>(*everyone);
    auto local_owned = std::make_unique<HostDeviceComm>(*local_cpu);
    flat = flat_owned.get();
    local = local_owned.get();
    comm = std::make_unique<transport::two_level::DeviceTwoLevelCommunicator>(
        std::move(flat_owned), std::move(local_cpu), std::move(local_owned), std::move(cross));
  }
  std::unique_ptr<transport::Communicator> everyone;  // the flat one's CPU communicator
  HostDeviceComm* flat = nullptr;
  HostDeviceComm* local = nullptr;
  std::unique_ptr<transport::two_level::DeviceTwoLevelCommunicator> comm;
};

// Two tensors of 5 and 2 elements fuse into 7, padded to 8 for 2 local parts.
template <typename T>
void hierarchical(DataType dtype, ReduceOp op, double prescale, double postscale,
                  const std::function<T(int rank, int i)>& value, const std::function<T(int i)>& expected) {
  testing::runRanks(4, [&](int rank, transport::Transport& transport) {
    TwoHosts hosts(rank, transport);
    HostDeviceComm& set = *hosts.flat;
    HostDeviceComm& local_dev = *hosts.local;
    auto& two_levels = *hosts.comm;
    std::vector<T> a(5), b(2);
    for (int i = 0; i < 5; ++i) a[i] = value(rank, i);
    for (int i = 0; i < 2; ++i) b[i] = value(rank, 5 + i);
    Response ra = allreduceResponse("a", dtype, op, 5, prescale, postscale, 4);
    Response rb = allreduceResponse("b", dtype, op, 2, prescale, postscale, 4);
    Batch batch{{&ra, &rb}, static_cast<int64_t>(7 * sizeof(T))};
    std::vector<TensorEntryPtr> entries;
    entries.push_back(entryOver(a, ra));
    entries.push_back(entryOver(b, rb));
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    executor.run(batch, entries, DeviceComms{&two_levels});
    for (int i = 0; i < 5; ++i) CHECK_EQ(a[i], expected(i));
    for (int i = 0; i < 2; ++i) CHECK_EQ(b[i], expected(5 + i));
    CHECK_EQ(local_dev.waits, 1);  // both from one stream (Note [One wait per stream])
    CHECK_EQ(local_dev.done_records, 1);
    CHECK(entries[0]->done_event && entries[0]->done_event == entries[1]->done_event);
    CHECK_EQ(set.waits, 0);  // the two-level allreduce runs on the local communicator only
    CHECK_EQ(set.device(), -1);  // and binds no flat one
  });
}

}  // namespace

TEST(hierarchical_average_folds_the_scale_into_the_sum) {
  // mean over ranks of 2 * (rank + i) = 2 * (1.5 + i)
  hierarchical<float>(DataType::kFloat32, ReduceOp::kAverage, 2.0, 1.0,
                      [](int rank, int i) { return static_cast<float>(rank + i); },
                      [](int i) { return 2.0f * (1.5f + i); });
}

TEST(hierarchical_integer_sum_with_postscale_finishes_on_the_host) {
  hierarchical<int32_t>(DataType::kInt32, ReduceOp::kSum, 1.0, 3.0,
                        [](int rank, int i) { return (rank + 1) * (i + 1); },
                        [](int i) { return 3 * 10 * (i + 1); });
}

TEST(hierarchical_max_with_prescale_scales_on_the_host_first) {
  hierarchical<double>(DataType::kFloat64, ReduceOp::kMax, -1.0, 1.0,
                       [](int rank, int i) { return static_cast<double>(rank * 10 + i); },
                       [](int i) { return static_cast<double>(-i); });
}

// The two-level communicator to the executor is one communicator like any
// other: a tensor that splits evenly among the local ranks is reduced in its
// output (no fusion buffer), a broadcast runs on the flat communicator, which
// is bound only then; ready waits go through the local one, and each batch's
// done event is recorded by the communicator that ran it, so that the flat
// one's close() and health() see its broadcast (Note [Whose done event]).
TEST(two_levels_reduce_an_even_tensor_in_place_and_broadcast_flat) {
  testing::runRanks(4, [&](int rank, transport::Transport& transport) {
    TwoHosts hosts(rank, transport);
    HostDeviceComm& set = *hosts.flat;
    HostDeviceComm& local_dev = *hosts.local;
    auto& two_levels = *hosts.comm;
    CHECK_EQ(two_levels.allreduceRoom(7), size_t{8});
    CHECK_EQ(two_levels.allreduceRoom(8), size_t{8});
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    Response r = allreduceResponse("even", DataType::kInt64, ReduceOp::kSum, 4, 1.0, 1.0, 4);
    std::vector<int64_t> x = {rank, 10 * rank, 1, -rank};
    std::vector<TensorEntryPtr> entries;
    entries.push_back(entryOver(x, r));
    executor.run(Batch{{&r}, 4 * sizeof(int64_t)}, entries, DeviceComms{&two_levels});
    CHECK(x == (std::vector<int64_t>{6, 60, 4, -6}));
    CHECK_EQ(local_dev.copy_batches, 1);  // the copy into its own output only: no fusion, no unpack
    CHECK_EQ(set.device(), -1);

    Response b = r;
    b.op = OpType::kBroadcast;
    b.name = "bcast";
    b.root_rank = 3;
    std::vector<int64_t> y = {rank, rank, rank, rank};
    entries.clear();
    entries.push_back(entryOver(y, b));
    executor.run(Batch{{&b}, 4 * sizeof(int64_t)}, entries, DeviceComms{&two_levels});
    CHECK(y == (std::vector<int64_t>{3, 3, 3, 3}));
    CHECK_EQ(set.device(), 0);  // bound to the local one's GPU at its first collective
    CHECK_EQ(set.waits, 0);
    CHECK_EQ(set.done_records, 1);
    CHECK_EQ(local_dev.done_records, 1);
    CHECK(two_levels.describe().rfind("two levels: allreduce by host device (test) inside each of 2 hosts", 0) == 0);
  });
}

TEST(flat_allreduce_of_a_joined_rank_gets_neutral_values) {
  testing::runRanks(3, [&](int rank, transport::Transport& transport) {
    auto everyone = transport.communicator({0, 1, 2});
    HostDeviceComm set(*everyone);
    Response r = allreduceResponse("x", DataType::kFloat32, ReduceOp::kMin, 3, 1.0, 1.0, 2);
    std::vector<float> x = {1.0f + rank, 5.0f - rank, 2.0f};
    std::vector<TensorEntryPtr> entries;
    entries.push_back(rank == 2 ? nullptr : entryOver(x, r));  // rank 2 has joined
    Batch batch{{&r}, static_cast<int64_t>(3 * sizeof(float))};
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    // Each rank's own GPU is its rank here: the joined rank binds to its
    // own, never to the response's (Note [A rank's own GPU]).
    executor.run(batch, entries, DeviceComms{&set, /*own_device=*/rank});
    if (rank != 2) CHECK(x == (std::vector<float>{1.0f, 4.0f, 2.0f}));
    CHECK_EQ(set.device(), rank == 2 ? 2 : 0);
  });
}

TEST(a_fused_batch_waits_once_per_producer_stream_for_its_latest_event) {
  testing::runRanks(2, [&](int rank, transport::Transport& transport) {
    auto everyone = transport.communicator({0, 1});
    HostDeviceComm set(*everyone);
    std::vector<Response> responses;
    std::vector<std::vector<float>> data(4, std::vector<float>(3, 1.0f + rank));
    for (int k = 0; k < 4; ++k) {
      responses.push_back(allreduceResponse("t" + std::to_string(k), DataType::kFloat32, ReduceOp::kSum, 3, 1.0,
                                            1.0, 2));
    }
    Batch batch{{&responses[0], &responses[1], &responses[2], &responses[3]}, 4 * 3 * sizeof(float)};
    std::vector<TensorEntryPtr> entries;
    int events[4], streams[2];
    const uint64_t sequence[4] = {7, 3, 9, 5};  // enqueue order differs from batch order
    for (int k = 0; k < 4; ++k) {
      entries.push_back(entryOver(data[k], responses[k]));
      entries.back()->stream = &streams[k % 2];
      entries.back()->ready_event = &events[k];
      entries.back()->sequence = sequence[k];
    }
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    executor.run(batch, entries, DeviceComms{&set});
    for (const auto& d : data) CHECK(d == (std::vector<float>{3.0f, 3.0f, 3.0f}));
    CHECK_EQ(set.waits, 2);
    CHECK(set.waited == (std::vector<void*>{&events[2], &events[3]}));  // the latest of each stream
    // One done event for the batch, held by every entry, and nothing queued
    // into the producers' streams (Note [Completion on the consumer's stream]).
    CHECK_EQ(set.done_records, 1);
    for (const auto& e : entries) CHECK(e->done_event == entries[0]->done_event);
    CHECK_EQ(set.copy_batches, 2);  // packed and unpacked in one call each
  });
}

// Note [Fused reducescatter] in fusion.cc: uneven members (fewer rows than
// ranks, rows not divisible by 3, 2-D) in one reducescatter each batch, the
// float scales folded into the sum, the integer ones on the host; each rank
// gets its rows of every member in the output allocated at enqueue.
template <typename T>
void fusedReducescatter(DataType dtype, ReduceOp op, double prescale, double postscale) {
  testing::runRanks(3, [&](int rank, transport::Transport& transport) {
    auto everyone = transport.communicator({0, 1, 2});
    HostDeviceComm set(*everyone);
    const std::vector<std::vector<int64_t>> shapes{{1}, {2, 3}, {7}, {5, 2}};
    std::vector<Response> responses;
    std::vector<std::vector<T>> inputs, outputs;
    Batch batch;
    for (size_t m = 0; m < shapes.size(); ++m) {
      Response r = allreduceResponse("rs" + std::to_string(m), dtype, op, 0, prescale, postscale, 3);
      r.op = OpType::kReducescatter;
      r.shape = shapes[m];
      responses.push_back(r);
      inputs.emplace_back(static_cast<size_t>(r.elementCount()));
      for (size_t k = 0; k < inputs.back().size(); ++k) inputs.back()[k] = static_cast<T>((rank + 1) * (k + 1) + m);
      outputs.emplace_back(reducescatterLayout(r, 3, rank).counts[rank] + 1, T(-7));  // one past: untouched
    }
    for (const auto& r : responses) {
      batch.members.push_back(&r);
      batch.bytes += r.elementCount() * static_cast<int64_t>(sizeof(T));
    }
    std::vector<TensorEntryPtr> entries;
    for (size_t m = 0; m < shapes.size(); ++m) {
      entries.push_back(entryOver(inputs[m], responses[m]));
      entries.back()->output = outputs[m].data();
    }
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    executor.run(batch, entries, DeviceComms{&set});
    CHECK_EQ(set.reducescatters, 1);
    CHECK_EQ(set.done_records, 1);
    for (size_t m = 0; m < shapes.size(); ++m) {
      auto alone = reducescatterLayout(responses[m], 3, rank);
      CHECK(entries[m]->output_shape == alone.out_shape);
      size_t first = 0;
      for (int r = 0; r < rank; ++r) first += alone.counts[r];
      for (size_t k = 0; k < alone.counts[rank]; ++k) {
        double sum = 0;
        for (int peer = 0; peer < 3; ++peer) sum += ((peer + 1) * (first + k + 1) + m) * prescale;
        if (op == ReduceOp::kAverage) sum /= 3;
        CHECK_EQ(outputs[m][k], static_cast<T>(sum * postscale));
      }
      CHECK_EQ(outputs[m].back(), T(-7));
    }
  });
}

TEST(a_fused_reducescatter_folds_float_scales_into_one_call) {
  fusedReducescatter<double>(DataType::kFloat64, ReduceOp::kAverage, 3.0, 0.5);
}

TEST(a_fused_integer_reducescatter_scales_and_finishes_on_the_host) {
  fusedReducescatter<int32_t>(DataType::kInt32, ReduceOp::kSum, 2.0, 3.0);
}

// Note [Allocation failures]: one rank out of memory fails the batch on every
// rank, naming it, and the next batch runs.
TEST(an_allocation_failure_on_one_rank_fails_that_batch_everywhere_and_the_job_goes_on) {
  testing::runRanks(3, [&](int rank, transport::Transport& transport) {
    auto everyone = transport.communicator({0, 1, 2});
    HostDeviceComm set(*everyone);
    Response ra = allreduceResponse("a", DataType::kFloat32, ReduceOp::kSum, 2, 1.0, 1.0, 3);
    Response rb = allreduceResponse("b", DataType::kFloat32, ReduceOp::kSum, 2, 1.0, 1.0, 3);
    Batch batch{{&ra, &rb}, 4 * sizeof(float)};
    std::vector<float> a(2, 1.0f), b(2, 2.0f);
    auto entries = [&] {
      std::vector<TensorEntryPtr> e;
      e.push_back(entryOver(a, ra));
      e.push_back(entryOver(b, rb));
      return e;
    };
    Timeline timeline(rank);
    DeviceExecutor executor(timeline);
    set.fail_reserve = rank == 1;
    auto first = entries();
    CHECK_THROWS(executor.run(batch, first, DeviceComms{&set}), DeviceAllocationError,
                 "out of GPU memory on rank 1");
    CHECK(a == (std::vector<float>{1.0f, 1.0f}));  // nothing ran
    set.fail_reserve = false;
    auto second = entries();
    executor.run(batch, second, DeviceComms{&set});
    CHECK(a == (std::vector<float>{3.0f, 3.0f}));
    CHECK(b == (std::vector<float>{6.0f, 6.0f}));
  });
}

// Device communicators get the checked entry points too (Note [Checked
// entry points]), the scaled sums included: one bad call per member, then a
// good one that pairs up only if nothing of the bad ones was sent.
TEST(device_calls_are_checked_before_reaching_the_device) {
  testing::runRanks(2, [](int rank, transport::Transport& transport) {
    auto cpu = transport.communicator({0, 1});
    HostDeviceComm dev(*cpu);
    std::vector<float> data(4, static_cast<float>(rank + 1));
    std::vector<int32_t> ints(4);
    const std::string me = " on rank " + std::to_string(rank) + " (global rank " + std::to_string(rank) + ")";
    CHECK_THROWS(dev.reducescatterScaled(ints.data(), ints.data(), {2, 2}, DataType::kInt32, 0.5), InvalidArgument,
                 "reducescatter (scaled sum)" + me + " of a process set of 2: a scaled sum needs a floating-point "
                 "dtype, not int32");
    CHECK_THROWS(dev.reducescatterScaled(data.data(), data.data(), {4}, DataType::kFloat32, 0.5), InvalidArgument,
                 "counts has 1 entries");
    CHECK_THROWS(dev.allreduceScaled(nullptr, 4, DataType::kFloat32, 0.5), InvalidArgument,
                 "allreduce (scaled sum)" + me);
    CHECK_THROWS(dev.allgatherv(data.data(), data.data(), {4, 4, 4}), InvalidArgument, "bytes_per_rank has 3");
    CHECK_THROWS(dev.broadcast(data.data(), 16, 2), InvalidArgument, "broadcast" + me);
    CHECK_THROWS(dev.allreduce(data.data(), 4, DataType::kFloat32, ReduceOp::kAverage), InvalidArgument,
                 "reduce op average");
    dev.allreduceScaled(data.data(), data.size(), DataType::kFloat32, 0.5);
    CHECK_EQ(data[3], 1.5f);
  });
}

int main() { return RUN_ALL_TESTS(); }
