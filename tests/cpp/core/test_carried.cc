// Tests of small allreduces carried by the negotiation (Note [Tensors
// carried by the negotiation] in core/carried.cc): ranks as threads, each
// with its own Controller, Executor and queue over a real transport, run
// cycles as the runtime does; a carried result must equal, bit for bit, the
// executor's for the same inputs, for every dtype and reduction with
// prescale and postscale; cycles that are not all small cached allreduces
// must go to the executor.
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "common/half.h"
#include "core/carried.h"
#include "core/controller.h"
#include "core/executor.h"
#include "testing.h"
#include "transport/ranks.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

class NoProcessSets : public ProcessSetRegistry {
 public:
  int32_t addProcessSet(const std::vector<int>&) override { throw std::logic_error("not in this test"); }
  void removeProcessSet(int32_t) override { throw std::logic_error("not in this test"); }
};

// Element i of `rank`'s input, exactly representable in every dtype (also
// the 16-bit floats) and nonzero, so that products and divisions show.
double inputValue(int rank, size_t i) { return static_cast<double>((rank + 1) * (static_cast<int>(i) % 3 + 1)); }

std::vector<uint8_t> encode(DataType dtype, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    uint8_t* at = out.data() + i * dtypeSize(dtype);
    auto put = [&](auto x) { std::memcpy(at, &x, sizeof(x)); };
    switch (dtype) {
      case DataType::kUInt8: put(static_cast<uint8_t>(v)); break;
      case DataType::kInt8: put(static_cast<int8_t>(v)); break;
      case DataType::kInt16: put(static_cast<int16_t>(v)); break;
      case DataType::kUInt16: put(static_cast<uint16_t>(v)); break;
      case DataType::kInt32: put(static_cast<int32_t>(v)); break;
      case DataType::kInt64: put(static_cast<int64_t>(v)); break;
      case DataType::kFloat16: put(floatToHalf(static_cast<float>(v))); break;
      case DataType::kBFloat16: put(floatToBFloat16(static_cast<float>(v))); break;
      case DataType::kFloat32: put(static_cast<float>(v)); break;
      case DataType::kFloat64: put(v); break;
      case DataType::kBool: put(static_cast<uint8_t>(v != 0)); break;
    }
  }
  return out;
}

struct Tensor {
  std::string name;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  size_t count = 3;
  double prescale = 1.0, postscale = 1.0;
};

// One rank's runtime in miniature: a controller and an executor of one
// process set, cycles as Runtime::runCycle runs them.
struct MiniRank {
  MiniRank(int rank, transport::Communicator& comm, size_t carry_bytes)
      : comm(comm), timeline(rank), executor(int64_t{64} << 20, timeline, registry) {
    ControllerOptions options;
    options.carry_bytes = carry_bytes;
    options.carry_max_ranks = 3;  // the 3-rank tests: reduction order matters to floats
    controller = std::make_unique<Controller>(0, comm, options, timeline);
  }

  // Submits `tensors` with this rank's inputs; returns their outputs once a
  // cycle completed them, and whether that cycle carried them.
  std::map<std::string, std::vector<uint8_t>> run(const std::vector<Tensor>& tensors, bool* carried) {
    std::map<std::string, std::vector<uint8_t>> buffers;
    std::atomic<int> done{0};
    for (const Tensor& t : tensors) {
      std::vector<double> values;
      for (size_t i = 0; i < t.count; ++i) values.push_back(inputValue(comm.rank(), i));
      buffers[t.name] = encode(t.dtype, values);
      auto entry = std::make_unique<TensorEntry>();
      entry->name = t.name;
      entry->dtype = t.dtype;
      entry->reduce_op = t.op;
      entry->shape = {static_cast<int64_t>(t.count)};
      entry->prescale = t.prescale;
      entry->postscale = t.postscale;
      entry->input = entry->output = buffers[t.name].data();
      entry->callback = [&done](TensorEntry&, const Status& status) {
        CHECK(status.ok());
        done.fetch_add(1);
      };
      queue.add(std::move(entry), comm.rank());
    }
    *carried = false;
    while (done.load() < static_cast<int>(tensors.size())) {
      auto outcome = controller->negotiate(queue, false);
      if (!outcome.carried.empty()) {
        *carried = true;
        completeCarried(outcome.responses, outcome.carried, queue, timeline, comm);
      } else {
        executor.execute(outcome.responses, comm, DeviceComms{}, queue);
      }
    }
    return buffers;
  }

