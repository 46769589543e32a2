#include "core/fusion.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "common/reduce.h"
#include "core/collective_math.h"

namespace hvdlite::core {
namespace {

using FusionKey = std::tuple<DataType, ReduceOp, double, double, int32_t, int32_t>;

FusionKey keyOf(const Response& r) {
  return {r.dtype, r.reduce_op, r.prescale, r.postscale, r.device, r.average_ranks};
}

bool fusable(const Response& r) { return r.op == OpType::kAllreduce && !r.error; }

}  // namespace

int64_t batchBytes(const Response& r) { return fusable(r) ? responseBytes(r) : 0; }

int64_t responseBytes(const Response& response) {
  return response.elementCount() * static_cast<int64_t>(dtypeSize(response.dtype));
}

std::vector<Batch> planFusion(const std::vector<Response>& responses, int64_t threshold_bytes) {
  std::vector<Batch> batches;
  std::map<FusionKey, size_t> open;  // key -> index of the batch still accepting members
  for (const auto& r : responses) {
    int64_t bytes = batchBytes(r);
    if (fusable(r)) {
      auto it = open.find(keyOf(r));
      if (it != open.end()) {
        Batch& batch = batches[it->second];
        const Response& head = *batch.members.front();
        bool same_group = !r.group.empty() && r.group == head.group;
        if (same_group || batch.bytes + bytes <= threshold_bytes) {
          batch.members.push_back(&r);
          batch.bytes += bytes;
          continue;
        }
      }
      open[keyOf(r)] = batches.size();
    }
    batches.push_back(Batch{{&r}, bytes});
  }
  return batches;
}

namespace {

// Calls visit(member, offset in member, offset in range, bytes) for each
// member's part of [begin, end).
template <typename Visit>
void forEachPart(const Batch& batch, size_t begin, size_t end, Visit visit) {
  size_t at = 0;
  for (size_t i = 0; i < batch.members.size() && at < end; ++i) {
    size_t bytes = static_cast<size_t>(responseBytes(*batch.members[i]));
    size_t lo = std::max(at, begin), hi = std::min(at + bytes, end);
    if (lo < hi) visit(i, lo - at, lo - begin, hi - lo);
    at += bytes;
  }
}

}  // namespace

void packRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
               size_t end, ReduceOp wire_op, uint8_t* out) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  forEachPart(batch, begin, end, [&](size_t i, size_t from, size_t to, size_t bytes) {
    if (const TensorEntry* e = entries[i].get()) {
      const auto* input = static_cast<const uint8_t*>(e->input) + from;
      if (out + to != input) std::memcpy(out + to, input, bytes);
      scaleInPlace(out + to, bytes / esize, head.dtype, head.prescale);
    } else {
      fillNeutral(out + to, bytes / esize, head.dtype, wire_op);
    }
  });
}

void unpackRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                 size_t end, const uint8_t* in, const Response* finish) {
  forEachPart(batch, begin, end, [&](size_t i, size_t from, size_t to, size_t bytes) {
    if (TensorEntry* e = entries[i].get()) {
      auto* output = static_cast<uint8_t*>(e->output) + from;
      if (output != in + to) std::memcpy(output, in + to, bytes);
      if (finish) finishReduction(output, bytes / dtypeSize(finish->dtype), *finish);
    }
  });
}

uint8_t* FusionBuffer::reserve(size_t bytes) {
  if (storage_.size() < bytes) storage_.resize(bytes);
  return storage_.data();
}

}  // namespace hvdlite::core
