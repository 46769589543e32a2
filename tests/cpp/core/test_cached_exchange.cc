// Note [One exchange for a cached small allreduce] (core/cached_exchange.cc):
// a lone cached allreduce of a few bytes is reduced by the cache bits'
// exchange, with the same result as the executor's allreduce, and every
// other case falls back to it. Ranks are threads over shm and TCP, each
// running the runtime's cycle (negotiate, then execute) by hand, all of them
// the same number of cycles, as the runtime's lockstep requires.
#include <cmath>
#include <cstring>
#include <memory>

#include "common/half.h"
#include "core/cached_exchange.h"
#include "core/controller.h"
#include "core/executor.h"
#include "testing.h"
#include "transport/ranks.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

class NoProcessSets final : public ProcessSetRegistry {
 public:
  int32_t addProcessSet(const std::vector<int>&) override { return -1; }
  void removeProcessSet(int32_t) override {}
};

// What one call of an allreduce looks like: the same on every rank.
struct Spec {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int64_t count = 1;
};

// Rank r's element i: small integers, exact in every dtype.
double inputValue(int rank, int64_t i) { return static_cast<double>((rank + 1) * (i + 2)); }

void writeValue(DataType dtype, double v, uint8_t* at) {
  switch (dtype) {
    case DataType::kUInt8: { uint8_t x = static_cast<uint8_t>(v); std::memcpy(at, &x, 1); break; }
    case DataType::kInt8: { int8_t x = static_cast<int8_t>(v); std::memcpy(at, &x, 1); break; }
    case DataType::kInt16: { int16_t x = static_cast<int16_t>(v); std::memcpy(at, &x, 2); break; }
    case DataType::kUInt16: { uint16_t x = static_cast<uint16_t>(v); std::memcpy(at, &x, 2); break; }
    case DataType::kInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(at, &x, 4); break; }
    case DataType::kInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(at, &x, 8); break; }
    case DataType::kFloat16: { uint16_t x = floatToHalf(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kBFloat16: { uint16_t x = floatToBFloat16(static_cast<float>(v)); std::memcpy(at, &x, 2); break; }
    case DataType::kFloat32: { float x = static_cast<float>(v); std::memcpy(at, &x, 4); break; }
    case DataType::kFloat64: std::memcpy(at, &v, 8); break;
    default: throw testing::Failure("no test values for this dtype");
  }
}

double readValue(DataType dtype, const uint8_t* at) {
  switch (dtype) {
    case DataType::kFloat32: { float x; std::memcpy(&x, at, 4); return x; }
    case DataType::kFloat64: { double x; std::memcpy(&x, at, 8); return x; }
    case DataType::kFloat16: { uint16_t x; std::memcpy(&x, at, 2); return halfToFloat(x); }
    case DataType::kBFloat16: { uint16_t x; std::memcpy(&x, at, 2); return bfloat16ToFloat(x); }
    default: throw testing::Failure("readValue reads floating-point dtypes only");
  }
}

// One submitted call: its buffers and what its callback said.
struct Call {
  std::vector<uint8_t> input, output;
  bool done = false;
  Status status;
};

// One rank: the runtime's pieces for one process set, driven by hand.
class Rank {
 public:
  Rank(int rank, int size, transport::Transport& transport, size_t cache_capacity = 1024)
      : rank_(rank), size_(size), comm_(transport.communicator(allRanks(size))), timeline_(rank),
        controller_(0, *comm_, optionsWith(cache_capacity), timeline_), executor_(1 << 20, timeline_, registry_) {}