  transport::Communicator& comm;
  Timeline timeline;
  NoProcessSets registry;
  Executor executor;
  std::unique_ptr<Controller> controller;
  TensorQueue queue;
};

// Every rank's outputs for each submission of `steps` in turn (a list of
// tensors each) with `carry_bytes`, over `transport_name`; carried[k]:
// whether submission k was carried on rank 0.
struct Outcome {
  std::vector<std::map<std::string, std::vector<uint8_t>>> outputs;  // [submission], rank 0's
  std::vector<bool> carried;
};

Outcome runSteps(int size, const std::vector<std::vector<Tensor>>& steps, size_t carry_bytes,
                 const std::string& transport_name = "shm") {
  Outcome out;
  out.carried.resize(steps.size());
  std::vector<std::vector<std::map<std::string, std::vector<uint8_t>>>> all(size);
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    auto comm = transport.communicator(ranks);
    MiniRank mini(rank, *comm, carry_bytes);
    for (size_t k = 0; k < steps.size(); ++k) {
      bool carried = false;
      all[rank].push_back(mini.run(steps[k], &carried));
      if (rank == 0) out.carried[k] = carried;
    }
  }, transport_name);
  out.outputs = all[0];
  // Every rank ends with the same bytes.
  for (int r = 1; r < size; ++r) CHECK(all[r] == all[0]);
  return out;
}

// `tensors` submitted twice: negotiated in full, then from the cache.
Outcome runTwice(int size, const std::vector<Tensor>& tensors, size_t carry_bytes,
                 const std::string& transport_name = "shm") {
  return runSteps(size, {tensors, tensors}, carry_bytes, transport_name);
}

}  // namespace

TEST(ACarriedResultEqualsTheExecutorsForEveryDtypeAndReduction) {
  const DataType dtypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt16,   DataType::kUInt16,
                             DataType::kInt32,   DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                             DataType::kFloat32, DataType::kFloat64, DataType::kBool};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  std::vector<Tensor> tensors;
  for (DataType dtype : dtypes) {
    for (ReduceOp op : ops) {
      Tensor t;
      t.name = std::string(dtypeName(dtype)) + "." + reduceOpName(op);
      t.dtype = dtype;
      t.op = op;
      tensors.push_back(t);
    }
  }
  // Prescale and postscale, on a float and an integer type.
  for (DataType dtype : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16}) {
    Tensor t;
    t.name = std::string(dtypeName(dtype)) + ".scaled";
    t.dtype = dtype;
    t.op = ReduceOp::kAverage;
    t.prescale = 0.5;
    t.postscale = 3.0;
    tensors.push_back(t);
  }
  // One tensor at a time, so that each fits the budget; three ranks, so
  // that the order of reduction matters to the floats.
  for (const Tensor& t : tensors) {
    auto executed = runTwice(3, {t}, 0);
    auto carried = runTwice(3, {t}, kCarryBytes);
    CHECK(!executed.carried[0] && !executed.carried[1]);
    CHECK(!carried.carried[0]);  // negotiated in full the first time
    CHECK(carried.carried[1]);
    for (int k = 0; k < 2; ++k) CHECK(carried.outputs[k].at(t.name) == executed.outputs[1].at(t.name));
  }
}

TEST(ACarriedSumIsTheSumOfTheRanksInputs) {
  Tensor t;
  t.name = "sum";
  t.count = 5;
  auto carried = runTwice(2, {t}, kCarryBytes, "tcp");
  CHECK(carried.carried[1]);
  std::vector<double> expected;
  for (size_t i = 0; i < t.count; ++i) expected.push_back(inputValue(0, i) + inputValue(1, i));
  CHECK(carried.outputs[1].at("sum") == encode(DataType::kFloat32, expected));
}

