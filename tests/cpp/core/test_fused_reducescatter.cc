// Fused reducescatters (Note [Fused reducescatter] in csrc/core/fusion.cc):
// the planner's rule, the rank-major layout with uneven rows, and the host
// executor running a fused batch on ranks as threads (tcp and shm).
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/reduce.h"
#include "core/collective_math.h"
#include "core/executor.h"
#include "core/fusion.h"
#include "testing.h"
#include "transport/ranks.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

Response scatterResponse(const std::string& name, std::vector<int64_t> shape, DataType dtype = DataType::kFloat32,
                         ReduceOp op = ReduceOp::kSum, double prescale = 1.0, double postscale = 1.0,
                         int ranks = 1) {
  Response r;
  r.op = OpType::kReducescatter;
  r.name = name;
  r.dtype = dtype;
  r.reduce_op = op;
  r.shape = std::move(shape);
  r.prescale = prescale;
  r.postscale = postscale;
  r.average_ranks = ranks;
  return r;
}

Batch batchOf(const std::vector<Response>& rs) {
  Batch batch;
  for (const auto& r : rs) {
    batch.members.push_back(&r);
    batch.bytes += responseBytes(r);
  }
  return batch;
}

// A 0-d tensor (one row, as reducescatterLayout counts it), fewer rows than
// ranks, rows that do not divide by 3, a 2-D tensor, and no rows at all.
std::vector<Response> unevenMembers(DataType dtype = DataType::kFloat32) {
  return {scatterResponse("scalar", {}, dtype), scatterResponse("few", {2, 3}, dtype),
          scatterResponse("odd", {7}, dtype), scatterResponse("matrix", {5, 2}, dtype),
          scatterResponse("empty", {0, 4}, dtype)};
}

}  // namespace

TEST(ScatterLayoutIsRankMajorWithEachMembersRowsSplitAsAlone) {
  auto rs = unevenMembers();
  Batch batch = batchOf(rs);
  ScatterLayout layout = scatterLayout(batch, 3, 1);
  // Per member and rank (elements): scalar 1 0 0, few 3 3 0, odd 3 2 2, matrix 4 4 2, empty 0 0 0.
  CHECK(layout.counts == std::vector<size_t>({11, 9, 4}));
  CHECK(layout.share_at == std::vector<size_t>({0, 44, 80}));
  CHECK_EQ(layout.total, size_t{96});
  // Rank 1's share: its rows of few, odd and matrix, back to back.
  CHECK_EQ(layout.part(1, 0).bytes, size_t{0});
  CHECK_EQ(layout.part(1, 1).at, size_t{44});
  CHECK_EQ(layout.part(1, 1).from, size_t{12});
  CHECK_EQ(layout.part(1, 2).at, size_t{56});
  CHECK_EQ(layout.part(1, 2).from, size_t{12});
  CHECK_EQ(layout.part(1, 2).bytes, size_t{8});
  CHECK_EQ(layout.part(1, 3).at, size_t{64});
  CHECK_EQ(layout.part(1, 3).from, size_t{16});
  CHECK_EQ(layout.part(2, 3).bytes, size_t{8});
  CHECK(layout.shapes[0] == std::vector<int64_t>({0}));
  CHECK(layout.shapes[1] == std::vector<int64_t>({1, 3}));
  CHECK(layout.shapes[2] == std::vector<int64_t>({2}));
  CHECK(layout.shapes[3] == std::vector<int64_t>({2, 2}));
  CHECK(layout.shapes[4] == std::vector<int64_t>({0, 4}));
}