  // Submits an allreduce of `spec` under `name` with this rank's values.
  std::shared_ptr<Call> submit(const std::string& name, const Spec& spec) {
    auto call = std::make_shared<Call>();
    const size_t element = dtypeSize(spec.dtype);
    call->input.resize(static_cast<size_t>(spec.count) * element);
    call->output.assign(call->input.size(), 0xEE);
    for (int64_t i = 0; i < spec.count; ++i) writeValue(spec.dtype, inputValue(rank_, i), &call->input[i * element]);
    auto e = std::make_unique<TensorEntry>();
    e->name = name;
    e->op = OpType::kAllreduce;
    e->reduce_op = spec.op;
    e->dtype = spec.dtype;
    e->shape = {spec.count};
    e->prescale = spec.prescale;
    e->postscale = spec.postscale;
    e->input = call->input.data();
    e->output = call->output.data();
    e->callback = [call](TensorEntry&, const Status& status) {
      call->done = true;
      call->status = status;
    };
    CHECK(queue_.add(std::move(e), rank_, false));
    return call;
  }

  void join() {
    auto e = std::make_unique<TensorEntry>();
    e->name = kJoinName;
    e->op = OpType::kJoin;
    e->shape = {};
    CHECK(queue_.add(std::move(e), rank_, false));
  }

  // One cycle; returns its responses' names, each with "*" when its data
  // was reduced in the negotiation.
  std::vector<std::string> cycle() {
    auto& outcome = controller_.negotiate(queue_, false);
    std::vector<std::string> names;
    for (const auto& r : outcome.responses) names.push_back(r.name + (r.reduced_in_negotiation.empty() ? "" : "*"));
    executor_.execute(outcome.responses, *comm_, DeviceComms{}, queue_);
    return names;
  }

  std::string transport() const { return comm_->describe(); }

 private:
  static std::vector<int> allRanks(int size) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    return ranks;
  }
  static ControllerOptions optionsWith(size_t cache_capacity) {
    ControllerOptions options;
    options.cache_capacity = cache_capacity;
    return options;
  }

  int rank_, size_;
  std::unique_ptr<transport::Communicator> comm_;
  Timeline timeline_;
  Controller controller_;
  NoProcessSets registry_;
  Executor executor_;
  TensorQueue queue_;
};

using Names = std::vector<std::string>;

// Names as a readable list, for failures.
std::string show(const Names& names) {
  std::string text = "[";
  for (const auto& n : names) text += (text.size() > 1 ? ", " : "") + n;
  return text + "]";
}

void expectNames(const Names& got, const Names& wanted, const std::string& where) {
  if (got != wanted) throw testing::Failure(where + ": responses " + show(got) + ", wanted " + show(wanted));
}

void expectDone(const Call& call, const std::string& where) {
  if (!call.done || !call.status.ok()) {
    throw testing::Failure(where + ": not completed well: " + (call.done ? call.status.message : "not done"));
  }
}

// The floating-point result every rank should get (exact for these values
// in float32 and float64; halves are compared within their precision).
double expectedValue(const Spec& spec, int size, int64_t i) {
  double result = spec.op == ReduceOp::kProduct ? 1.0 : 0.0;
  for (int r = 0; r < size; ++r) {
    double v = inputValue(r, i) * spec.prescale;
    if (spec.op == ReduceOp::kSum || spec.op == ReduceOp::kAverage) result += v;
    else if (spec.op == ReduceOp::kProduct) result *= v;
    else if (spec.op == ReduceOp::kMin) result = r == 0 ? v : std::min(result, v);
    else result = r == 0 ? v : std::max(result, v);
  }
  if (spec.op == ReduceOp::kAverage) result /= size;
  return result * spec.postscale;
}

bool reducibleInNegotiation(const Spec& spec, int size) {
  return size <= ExchangeLanes::kMaxRanks &&
         static_cast<size_t>(spec.count) * dtypeSize(spec.dtype) <= CarriedData::kMaxBytes;
}

