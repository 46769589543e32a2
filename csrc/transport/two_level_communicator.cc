#include "transport/two_level_communicator.h"

#include <algorithm>
#include <map>

#include "common/errors.h"
#include "common/prefix_sum.h"

namespace hvdlite::transport {

SetLayout SetLayout::of(const std::vector<int>& global_ranks, const std::vector<std::string>& hostnames,
                        int my_global_rank) {
  SetLayout layout;
  const std::string& mine = hostnames.at(my_global_rank);
  std::map<std::string, int> members_on;  // host -> members seen so far there
  int my_position = -1;
  std::vector<int> position(global_ranks.size());
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    const std::string& host = hostnames.at(global_ranks[i]);
    position[i] = members_on[host]++;
    if (host == mine) layout.local.push_back(global_ranks[i]);
    if (global_ranks[i] == my_global_rank) my_position = position[i];
  }
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    if (position[i] == my_position) layout.cross.push_back(global_ranks[i]);
  }
  layout.hosts = static_cast<int>(members_on.size());
  layout.uniform = std::all_of(members_on.begin(), members_on.end(), [&](const auto& host) {
    return host.second == static_cast<int>(layout.local.size());
  });
  return layout;
}

TwoLevelCommunicator::TwoLevelCommunicator(std::unique_ptr<Communicator> flat,
                                           std::unique_ptr<Communicator> local,
                                           std::unique_ptr<Communicator> cross,
                                           std::function<void()> abort_transport)
    : flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      abort_transport_(std::move(abort_transport)) {}

// The worker goes first: it may hold a reference to cross_.
TwoLevelCommunicator::~TwoLevelCommunicator() { worker_.reset(); }

namespace {

// `count` elements split as evenly as can be among `parts`, the larger first.
std::vector<size_t> evenSplit(size_t count, size_t parts) {
  std::vector<size_t> counts(parts, count / parts);
  for (size_t i = 0; i < count % parts; ++i) ++counts[i];
  return counts;
}

std::vector<size_t> timesElement(std::vector<size_t> counts, size_t element) {
  for (auto& c : counts) c *= element;
  return counts;
}

}  // namespace

std::string TwoLevelCommunicator::describe() const {
  return "two levels: allreduce by " + local_->describe() + " inside each of " +
         std::to_string(cross_->size()) + " hosts and " + cross_->describe() +
         " across them; other collectives by " + flat_->describe();
}

// Note [Two-level allreduce]
// A flat ring over H hosts of L ranks each sends 2(N-1)/N of the buffer out
// of every rank, and the ring crosses each host boundary once per direction,
// so a host's link carries about 2(N-1)/N x the buffer each way (1.5x with
// 2 x 2). In two levels the link carries only what the hosts must exchange:
//   1. reduce-scatter inside the host (shared memory): local rank l ends
//      with shard l of the host's sum;
//   2. allreduce of shard l across hosts among the ranks at position l, all
//      L positions at once over their own connections: each way, the link
//      carries L shards x 2(H-1)/H = 2(H-1)/H x the buffer (1x with 2 hosts);
//   3. allgather of the shards inside the host (shared memory).
// Each shard is reduced by one rank per host and then by one cross
// allreduce, whose result is identical on its members, and the allgather
// copies bytes, so every rank ends with bitwise-identical values.
// Below kTwoLevelMinBytes, a buffer's time is latency, not bytes: the flat
// communicator's exchanges cross the link as often (log2 of the hosts) and
// skip the two shared-memory steps (measured: bench/multihost.py), so small
// buffers (negotiation, a scalar) go flat.
void TwoLevelCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t local_size = static_cast<size_t>(local_->size());
  const size_t element = dtypeSize(dtype);
  if (count * element < kTwoLevelMinBytes) {
    flat_->allreduce(data, count, dtype, op);
    return;
  }
  const size_t chunk = std::max(local_size, kChunkBytes / element);
  if (count >= 2 * chunk) {
    pipelined(static_cast<char*>(data), count, chunk, dtype, op);
    return;
  }
  auto counts = evenSplit(count, local_size);
  const size_t mine = counts[static_cast<size_t>(local_->rank())];
  if (shards_[0].size() < mine * element) shards_[0].resize(mine * element);
  local_->reducescatter(data, shards_[0].data(), counts, dtype, op);
  cross_->allreduce(shards_[0].data(), mine, dtype, op);
  local_->allgatherv(shards_[0].data(), data, timesElement(counts, element));
}

// Note [Pipelined two levels]
// The three steps of a large buffer need not wait for each other whole: in
// chunks, the network step of chunk i (on the worker thread, over the cross
// connections) runs while this thread gathers chunk i-1 and scatters chunk
// i+1 over shared memory, so the link stays busy and the shared-memory steps
// hide behind it. Two shard buffers alternate: chunk i's is free again once
// chunk i-2 was gathered. Every member runs the same sequence on each
// channel (shared memory: scatter 0, scatter 1, gather 0, scatter 2, ...;
// network: chunk 0, 1, 2, ...), so the two threads never meet on one.
// A failure on either thread closes the transport first, so that the other
// one, blocked on a peer, fails too instead of waiting forever; the runtime
// would close it anyway (handleFatal).
void TwoLevelCommunicator::pipelined(char* data, size_t count, size_t chunk, DataType dtype, ReduceOp op) {
  const size_t element = dtypeSize(dtype);
  const size_t local_size = static_cast<size_t>(local_->size());
  const size_t me = static_cast<size_t>(local_->rank());
  const size_t chunks = (count + chunk - 1) / chunk;
  const size_t shard_bytes = (chunk / local_size + 1) * element;
  for (auto& shard : shards_) {
    if (shard.size() < shard_bytes) shard.resize(shard_bytes);
  }
  if (!worker_) worker_ = std::make_unique<CrossWorker>(*cross_);
  auto countsOf = [&](size_t i) { return evenSplit(std::min(chunk, count - i * chunk), local_size); };
  auto gather = [&](size_t i) {
    worker_->waitOldest();
    local_->allgatherv(shards_[i % 2].data(), data + i * chunk * element,
                       timesElement(countsOf(i), element));
  };
  try {
    for (size_t i = 0; i < chunks; ++i) {
      auto counts = countsOf(i);
      local_->reducescatter(data + i * chunk * element, shards_[i % 2].data(), counts, dtype, op);
      worker_->post(shards_[i % 2].data(), counts[me], dtype, op);
      if (i > 0) gather(i - 1);
    }
    gather(chunks - 1);
  } catch (...) {
    abort_transport_();
    worker_->drain();
    throw;
  }
}

}  // namespace hvdlite::transport