// Packing rank-major and cutting the buffer into counts[r] elements per rank
// hands each rank exactly what a lone reducescatter of each member would
// (reducescatterLayout), whatever the number of ranks.
TEST(EachRanksShareOfThePackedBufferIsItsRowsOfEveryMember) {
  auto rs = unevenMembers();
  Batch batch = batchOf(rs);
  std::vector<std::vector<float>> inputs;
  std::vector<TensorEntryPtr> entries;
  float next = 1;
  for (const auto& r : rs) {
    inputs.emplace_back(static_cast<size_t>(r.elementCount()));
    for (auto& x : inputs.back()) x = next++;
    auto e = std::make_unique<TensorEntry>();
    e->input = inputs.back().data();
    entries.push_back(std::move(e));
  }
  for (int size = 1; size <= 4; ++size) {
    for (int rank = 0; rank < size; ++rank) {
      ScatterLayout layout = scatterLayout(batch, size, rank);
      std::vector<uint8_t> packed(layout.total);
      packScatter(batch, layout, entries, ReduceOp::kSum, packed.data());
      std::vector<std::vector<float>> outputs;
      std::vector<void*> out_ptrs;
      for (size_t i = 0; i < rs.size(); ++i) {
        auto alone = reducescatterLayout(rs[i], size, rank);
        CHECK(layout.shapes[i] == alone.out_shape);
        outputs.emplace_back(alone.counts[rank], -1.0f);
        out_ptrs.push_back(outputs.back().data());
      }
      unpackScatter(layout, rank, packed.data() + layout.share_at[rank], out_ptrs);
      for (size_t i = 0; i < rs.size(); ++i) {
        auto alone = reducescatterLayout(rs[i], size, rank);
        size_t first = 0;
        for (int r = 0; r < rank; ++r) first += alone.counts[r];
        for (size_t k = 0; k < outputs[i].size(); ++k) CHECK_EQ(outputs[i][k], inputs[i][first + k]);
      }
    }
  }
}

TEST(ReducescattersFuseByAllreducesRuleAndNeverWithAllreduces) {
  std::vector<Response> rs{scatterResponse("a", {10}),
                           scatterResponse("b", {3, 2}),
                           scatterResponse("f64", {10}, DataType::kFloat64),
                           scatterResponse("i32", {10}, DataType::kInt32),
                           scatterResponse("scaled", {10}, DataType::kFloat32, ReduceOp::kSum, 1.0, 0.5),
                           scatterResponse("avg", {10}, DataType::kFloat32, ReduceOp::kAverage, 1.0, 1.0, 2),
                           scatterResponse("c", {4})};
  Response allreduce = scatterResponse("ar", {10});
  allreduce.op = OpType::kAllreduce;
  rs.push_back(allreduce);
  Response failed = scatterResponse("failed", {10});
  failed.error = true;
  rs.push_back(failed);
  auto batches = planFusion(rs, 1 << 20);
  CHECK_EQ(batches.size(), size_t{7});
  CHECK_EQ(batches[0].members.size(), size_t{3});
  CHECK_EQ(batches[0].members[2]->name, std::string("c"));
  CHECK_EQ(batches[0].bytes, int64_t{(10 + 6 + 4) * 4});
  for (size_t i = 1; i < batches.size(); ++i) CHECK_EQ(batches[i].members.size(), size_t{1});
  CHECK_EQ(batches[5].members[0]->name, std::string("ar"));
  CHECK_EQ(batches[6].bytes, int64_t{0});  // an error moves nothing
}

TEST(FusedReducescattersStopAtTheThreshold) {
  std::vector<Response> rs;
  for (int i = 0; i < 5; ++i) rs.push_back(scatterResponse("t" + std::to_string(i), {10}));  // 40 bytes
  auto batches = planFusion(rs, 80);
  CHECK_EQ(batches.size(), size_t{3});
  CHECK_EQ(batches[0].members.size(), size_t{2});
  CHECK_EQ(batches[1].members.size(), size_t{2});
  CHECK_EQ(batches[2].members[0]->name, std::string("t4"));
}