const std::vector<Spec>& everySpec() {
  static const std::vector<Spec> specs = {
      {DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, 1},  // the 4-byte call of the benchmarks
      {DataType::kFloat32, ReduceOp::kAverage, 0.5, 3.0, 4},
      {DataType::kFloat64, ReduceOp::kSum, 2.0, 0.25, 2},
      {DataType::kFloat16, ReduceOp::kAverage, 1.0, 1.0, 8},
      {DataType::kBFloat16, ReduceOp::kSum, 0.5, 2.0, 3},
      {DataType::kInt32, ReduceOp::kAverage, 1.0, 1.0, 3},
      {DataType::kInt64, ReduceOp::kMax, 1.0, 1.0, 2},
      {DataType::kUInt8, ReduceOp::kProduct, 1.0, 1.0, 5},
      {DataType::kInt16, ReduceOp::kMin, 1.0, 1.0, 1},
      {DataType::kInt8, ReduceOp::kSum, 1.0, 1.0, 16},
      {DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, 5},  // 20 bytes: beyond the bound
  };
  return specs;
}

// Each spec twice on every rank: the first call is negotiated in full and
// reduced by the executor, the second hits the cache and (within the
// bound) is reduced in the negotiation; both must give the same bytes.
void everySpecTwice(int size, const std::string& transport_name) {
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    if (testing::ranksPerFakeHost() > 0) CHECK(me.transport().find("two levels") != std::string::npos);
    for (size_t k = 0; k < everySpec().size(); ++k) {
      const Spec& spec = everySpec()[k];
      const std::string name = "spec." + std::to_string(k);
      const std::string where = transport_name + " " + std::to_string(size) + " ranks, " + name;
      auto first = me.submit(name, spec);
      expectNames(me.cycle(), {name}, where + " first call");
      expectDone(*first, where + " first call");
      auto second = me.submit(name, spec);
      expectNames(me.cycle(), {name + (reducibleInNegotiation(spec, size) ? "*" : "")}, where + " cached call");
      expectDone(*second, where + " cached call");
      if (second->output != first->output) throw testing::Failure(where + ": the cached call's bytes differ");
      const bool floating = spec.dtype == DataType::kFloat32 || spec.dtype == DataType::kFloat64 ||
                            spec.dtype == DataType::kFloat16 || spec.dtype == DataType::kBFloat16;
      if (!floating) continue;
      const double tolerance = dtypeSize(spec.dtype) == 2 ? 1e-2 : 1e-12;
      for (int64_t i = 0; i < spec.count; ++i) {
        double got = readValue(spec.dtype, &second->output[i * dtypeSize(spec.dtype)]);
        double wanted = expectedValue(spec, size, i);
        if (std::abs(got - wanted) > tolerance * std::abs(wanted)) {
          throw testing::Failure(where + ": element " + std::to_string(i) + " is " + std::to_string(got) +
                                 ", wanted " + std::to_string(wanted));
        }
      }
    }
  }, transport_name);
}

// The last rank submits one cycle late: the first cycle's lanes are
// ignored (nothing is ready everywhere), the next one's are used: the early
// ranks carry data they copied when their request was admitted.
void oneRankLate(int size, const std::string& transport_name) {
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    const Spec spec;
    const bool late = rank == size - 1;
    me.submit("x", spec);
    expectNames(me.cycle(), {"x"}, "first call");
    std::shared_ptr<Call> call;
    if (!late) call = me.submit("x", spec);
    expectNames(me.cycle(), {}, "a rank not ready");
    if (late) call = me.submit("x", spec);
    expectNames(me.cycle(), {"x*"}, "every rank ready");
    expectDone(*call, "late call");
    CHECK_EQ(readValue(DataType::kFloat32, call->output.data()), expectedValue(spec, size, 0));
  }, transport_name);
}

