#include "core/fusion.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "common/reduce.h"
#include "core/collective_math.h"

namespace hvdlite::core {
namespace {

using FusionKey = std::tuple<OpType, DataType, ReduceOp, double, double, int32_t, int32_t>;

// The op is part of the key: allreduces and reducescatters never share a batch.
FusionKey keyOf(const Response& r) {
  return {r.op, r.dtype, r.reduce_op, r.prescale, r.postscale, r.device, r.average_ranks};
}

bool fusable(const Response& r) {
  return (r.op == OpType::kAllreduce || r.op == OpType::kReducescatter) && !r.error;
}

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
          batch.ends.push_back(static_cast<size_t>(batch.bytes));
          continue;
        }
      }
      open[keyOf(r)] = batches.size();
    }
    batches.push_back(Batch{{&r}, bytes, {static_cast<size_t>(bytes)}});
  }
  return batches;
}

namespace {

size_t memberBytes(const Batch& batch, size_t i) {
  if (batch.ends.size() != batch.members.size()) return static_cast<size_t>(responseBytes(*batch.members[i]));
  return batch.ends[i] - (i == 0 ? 0 : batch.ends[i - 1]);
}

// The first member whose bytes end after `begin`, and where its bytes start
// (members.size() when none does). A pipelined batch of many small tensors
// is walked once per chunk and part: search instead of summing from member 0.
std::pair<size_t, size_t> firstMemberAfter(const Batch& batch, size_t begin) {
  if (batch.ends.size() == batch.members.size()) {
    size_t i = std::upper_bound(batch.ends.begin(), batch.ends.end(), begin) - batch.ends.begin();
    return {i, i == 0 ? 0 : batch.ends[i - 1]};
  }
  size_t i = 0, at = 0;
  for (; i < batch.members.size(); ++i) {
    size_t bytes = memberBytes(batch, i);
    if (at + bytes > begin) break;
    at += bytes;
  }
  return {i, at};
}

// Calls visit(member, offset in member, offset in range, bytes) for each
// member's part of [begin, end).
template <typename Visit>
void forEachPart(const Batch& batch, size_t begin, size_t end, Visit visit) {
  auto [i, at] = firstMemberAfter(batch, begin);
  for (; i < batch.members.size() && at < end; ++i) {
    size_t bytes = memberBytes(batch, i);
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
      scaleInto(out + to, static_cast<const uint8_t*>(e->input) + from, bytes / esize, head.dtype,
                head.prescale);
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
      if (finish) finishReductionInto(output, in + to, bytes / dtypeSize(finish->dtype), *finish);
      else if (output != in + to) std::memcpy(output, in + to, bytes);
    }
  });
}

// A scaled or joined member's part is packed into dst and combined there;
// the operands keep packRange's order (this rank's, then other), bit for bit.
void combineRange(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                  size_t end, ReduceOp wire_op, const uint8_t* other, uint8_t* dst) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  forEachPart(batch, begin, end, [&](size_t i, size_t from, size_t to, size_t bytes) {
    const TensorEntry* e = entries[i].get();
    if (e && head.prescale == 1.0) {
      reduce3(dst + to, static_cast<const uint8_t*>(e->input) + from, other + to, bytes / esize, head.dtype,
              wire_op);
      return;
    }
    packRange(batch, entries, begin + to, begin + to + bytes, wire_op, dst + to);
    reduceInto(dst + to, other + to, bytes / esize, head.dtype, wire_op);
  });
}

uint8_t* outputHolding(const Batch& batch, const std::vector<TensorEntryPtr>& entries, size_t begin,
                       size_t end) {
  auto [i, at] = firstMemberAfter(batch, begin);
  if (i == batch.members.size() || end > at + memberBytes(batch, i) || !entries[i]) return nullptr;
  return static_cast<uint8_t*>(entries[i]->output) + (begin - at);
}

