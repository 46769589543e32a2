// Tests fusion's byte ranges (csrc/core/fusion.cc): packRange, unpackRange and
// outputHolding give the same answers (and combineRange what packRange
// and a reduction give) on a batch planFusion measured (ends,
// found by binary search) as on one measured member by member, for every
// range boundary of a batch with empty, tiny and chunk-straddling members.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "core/fusion.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

Response allreduceOf(const std::string& name, int64_t elements) {
  Response r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.dtype = DataType::kInt32;
  r.reduce_op = ReduceOp::kSum;
  r.shape = {elements};
  return r;
}

}  // namespace

TEST(ranges_of_a_planned_batch_match_member_by_member) {
  const std::vector<int64_t> sizes = {5, 0, 1, 300, 0, 17, 1024, 3};
  std::vector<Response> responses;
  for (size_t i = 0; i < sizes.size(); ++i) responses.push_back(allreduceOf("t" + std::to_string(i), sizes[i]));
  auto planned = planFusion(responses, int64_t{1} << 30);
  CHECK_EQ(planned.size(), size_t{1});
  const Batch& searched = planned[0];
  CHECK_EQ(searched.ends.size(), sizes.size());
  Batch walked{searched.members, searched.bytes, {}};  // no ends: measured member by member
  std::vector<std::vector<int32_t>> inputs, outputs;
  std::vector<TensorEntryPtr> entries;
  int32_t next = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    inputs.emplace_back(sizes[i]);
    for (auto& v : inputs.back()) v = next++;
    outputs.emplace_back(sizes[i], -1);
    auto entry = std::make_unique<TensorEntry>();
    entry->input = inputs.back().data();
    entry->output = outputs.back().data();
    entries.push_back(i == 5 ? nullptr : std::move(entry));  // member 5: this rank joined
  }
  const size_t total = static_cast<size_t>(searched.bytes);
  for (size_t begin = 0; begin <= total; begin += 4) {
    for (size_t end = begin + 4; end <= total; end += 4 * 37) {
      std::vector<uint8_t> a(end - begin, 0), b(end - begin, 1);
      packRange(searched, entries, begin, end, ReduceOp::kSum, a.data());
      packRange(walked, entries, begin, end, ReduceOp::kSum, b.data());
      CHECK(a == b);
      CHECK(outputHolding(searched, entries, begin, end) == outputHolding(walked, entries, begin, end));
      // combineRange: the packed range combined with another rank's bytes, without the pack.
      std::vector<int32_t> other((end - begin) / 4, 1000), combined((end - begin) / 4, 0);
      combineRange(searched, entries, begin, end, ReduceOp::kSum, reinterpret_cast<const uint8_t*>(other.data()),
                   reinterpret_cast<uint8_t*>(combined.data()));
      reduceInto(a.data(), other.data(), other.size(), DataType::kInt32, ReduceOp::kSum);
      CHECK(std::memcmp(combined.data(), a.data(), a.size()) == 0);
    }
  }
  // A range inside member 3 is staged in its output; one across 3 and 5 is not.
  size_t start3 = 4 * (5 + 0 + 1);
  CHECK(outputHolding(searched, entries, start3 + 8, start3 + 40) ==
        reinterpret_cast<uint8_t*>(outputs[3].data()) + 8);
  CHECK(outputHolding(searched, entries, start3, start3 + 4 * 301) == nullptr);
  // Unpacking the whole batch in odd ranges puts every input back in its output.
  std::vector<uint8_t> packed(total);
  packRange(searched, entries, 0, total, ReduceOp::kSum, packed.data());
  for (size_t begin = 0; begin < total; begin += 4 * 53) {
    size_t end = std::min(total, begin + 4 * 53);
    unpackRange(searched, entries, begin, end, packed.data() + begin);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i != 5) CHECK(outputs[i] == inputs[i]);
  }
}

int main() { return RUN_ALL_TESTS(); }