// A rank with two cached tensors ready carries nothing: the one ready
// everywhere runs through the executor; the other, alone later, rides again.
void twoReadyOnOneRank(int size, const std::string& transport_name) {
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    const Spec spec;
    me.submit("a", spec);
    me.submit("b", spec);
    me.cycle();  // both negotiated in full, fused
    auto a = me.submit("a", spec);
    std::shared_ptr<Call> b;
    if (rank == 0) b = me.submit("b", spec);
    expectNames(me.cycle(), {"a"}, "two ready on rank 0");
    expectDone(*a, "a");
    CHECK_EQ(readValue(DataType::kFloat32, a->output.data()), expectedValue(spec, size, 0));
    if (rank != 0) b = me.submit("b", spec);
    expectNames(me.cycle(), {"b*"}, "b alone everywhere");
    expectDone(*b, "b");
    CHECK_EQ(readValue(DataType::kFloat32, b->output.data()), expectedValue(spec, size, 0));
  }, transport_name);
}

// Every rank changes the shape: the slot is stale, every rank drops it and
// the new shape is negotiated in full; then its next call rides again.
// Then one rank alone changes it while the others carry the cached shape:
// the slot is invalidated, the lanes ignored, and the mismatch fails on every rank.
void staleSlots(int size, const std::string& transport_name) {
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    Spec one, two;
    two.count = 2;
    me.submit("s", one);
    expectNames(me.cycle(), {"s"}, "first call");
    auto changed = me.submit("s", two);
    expectNames(me.cycle(), {"s"}, "every rank changed the shape");
    expectDone(*changed, "changed shape");
    auto again = me.submit("s", two);
    expectNames(me.cycle(), {"s*"}, "the new shape, cached");
    expectDone(*again, "new shape cached");
    CHECK_EQ(readValue(DataType::kFloat32, again->output.data() + 4), expectedValue(two, size, 1));

    auto mismatched = me.submit("s", rank == 0 ? one : two);
    expectNames(me.cycle(), {}, "rank 0 alone changed the shape");
    expectNames(me.cycle(), {"s"}, "the mismatch");
    CHECK(mismatched->done && !mismatched->status.ok());
    CHECK(mismatched->status.message.find("shape") != std::string::npos);
  }, transport_name);
}

// While a rank has joined, no cached response is used and nothing is
// carried: the others' allreduce runs through the executor with the joined
// rank's zeros, Average still dividing by the set's size.
void joinedRank(int size, const std::string& transport_name) {
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    Spec spec;
    spec.op = ReduceOp::kAverage;
    me.submit("j", spec);
    expectNames(me.cycle(), {"j"}, "first call");
    const bool joins = rank == size - 1;
    std::shared_ptr<Call> call;
    if (joins) me.join();
    else call = me.submit("j", spec);
    Names seen;
    for (int c = 0; c < 3; ++c) {
      for (const auto& n : me.cycle()) seen.push_back(n);
    }
    expectNames(seen, {"j"}, "while a rank has joined");
    if (!joins) {
      expectDone(*call, "beside a joined rank");
      double sum = 0;
      for (int r = 0; r < size - 1; ++r) sum += inputValue(r, 0);
      CHECK_EQ(readValue(DataType::kFloat32, call->output.data()), static_cast<float>(sum / size));
      me.join();
    }
    seen.clear();
    for (int c = 0; c < 2; ++c) {
      for (const auto& n : me.cycle()) seen.push_back(n);
    }
    expectNames(seen, {kJoinName}, "every rank joined");
    auto after = me.submit("j", spec);
    Names last;
    for (int c = 0; c < 2; ++c) {
      for (const auto& n : me.cycle()) last.push_back(n);
    }
    if (last.size() != 1 || last[0].rfind("j", 0) != 0) throw testing::Failure("after the join: " + show(last));
    expectDone(*after, "after the join");
    CHECK_EQ(readValue(DataType::kFloat32, after->output.data()), static_cast<float>(expectedValue(spec, size, 0)));
  }, transport_name);
}