// Note [Fused reducescatter]
// A sharded optimizer reduce-scatters every gradient; one collective each
// costs a latency each, as unfused allreduces would. Reducescatters that could
// share one collective by allreduce's rule (same dtype, reduce op, scale
// factors, device, divisor; one process set per execute()) are fused up to the
// same threshold. One reducescatter of the fused buffer must hand rank r the
// rows of every member it would have got alone, so the buffer is rank-major:
// rank 0's rows of member 0, of member 1, ..., then rank 1's rows of each
// member, and so on, each member's rows split as a lone reducescatter splits
// them (reducescatterLayout: rows/N, the first rows%N ranks one more; a 0-d
// tensor is one row). Rank r's share, counts[r] elements, is then its rows of
// each member back to back, in member order, and is copied into each
// member's own output. Every member shares the scale factors and divisor, so
// the share is scaled once, not per member.
ScatterLayout scatterLayout(const Batch& batch, int size, int rank) {
  ScatterLayout layout;
  layout.members = batch.members.size();
  layout.counts.assign(size, 0);
  layout.share_at.assign(size, 0);
  layout.parts.resize(size_t(size) * layout.members);
  const size_t esize = dtypeSize(batch.members.front()->dtype);
  for (size_t i = 0; i < layout.members; ++i) {
    auto member = reducescatterLayout(*batch.members[i], size, rank);
    size_t from = 0;
    for (int r = 0; r < size; ++r) {
      auto& part = layout.parts[size_t(r) * layout.members + i];
      part.from = from;
      part.bytes = member.counts[r] * esize;
      from += part.bytes;
      layout.counts[r] += member.counts[r];
    }
    layout.shapes.push_back(std::move(member.out_shape));
  }
  for (int r = 0; r < size; ++r) {
    layout.share_at[r] = layout.total;
    size_t at = layout.total;
    for (size_t i = 0; i < layout.members; ++i) {
      auto& part = layout.parts[size_t(r) * layout.members + i];
      part.at = at;
      at += part.bytes;
    }
    layout.total += layout.counts[r] * esize;
  }
  return layout;
}

void packScatter(const Batch& batch, const ScatterLayout& layout, const std::vector<TensorEntryPtr>& entries,
                 ReduceOp wire_op, uint8_t* out) {
  const Response& head = *batch.members.front();
  const size_t esize = dtypeSize(head.dtype);
  for (size_t k = 0; k < layout.parts.size(); ++k) {
    const auto& part = layout.parts[k];
    if (part.bytes == 0) continue;
    if (const TensorEntry* e = entries[k % layout.members].get()) {
      scaleInto(out + part.at, static_cast<const uint8_t*>(e->input) + part.from, part.bytes / esize,
                head.dtype, head.prescale);
    } else {
      fillNeutral(out + part.at, part.bytes / esize, head.dtype, wire_op);
    }
  }
}

void unpackScatter(const ScatterLayout& layout, int rank, const uint8_t* share, const std::vector<void*>& outputs) {
  for (size_t i = 0; i < layout.members; ++i) {
    const auto& part = layout.part(rank, i);
    if (outputs[i] && part.bytes > 0) std::memcpy(outputs[i], share + (part.at - layout.share_at[rank]), part.bytes);
  }
}

// Note [Fusion buffer gives back]
// The buffer grows to the largest batch it has held. One batch can be far
// larger than a training step's: broadcast_parameters at the start fuses the
// whole model up to the fusion threshold (128 MiB), a sharded optimizer's
// step moves a few MiB at a time, and a buffer kept at its high-water mark
// would hold that memory for the whole job (134 MB of each rank's resident
// memory in the sharded-optimizer benchmark, bench/RESULTS.md). So reserves
// are counted in windows of kTrimWindow: a buffer more than twice the largest
// request of a window is reallocated to that request at the window's end. A
// steady loop (the same batches every step) never reallocates; memory of this
// size is mapped on its own by the C library, so freeing it returns it. The
// contents need not survive a reserve, so growing neither copies nor fills.
uint8_t* FusionBuffer::reserve(size_t bytes) {
  window_peak_ = std::max(window_peak_, bytes);
  if (++window_uses_ >= kTrimWindow) {
    if (capacity_ > kTrimFloor && capacity_ / 2 > window_peak_) {
      storage_.reset();  // the old block goes before the new one comes
      capacity_ = std::max<size_t>(window_peak_, 1);
      storage_.reset(new uint8_t[capacity_]);
    }
    window_peak_ = 0;
    window_uses_ = 0;
  }
  if (capacity_ < bytes || !storage_) {
    storage_.reset();
    capacity_ = std::max<size_t>(bytes, 1);
    storage_.reset(new uint8_t[capacity_]);
  }
  return storage_.get();
}

}  // namespace hvdlite::core
