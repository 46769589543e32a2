#include "transport/shm/shm_communicator.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/prefix_sum.h"
#include "common/reduce.h"

namespace hvdlite::transport::shm {
ShmCommunicator::ShmCommunicator(std::shared_ptr<Segment> segment,
                                 std::shared_ptr<Progress> progress, std::vector<int> global_ranks,
                                 int rank)
    : segment_(std::move(segment)),
      progress_(std::move(progress)),
      ranks_(std::move(global_ranks)),
      rank_(rank) {
  HVD_CHECK(segment_->size() >= segmentBytes(size()), "shared-memory segment too small");
}

size_t ShmCommunicator::segmentBytes(int size) {
  size_t control = (Progress::bytesFor(size) + 4095) / 4096 * 4096;
  return control + static_cast<size_t>(size) * 2 * kSlotBytes;
}

char* ShmCommunicator::slot(int member, int buffer) const {
  size_t control = (Progress::bytesFor(size()) + 4095) / 4096 * 4096;
  return segment_->data() + control + (static_cast<size_t>(member) * 2 + buffer) * kSlotBytes;
}

int ShmCommunicator::beginStep(const char* what) {
  ++step_;
  // Buffer step_ % 2 was last used by step_ - 2: wait until everyone read it.
  if (step_ >= 3) progress_->waitAll(static_cast<uint32_t>(3 * (step_ - 2) + 3), what);
  return static_cast<int>(step_ % 2);
}

// In place: a gathered allreduce whose input and output are `data` (small
// steps stage in `data` itself, so their copies are skipped).
void ShmCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  // One member: nothing to combine (and the staged path of a gathered
  // allreduce over one member would come back here).
  if (size() == 1) return;
  auto* bytes = static_cast<uint8_t*>(data);
  doAllreduceGathered(
      count, dtype, op,
      [bytes](uint8_t* dst, size_t begin, size_t end) {
        if (dst != bytes + begin) std::memcpy(dst, bytes + begin, end - begin);
      },
      [bytes](const uint8_t* src, size_t begin, size_t end) {
        if (src != bytes + begin) std::memcpy(bytes + begin, src, end - begin);
      },
      bytes, {});
}

// Note [Gathered allreduce]
// A fused batch used to be packed into a staging buffer, copied into this
// member's slot, reduced, copied out of the slots into the staging buffer and
// unpacked: five passes over the bytes, two of them only to move them between
// buffers. Packing straight into the slot and unpacking straight out of the
// slots saves those two (200 x 16 KiB on 2 ranks: see bench/RESULTS.md).
// Small steps (one wait, every member combines every slot) still stage: their
// result is combined outside the slots.
void ShmCommunicator::doAllreduceGathered(size_t count, DataType dtype, ReduceOp op,
                                          const PackFn& pack, const UnpackFn& unpack,
                                          uint8_t* staging, const CombineFn& combine) {
  if (count == 0) return;
  if (size() == 1) return Communicator::doAllreduceGathered(count, dtype, op, pack, unpack, staging, combine);
  size_t element = dtypeSize(dtype);
  size_t per_step = kSlotBytes / element;
  for (size_t done = 0; done < count; done += per_step) {
    size_t n = std::min(per_step, count - done);
    size_t offset = done * element, bytes = n * element;
    if (bytes <= kSmallBytes) {
      uint8_t* at = staging + offset;
      pack(at, offset, offset + bytes);
      allreduceSmall(reinterpret_cast<char*>(at), n, dtype, op);
      unpack(at, offset, offset + bytes);
    } else {
      allreduceSplit(staging, offset, n, dtype, op, pack, unpack, combine);
    }
  }
}

void ShmCommunicator::allreduceSmall(char* data, size_t count, DataType dtype, ReduceOp op) {
  size_t bytes = count * dtypeSize(dtype);
  int buffer = beginStep("allreduce");
  std::memcpy(slot(rank_, buffer), data, bytes);
  progress_->publish(phase(2));
  progress_->waitAll(phase(2), "allreduce");
  std::memcpy(data, slot(0, buffer), bytes);
  for (int r = 1; r < size(); ++r) reduceInto(data, slot(r, buffer), count, dtype, op);
  progress_->publish(phase(3));
}

