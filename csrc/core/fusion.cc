#include "core/fusion.h"

#include <map>
#include <tuple>

namespace hvdlite::core {
namespace {

using FusionKey = std::tuple<DataType, ReduceOp, double, double, int32_t, int32_t>;

FusionKey keyOf(const Response& r) {
  return {r.dtype, r.reduce_op, r.prescale, r.postscale, r.device, r.active_ranks};
}

bool fusable(const Response& r) { return r.op == OpType::kAllreduce && !r.error; }

}  // namespace

int64_t responseBytes(const Response& response) {
  return response.elementCount() * static_cast<int64_t>(dtypeSize(response.dtype));
}

std::vector<Batch> planFusion(const std::vector<Response>& responses, int64_t threshold_bytes) {
  std::vector<Batch> batches;
  std::map<FusionKey, size_t> open;  // key -> index of the batch still accepting members
  for (const auto& r : responses) {
    int64_t bytes = fusable(r) ? responseBytes(r) : 0;
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

uint8_t* FusionBuffer::reserve(size_t bytes) {
  if (storage_.size() < bytes) storage_.resize(bytes);
  return storage_.data();
}

}  // namespace hvdlite::core