// Note [Cached responses copied once] (controller.cc): the outcome keeps a
// cached response's copy while its slot holds the same put, and copies again
// when another slot's response comes in its place, when its slot was refilled
// (an eviction from a cache of one slot), or after a fresh response: each
// cycle's response is the tensor submitted, with its own shape and sum.
void alternatingSlots(int size, const std::string& transport_name) {
  Spec one, two;
  two.count = 2;
  auto check = [&](const Call& call, const Spec& spec, const std::string& where) {
    expectDone(call, where);
    for (int64_t i = 0; i < spec.count; ++i) {
      CHECK_EQ(readValue(DataType::kFloat32, call.output.data() + 4 * i), expectedValue(spec, size, i));
    }
  };
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank me(rank, size, transport);
    me.submit("a", one);
    me.cycle();
    me.submit("b", two);
    me.cycle();
    for (int k = 0; k < 3; ++k) {  // the same copy kept, then the other slot's in its place
      auto a = me.submit("a", one);
      expectNames(me.cycle(), {"a*"}, "a cached");
      check(*a, one, "a cached");
      auto again = me.submit("a", one);
      expectNames(me.cycle(), {"a*"}, "a cached again");
      check(*again, one, "a cached again");
      auto b = me.submit("b", two);
      expectNames(me.cycle(), {"b*"}, "b cached");
      check(*b, two, "b cached");
    }
  }, transport_name);
  testing::runRanks(size, [&](int rank, transport::Transport& transport) {
    Rank small(rank, size, transport, 1);  // one slot: each new name evicts the other
    for (int k = 0; k < 2; ++k) {
      for (const auto& [name, spec] : {std::pair<std::string, Spec>{"a", one}, {"b", two}}) {
        auto fresh = small.submit(name, spec);
        expectNames(small.cycle(), {name}, name + " negotiated into the one slot");
        check(*fresh, spec, name + " negotiated");
        auto cached = small.submit(name, spec);
        expectNames(small.cycle(), {name + "*"}, name + " cached in the one slot");
        check(*cached, spec, name + " cached");
      }
    }
  }, transport_name);
}

// Without a cache nothing is carried, and sets beyond kMaxRanks carry no lanes.
void noCache(const std::string& transport_name) {
  testing::runRanks(2, [&](int rank, transport::Transport& transport) {
    Rank me(rank, 2, transport, 0);
    for (int k = 0; k < 2; ++k) {
      auto call = me.submit("n", Spec());
      expectNames(me.cycle(), {"n"}, "no cache");
      expectDone(*call, "no cache");
    }
  }, transport_name);
}

}  // namespace

TEST(LanesGatherEveryRanksDataThroughTheAnd) {
  const int size = 3;
  const size_t words = ExchangeLanes::wordsFor(size);
  CHECK_EQ(words, size * ExchangeLanes::kLaneWords);
  CHECK_EQ(ExchangeLanes::wordsFor(1), size_t{0});
  CHECK_EQ(ExchangeLanes::wordsFor(ExchangeLanes::kMaxRanks + 1), size_t{0});
  std::vector<uint64_t> anded(words, ~uint64_t{0});
  for (int r = 0; r < size; ++r) {
    std::vector<uint64_t> mine(words, ~uint64_t{0});
    CarriedData data;
    float v = static_cast<float>(r + 1);
    std::memcpy(data.words, &v, 4);
    data.bytes = 4;
    ExchangeLanes(mine.data(), size).carry(r, 7, data);
    for (size_t i = 0; i < words; ++i) anded[i] &= mine[i];
  }
  size_t bytes = 0;
  ExchangeLanes lanes(anded.data(), size);
  auto slot = lanes.agreedSlot(&bytes);
  CHECK(slot && *slot == 7 && bytes == 4);
  Response r;
  r.dtype = DataType::kFloat32;
  std::vector<uint8_t> out;
  lanes.reduce(r, bytes, out);
  float sum;
  std::memcpy(&sum, out.data(), 4);
  CHECK_EQ(sum, 6.0f);
  // A rank that carried nothing, or another slot: no agreement.
  std::vector<uint64_t> partial = anded;
  partial[ExchangeLanes::kLaneWords] = ~uint64_t{0};
  CHECK(!ExchangeLanes(partial.data(), size).agreedSlot(&bytes));
  partial = anded;
  partial[0] = (uint64_t{4} << 32) | 8;
  CHECK(!ExchangeLanes(partial.data(), size).agreedSlot(&bytes));
  // A size no rank may carry (a broken peer) is refused before it is read.
  for (int r = 0; r < size; ++r) anded[r * ExchangeLanes::kLaneWords] = (uint64_t{1000} << 32) | 7;
  CHECK(!ExchangeLanes(anded.data(), size).agreedSlot(&bytes));
}