TEST(ManySmallTensorsInOneCycleAreCarriedTogether) {
  std::vector<Tensor> tensors;
  for (int i = 0; i < 8; ++i) tensors.push_back(Tensor{"t" + std::to_string(i)});  // 8 x 12 bytes
  auto carried = runTwice(2, tensors, kCarryBytes);
  auto executed = runTwice(2, tensors, 0);
  CHECK(carried.carried[1]);
  CHECK(carried.outputs[1] == executed.outputs[1]);
}

TEST(ACycleWithATensorTooBigToCarryGoesToTheExecutor) {
  Tensor small{"small"};
  Tensor big{"big"};
  big.count = kCarryBytes;  // 4 x kCarryBytes bytes of float32
  auto carried = runTwice(2, {small, big}, kCarryBytes);
  CHECK(!carried.carried[1]);
  auto executed = runTwice(2, {small, big}, 0);
  CHECK(carried.outputs[1] == executed.outputs[1]);
}

TEST(ACycleOverTheBudgetGoesToTheExecutor) {
  // 30 x 12 bytes of cached tensors: more than one rank carries.
  std::vector<Tensor> tensors;
  for (int i = 0; i < 30; ++i) tensors.push_back(Tensor{"t" + std::to_string(i)});
  auto carried = runTwice(2, tensors, kCarryBytes);
  CHECK(!carried.carried[1]);
  auto executed = runTwice(2, tensors, 0);
  CHECK(carried.outputs[1] == executed.outputs[1]);
}

TEST(ACycleWithACachedAndANewTensorGoesToTheExecutor) {
  Tensor cached{"cached"};
  Tensor fresh{"fresh"};
  auto carried = runSteps(2, {{cached}, {cached, fresh}, {cached, fresh}}, kCarryBytes);
  CHECK(!carried.carried[0]);
  CHECK(!carried.carried[1]);  // 'fresh' goes to the coordinator: the cycle runs in the executor
  CHECK(carried.carried[2]);   // both cached now
  auto executed = runSteps(2, {{cached}, {cached, fresh}, {cached, fresh}}, 0);
  CHECK(carried.outputs == executed.outputs);
}

TEST(ASetLargerThanTheLimitDoesNotCarry) {
  Tensor t{"t"};
  auto four = runTwice(4, {t}, kCarryBytes);  // carry_max_ranks 3
  CHECK(!four.carried[1]);
  auto executed = runTwice(4, {t}, 0);
  CHECK(four.outputs == executed.outputs);
}

TEST(TheLayoutSkipsWhatIsNotCarriable) {
  ResponseCache cache(8);
  auto put = [&](const std::string& name, OpType op, int64_t count, ReduceOp reduce = ReduceOp::kSum) {
    Response r;
    r.name = name;
    r.op = op;
    r.reduce_op = reduce;
    r.shape = {count};
    Request own;
    own.name = name;
    own.op = op;
    own.reduce_op = reduce;
    own.shape = {count};
    cache.put(r, own);
    return *cache.slotOf(name);
  };
  size_t a = put("a", OpType::kAllreduce, 2);                     // 8 bytes
  size_t g = put("g", OpType::kAllgather, 1);                     // not an allreduce
  size_t s = put("s", OpType::kAllreduce, 1, ReduceOp::kAdasum);  // Adasum
  size_t big = put("big", OpType::kAllreduce, 100);               // over the budget
  size_t b = put("b", OpType::kAllreduce, 4);                     // 16 bytes
  auto layout = carriedLayout({a, g, s, big, b}, cache, 32);
  CHECK_EQ(layout.size(), size_t{2});
  CHECK_EQ(layout[0].slot, a);
  CHECK_EQ(layout[0].offset, size_t{0});
  CHECK_EQ(layout[1].slot, b);
  CHECK_EQ(layout[1].offset, size_t{8});
  CHECK_EQ(layout[1].bytes, size_t{16});
}

int main() { return RUN_ALL_TESTS(); }