// Note [Reducing from the staging buffer]
// Member r reduces part r of the step (its share) and nobody else reads r's
// own input of that part, so r packs only the other members' parts into its
// slot and its own part into `staging`: where a tensor is reduced in place
// (doAllreduce, or the executor staging a tensor in its own output) that
// pack copies nothing. The share is combined from `staging` and the others'
// slots straight into r's slot, and everyone unpacks every share from the
// slots, r's own first, while it is still in cache and before waiting for the
// others. At 2 members each member copies 1.5 times the step's bytes instead
// of twice (half in, all out). Given `combine`, its own part is not packed at
// all but combined straight from its inputs: a fused batch of many tensors,
// staged in the fusion buffer, then saves the same copy that reducing in
// place saves.
void ShmCommunicator::allreduceSplit(uint8_t* staging, size_t offset, size_t count, DataType dtype,
                                     ReduceOp op, const PackFn& pack, const UnpackFn& unpack,
                                     const CombineFn& combine) {
  size_t element = dtypeSize(dtype);
  int n = size();
  auto begin = [&](int r) { return count * r / n * element; };
  int buffer = beginStep("allreduce");
  char* mine = slot(rank_, buffer);
  for (int r = 0; r < n; ++r) {
    if (begin(r + 1) == begin(r) || (r == rank_ && combine)) continue;
    uint8_t* into = r == rank_ ? staging + offset : reinterpret_cast<uint8_t*>(mine);
    pack(into + begin(r), offset + begin(r), offset + begin(r + 1));
  }
  progress_->publish(phase(1));
  progress_->waitAll(phase(1), "allreduce");
  size_t share = begin(rank_), share_bytes = begin(rank_ + 1) - share;
  if (share_bytes > 0) {
    // Every other member's part of my share, combined in rank order after mine.
    const void* from = staging + offset + share;
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      auto* into = reinterpret_cast<uint8_t*>(mine + share);
      const auto* other = reinterpret_cast<const uint8_t*>(slot(r, buffer) + share);
      if (combine && from != into) combine(into, other, offset + share, offset + share + share_bytes);
      else reduce3(into, from, other, share_bytes / element, dtype, op);
      from = into;
    }
  }
  progress_->publish(phase(2));
  if (share_bytes > 0) {
    unpack(reinterpret_cast<const uint8_t*>(mine + share), offset + share, offset + share + share_bytes);
  }
  progress_->waitAll(phase(2), "allreduce");
  for (int r = 0; r < n; ++r) {
    if (r == rank_ || begin(r + 1) == begin(r)) continue;
    unpack(reinterpret_cast<const uint8_t*>(slot(r, buffer) + begin(r)), offset + begin(r),
           offset + begin(r + 1));
  }
  progress_->publish(phase(3));
}

void ShmCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                      DataType dtype, ReduceOp op) {
  size_t element = dtypeSize(dtype);
  std::vector<size_t> offsets = exclusivePrefixSum(counts);
  size_t total = offsets.back() + counts.back();
  size_t first = offsets[rank_], last = first + counts[rank_];
  if (size() == 1) {
    std::memmove(out, in, total * element);
    return;
  }
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  size_t per_step = kSlotBytes / element;
  // Each member reduces only its own block, straight into its output.
  for (size_t done = 0; done < total; done += per_step) {
    size_t n = std::min(per_step, total - done);
    int buffer = beginStep("reducescatter");
    std::memcpy(slot(rank_, buffer), src + done * element, n * element);
    progress_->publish(phase(1));
    progress_->waitAll(phase(1), "reducescatter");
    size_t lo = std::max(first, done), hi = std::min(last, done + n);
    if (lo < hi) {
      char* target = dst + (lo - first) * element;
      size_t at = (lo - done) * element;
      std::memcpy(target, slot(0, buffer) + at, (hi - lo) * element);
      for (int r = 1; r < size(); ++r) reduceInto(target, slot(r, buffer) + at, hi - lo, dtype, op);
    }
    progress_->publish(phase(3));
  }
}

void ShmCommunicator::doAllgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytes_per_rank) {
  std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  char* base = static_cast<char*>(out);
  const char* mine = static_cast<const char*>(in);
  size_t largest = *std::max_element(bytes_per_rank.begin(), bytes_per_rank.end());
  if (size() == 1 || largest == 0) {
    if (bytes_per_rank[rank_] > 0 && in != base + offsets[rank_]) {
      std::memmove(base + offsets[rank_], in, bytes_per_rank[rank_]);
    }
    return;
  }
  // `in` may alias this rank's part of `out`: copy it into the slot first,
  // and out of the slot like everyone else's.
  for (size_t done = 0; done < largest; done += kSlotBytes) {
    auto piece = [&](int r) { return std::min(kSlotBytes, bytes_per_rank[r] - std::min(done, bytes_per_rank[r])); };
    int buffer = beginStep("allgather");
    std::memcpy(slot(rank_, buffer), mine + done, piece(rank_));
    progress_->publish(phase(2));
    progress_->waitAll(phase(2), "allgather");
    for (int r = 0; r < size(); ++r) {
      if (piece(r) > 0) std::memcpy(base + offsets[r] + done, slot(r, buffer), piece(r));
    }
    progress_->publish(phase(3));
  }
}

void ShmCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  if (size() == 1 || bytes == 0) return;
  char* buffer_bytes = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kSlotBytes) {
    size_t n = std::min(kSlotBytes, bytes - done);
    int buffer = beginStep("broadcast");
    if (rank_ == root) std::memcpy(slot(root, buffer), buffer_bytes + done, n);
    progress_->publish(phase(2));
    progress_->waitAll(phase(2), "broadcast");
    if (rank_ != root) std::memcpy(buffer_bytes + done, slot(root, buffer), n);
    progress_->publish(phase(3));
  }
}

void ShmCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                  const std::vector<size_t>& recv_bytes) {
  int n = size();
  // Everyone must agree on the number of steps: share the largest message.
  uint64_t largest = *std::max_element(send_bytes.begin(), send_bytes.end());
  doAllreduce(&largest, 1, DataType::kInt64, ReduceOp::kMax);
  std::vector<size_t> send_offsets = exclusivePrefixSum(send_bytes);
  std::vector<size_t> recv_offsets = exclusivePrefixSum(recv_bytes);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Slot part j of member r carries r's bytes for member j.
  size_t part = kSlotBytes / n;
  for (size_t done = 0; done < largest; done += part) {
    auto piece = [&](size_t total) { return std::min(part, total - std::min(done, total)); };
    int buffer = beginStep("alltoall");
    for (int to = 0; to < n; ++to) {
      size_t k = piece(send_bytes[to]);
      if (k > 0) std::memcpy(slot(rank_, buffer) + to * part, src + send_offsets[to] + done, k);
    }
    progress_->publish(phase(2));
    progress_->waitAll(phase(2), "alltoall");
    for (int from = 0; from < n; ++from) {
      size_t k = piece(recv_bytes[from]);
      if (k > 0) std::memcpy(dst + recv_offsets[from] + done, slot(from, buffer) + rank_ * part, k);
    }
    progress_->publish(phase(3));
  }
}

void ShmCommunicator::doBarrier() {
  if (size() == 1) return;
  beginStep("barrier");
  progress_->publish(phase(3));
  progress_->waitAll(phase(3), "barrier");
}

// A length a peer put in shared memory is checked before it sizes a buffer,
// as tcp's frames are (Note [Checked peer messages] in core/message.cc).
void ShmCommunicator::checkPeerLength(uint64_t length, int peer, const char* what) const {
  if (length <= kMaxMessageBytes) return;
  throw BadPeerMessage(
      detail::concat("rank ", globalRank(peer), " put a negotiation message (", what, ") of ", length,
                     " bytes in shared memory, more than ", kMaxMessageBytes,
                     " (Communicator::kMaxMessageBytes): hvdlite never sends one that large, so rank ",
                     globalRank(peer), " runs another version of hvdlite or has a bug; the job stops here rather "
                     "than trust it"),
      globalRank(peer));
}

std::vector<std::string> ShmCommunicator::doGather(const std::string& mine, int root) {
  std::vector<size_t> sizes(size(), 0);
  sizes[rank_] = mine.size();
  doAllreduce(sizes.data(), sizes.size(), DataType::kInt64, ReduceOp::kMax);
  size_t total = 0;
  for (int peer = 0; peer < size(); ++peer) {
    checkPeerLength(sizes[peer], peer, "gather");
    total += sizes[peer];  // at most size() x 1 GiB: no overflow in 64 bits
  }
  std::string all(total, '\0');
  doAllgatherv(mine.data(), all.data(), sizes);
  if (rank_ != root) return {};
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t s : sizes) {
    out.push_back(all.substr(at, s));
    at += s;
  }
  return out;
}

void ShmCommunicator::doBroadcastMessage(std::string& message, int root) {
  uint64_t length = rank_ == root ? message.size() : 0;
  doBroadcast(&length, sizeof(length), root);
  checkPeerLength(length, root, "broadcast");
  if (rank_ != root) message.assign(length, '\0');
  doBroadcast(message.data(), length, root);
}

}  // namespace hvdlite::transport::shm