namespace {

class NoProcessSets final : public ProcessSetRegistry {
 public:
  int32_t addProcessSet(const std::vector<int>&) override { return -1; }
  void removeProcessSet(int32_t) override {}
};

// One member of the executor test: its response, this rank's input and, once
// run, its output and status.
struct Member {
  Response response;
  std::vector<uint8_t> input, output;
  std::vector<int64_t> output_shape;
  bool ok = false;
};

Member memberOf(Response response) {
  Member m;
  m.response = std::move(response);
  return m;
}

// Input element k of member m on rank r: small integers, exact in every dtype.
double valueOf(int rank, size_t member, size_t k) { return (rank + 1) * double(k % 7 + 1) + double(member); }

template <typename T>
void fill(Member& m, int rank, size_t index) {
  m.input.resize(static_cast<size_t>(m.response.elementCount()) * sizeof(T));
  auto* x = reinterpret_cast<T*>(m.input.data());
  for (size_t k = 0; k < m.input.size() / sizeof(T); ++k) x[k] = static_cast<T>(valueOf(rank, index, k));
}

// What a lone reducescatter gives `rank` of member `index`, in double.
double expected(const Response& r, int size, size_t index, size_t k_global) {
  double sum = 0;
  for (int peer = 0; peer < size; ++peer) sum += valueOf(peer, index, k_global) * r.prescale;
  if (r.reduce_op == ReduceOp::kAverage) sum = isFloatingPoint(r.dtype) ? sum / size : std::floor(sum / size);
  return sum * r.postscale;
}

template <typename T>
void checkMember(const Member& m, int size, int rank, size_t index) {
  CHECK(m.ok);
  auto alone = reducescatterLayout(m.response, size, rank);
  CHECK(m.output_shape == alone.out_shape);
  size_t first = 0;
  for (int r = 0; r < rank; ++r) first += alone.counts[r];
  const auto* got = reinterpret_cast<const T*>(m.output.data());
  for (size_t k = 0; k < alone.counts[rank]; ++k) {
    CHECK_EQ(static_cast<double>(got[k]), static_cast<double>(static_cast<T>(expected(m.response, size, index, first + k))));
  }
}

// Three dtypes of uneven members, queued at once: the float32 ones (Sum with
// both scales) fuse, the float64 ones (Average) fuse, the int32 one runs
// alone; every output equals a lone reducescatter's.
void runMixedBatch(int size, const std::string& transport_name) {
  testing::runRanks(
      size,
      [&](int rank, transport::Transport& transport) {
        std::vector<int> all(size);
        for (int r = 0; r < size; ++r) all[r] = r;
        auto comm = transport.communicator(all);
        std::vector<std::vector<int64_t>> shapes{{1}, {2, 3}, {7}, {5, 2}, {0, 4}, {size + 1, 3, 2}};
        std::vector<Member> members;
        for (size_t i = 0; i < shapes.size(); ++i) {
          std::string name = "f32." + std::to_string(i);
          members.push_back(memberOf(scatterResponse(name, shapes[i], DataType::kFloat32, ReduceOp::kSum, 0.5, 3.0)));
        }
        for (size_t i = 0; i < 3; ++i) {
          std::string name = "f64." + std::to_string(i);
          members.push_back(memberOf(
              scatterResponse(name, shapes[i + 1], DataType::kFloat64, ReduceOp::kAverage, 1.0, 1.0, size)));
        }
        members.push_back(memberOf(scatterResponse("i32", {5, 3}, DataType::kInt32, ReduceOp::kAverage, 1.0, 1.0, size)));
        TensorQueue queue;
        for (size_t i = 0; i < members.size(); ++i) {
          Member& m = members[i];
          if (m.response.dtype == DataType::kFloat32) fill<float>(m, rank, i);
          else if (m.response.dtype == DataType::kFloat64) fill<double>(m, rank, i);
          else fill<int32_t>(m, rank, i);
          auto e = std::make_unique<TensorEntry>();
          e->name = m.response.name;
          e->op = OpType::kReducescatter;
          e->dtype = m.response.dtype;
          e->shape = m.response.shape;
          e->input = m.input.data();
          e->allocate = [&m](const std::vector<int64_t>& shape) -> void* {
            size_t n = 1;
            for (auto d : shape) n *= static_cast<size_t>(d);
            m.output.assign(std::max<size_t>(n * dtypeSize(m.response.dtype), 1), 0xEE);
            return m.output.data();
          };
          e->callback = [&m](TensorEntry& entry, const Status& status) {
            m.ok = status.ok();
            m.output_shape = entry.output_shape;
          };
          CHECK(queue.add(std::move(e), rank, false));
        }
        std::vector<Response> responses;
        for (const auto& m : members) responses.push_back(m.response);
        CHECK_EQ(planFusion(responses, 1 << 20).size(), size_t{3});
        Timeline timeline(rank);
        NoProcessSets registry;
        Executor executor(1 << 20, timeline, registry);
        executor.execute(responses, *comm, DeviceComms{}, queue);
        for (size_t i = 0; i < members.size(); ++i) {
          if (members[i].response.dtype == DataType::kFloat32) checkMember<float>(members[i], size, rank, i);
          else if (members[i].response.dtype == DataType::kFloat64) checkMember<double>(members[i], size, rank, i);
          else checkMember<int32_t>(members[i], size, rank, i);
        }
      },
      transport_name);
}

}  // namespace

TEST(FusedReducescatterOfUnevenMembersEqualsLoneOnesOverTcp) {
  runMixedBatch(2, "tcp");
  runMixedBatch(3, "tcp");
}

TEST(FusedReducescatterOfUnevenMembersEqualsLoneOnesOverShm) {
  runMixedBatch(3, "shm");
}

int main() { return RUN_ALL_TESTS(); }