TEST(EntriesCarryOnlySmallHostAllreducesPrescaled) {
  std::vector<float> input = {1.5f, -2.0f};
  TensorEntry e;
  e.dtype = DataType::kFloat32;
  e.shape = {2};
  e.input = input.data();
  e.prescale = 2.0;
  CarriedData data;
  carryIfSmall(e, data);
  CHECK_EQ(data.bytes, 8u);
  float packed[2];
  std::memcpy(packed, data.words, 8);
  CHECK(packed[0] == 3.0f && packed[1] == -4.0f);
  TensorEntry big = e;
  big.shape = {5};
  carryIfSmall(big, data);
  CHECK_EQ(data.bytes, 0u);
  for (auto change : {0, 1, 2, 3, 4}) {
    TensorEntry other = e;
    if (change == 0) other.reduce_op = ReduceOp::kAdasum;
    if (change == 1) other.device = 0;
    if (change == 2) other.group = "g";
    if (change == 3) other.op = OpType::kBroadcast;
    if (change == 4) other.shape = {0, 2};
    carryIfSmall(other, data);
    CHECK_EQ(data.bytes, 0u);
  }
}

TEST(EverySpecGivesTheExecutorsBytesOverShm) {
  everySpecTwice(2, "shm");
  everySpecTwice(3, "shm");
}

TEST(EverySpecGivesTheExecutorsBytesOverTcp) {
  everySpecTwice(2, "tcp");
  everySpecTwice(3, "tcp");
}

// Shared memory within fake hosts of 2 ranks, TCP across them: the bits'
// AND, and with it the lanes, crosses both levels.
TEST(EverySpecGivesTheExecutorsBytesOverTwoLevels) {
  testing::ranksPerFakeHost() = 2;
  try {
    everySpecTwice(4, "shm");
    oneRankLate(3, "shm");
  } catch (...) {
    testing::ranksPerFakeHost() = 0;
    throw;
  }
  testing::ranksPerFakeHost() = 0;
}

TEST(ARankNotReadyFallsBackThenRides) {
  for (const char* t : {"shm", "tcp"}) {
    oneRankLate(2, t);
    oneRankLate(3, t);
  }
}

TEST(TwoReadyOnOneRankRunThroughTheExecutor) {
  for (const char* t : {"shm", "tcp"}) {
    twoReadyOnOneRank(2, t);
    twoReadyOnOneRank(3, t);
  }
}

TEST(StaleAndInvalidatedSlotsIgnoreTheLanes) {
  for (const char* t : {"shm", "tcp"}) {
    staleSlots(2, t);
    staleSlots(3, t);
  }
}

TEST(AJoinedRankStopsTheLanesAndAverageCountsIt) {
  for (const char* t : {"shm", "tcp"}) {
    joinedRank(2, t);
    joinedRank(3, t);
  }
}

TEST(CachedCopiesFollowTheirSlots) {
  alternatingSlots(2, "shm");
  alternatingSlots(3, "tcp");
}

TEST(NoCacheNoLanes) {
  noCache("shm");
  noCache("tcp");
}

int main() { return RUN_ALL_TESTS(); }
