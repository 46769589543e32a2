#include "transport/two_level/two_level_communicator.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <map>

#include "common/errors.h"
#include "common/prefix_sum.h"

namespace hvdlite::transport::two_level {

SetLayout SetLayout::of(const std::vector<int>& global_ranks, const std::vector<std::string>& hostnames,
                        int my_global_rank) {
  SetLayout layout;
  const std::string& mine = hostnames.at(my_global_rank);
  std::map<std::string, int> members_on;  // host -> members seen so far there
  int my_position = -1;
  std::vector<int> position(global_ranks.size());
  std::map<std::string, int> number_of;  // host -> its number, in order of first members
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    const std::string& host = hostnames.at(global_ranks[i]);
    position[i] = members_on[host]++;
    layout.host.push_back(number_of.emplace(host, static_cast<int>(number_of.size())).first->second);
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

TwoLevelThresholds TwoLevelThresholds::of(Hierarchy allreduce, Hierarchy allgather) {
  TwoLevelThresholds thresholds;
  if (allreduce != Hierarchy::kOff) thresholds.allreduce = TwoLevelCommunicator::kTwoLevelMinBytes;
  if (allgather != Hierarchy::kOff) thresholds.allgather = TwoLevelCommunicator::kTwoLevelAllgatherMinBytes;
  return thresholds;
}

TwoLevelCommunicator::TwoLevelCommunicator(std::unique_ptr<Communicator> flat,
                                           std::unique_ptr<Communicator> local,
                                           std::unique_ptr<Communicator> cross, const SetLayout& layout,
                                           TwoLevelThresholds thresholds,
                                           std::function<void()> abort_transport)
    : flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      thresholds_(thresholds),
      abort_transport_(std::move(abort_transport)),
      members_(static_cast<size_t>(layout.hosts)),
      cross_hosts_(layout.local.size()),
      host_(layout.host.at(static_cast<size_t>(flat_->rank()))) {
  for (size_t r = 0; r < layout.host.size(); ++r) members_[layout.host[r]].push_back(static_cast<int>(r));
  for (size_t l = 0; l < cross_hosts_.size(); ++l) {
    auto& order = cross_hosts_[l];
    for (int h = 0; h < layout.hosts; ++h) order.push_back(h);
    // The cross communicators' members are sorted, as set ranks are.
    std::sort(order.begin(), order.end(), [&](int a, int b) { return members_[a][l] < members_[b][l]; });
  }
  const auto& mine = members_[host_];
  HVD_CHECK(layout.twoLevels() && flat_->size() == static_cast<int>(layout.host.size()) &&
                local_->size() == static_cast<int>(mine.size()) && cross_->size() == layout.hosts &&
                mine[local_->rank()] == flat_->rank() &&
                members_[cross_hosts_[local_->rank()][cross_->rank()]][local_->rank()] == flat_->rank(),
            "the local and cross communicators do not match the set's layout");
}

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
  bool allreduce = thresholds_.allreduce != TwoLevelThresholds::kNever;
  bool allgather = thresholds_.allgather != TwoLevelThresholds::kNever;
  std::string which = allreduce && allgather ? "allreduce and allgather"
                      : allreduce              ? "allreduce"
                                               : "allgather";
  return "two levels: " + which + " by " + local_->describe() + " inside each of " +
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
// skip the two shared-memory steps, so tiny buffers (negotiation, a scalar)
// go flat. The threshold was 256 KiB while a TCP wait slept in the kernel at
// once; since waits poll first (Note [Polling before sleeping on a socket]),
// two levels are ahead from 1 KiB up, because a flat exchange below 256 KiB
// (recursive doubling) sends the whole buffer across the link from every
// rank of a host. Two levels send it once per host. 2 x 2 hosts, 1 Gbit/s,
// median latency flat -> two levels: 16 KiB 367 -> 162 us, 64 KiB 1146 -> 612
// us; 10 Gbit/s: 16 KiB 154 -> 104, 64 KiB 323 -> 133; 1 KiB equal within noise,
// and 3 x 2 no worse (bench/RESULTS.md, small messages).
void TwoLevelCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t local_size = static_cast<size_t>(local_->size());
  const size_t element = dtypeSize(dtype);
  if (count * element < thresholds_.allreduce) {
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
// An allgather pipelines the same way after gathering this host's block
// (Note [Two-level allgather]): chunk i of every host's block crosses on the
// worker while this thread spreads chunk i-1 over shared memory.
void TwoLevelCommunicator::pipelined(char* data, size_t count, size_t chunk, DataType dtype, ReduceOp op) {
  const size_t element = dtypeSize(dtype);
  const size_t local_size = static_cast<size_t>(local_->size());
  const size_t me = static_cast<size_t>(local_->rank());
  const size_t chunks = (count + chunk - 1) / chunk;
  const size_t shard_bytes = (chunk / local_size + 1) * element;
  for (auto& shard : shards_) {
    if (shard.size() < shard_bytes) shard.resize(shard_bytes);
  }
  if (!worker_) worker_ = std::make_unique<CrossWorker>();
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
      worker_->post([this, shard = shards_[i % 2].data(), count = counts[me], dtype, op] {
        cross_->allreduce(shard, count, dtype, op);
      });
      if (i > 0) gather(i - 1);
    }
    gather(chunks - 1);
  } catch (...) {
    abort_transport_();
    worker_->drain();
    throw;
  }
}

// Note [Two-level allgather]
// A flat ring allgather over N = H x L ranks laid out host by host crosses
// each host boundary with one ring edge per direction, and an edge carries
// every block but its receiver's: (N-1)/N of the output T each way through
// a host's link. A host needs only the other hosts' blocks, (H-1)/H x T, and
// two levels move no more than that across:
//   1. allgather inside the host (shared memory): every member gets the
//      host's block, its members' contributions in set order, in place in
//      the output where they are consecutive set ranks (as launchers place
//      ranks host by host);
//   2. the host's block cut in L slices; local rank l carries slice l in an
//      allgather among the members at position l across hosts, all L
//      positions at once over their own connections, each a ring of H that
//      carries (H-1)/H x T/L out of each host;
//   3. for each other host, an allgather inside the host of its L slices:
//      a block is its slices end to end, as the allgather lays them out,
//      so it lands in place too, without a final copy.
// Per host link, each way (T: the whole output, even blocks; measured by the
// kernel's counters in test_tcp's allgather_across_hosts_sends_what_hosts_lack):
//   2 hosts x 2 ranks: flat 3/4 T   two levels 1/2 T (1.5x fewer bytes)
//   3 hosts x 2 ranks: flat 5/6 T   two levels 2/3 T (1.25x)
//   2 hosts x 8 ranks: flat 15/16 T two levels 1/2 T (1.9x)
// the bound, since every host must receive (H-1)/H x T. Uneven blocks
// (allgather's first dimension differs per rank) are cut by bytes, not by
// rank, so every connection carries an even share. Where set ranks
// interleave hosts, the flat ring crosses hosts at every edge; two levels
// move the same bytes as above, through staging for the blocks not in place.
// The output is bytes copied, so it is identical to the flat ring's.
// Small allgathers gain too, unlike small allreduces (which the flat
// communicator runs by recursive doubling, log2 N steps): the flat ring
// takes N-1 steps, each waiting on a cross-host edge, where two levels take
// H-1 across hosts and quick shared-memory steps. Measured on fake hosts
// (test_tcp_bench two-level: loopback, 2 cores loaded 9-13, 4 runs), the
// ring's time over two levels' had medians of 1.2-2.7 from 64 B to 64 KiB
// on 2 x 2 and 3 x 2, and 2.6 (2 x 2) and 1.0 (3 x 2) at 256 KiB, single
// runs 0.7-6: no size below which the ring wins, so
// kTwoLevelAllgatherMinBytes is 0. Only large buffers on loopback, where
// memory copies and not a link limit both, were slower (0.7-1.0 at 4 and
// 64 MiB): a rank copies about 1.4 x the output through shared memory and
// 0.5 x through the kernel (2 x 2), the ring 1.5 x through the kernel.
// HVDLITE_HIERARCHICAL_ALLGATHER=0 keeps the flat ring.
void TwoLevelCommunicator::doAllgatherv(const void* in, void* out,
                                        const std::vector<size_t>& bytes_per_rank) {
  size_t total = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), size_t{0});
  if (total == 0 || total < thresholds_.allgather) {
    flat_->allgatherv(in, out, bytes_per_rank);
    return;
  }
  try {
    twoLevelAllgatherv(in, static_cast<char*>(out), bytes_per_rank);
  } catch (...) {
    // A peer waiting for this rank on the other level must fail too, now.
    abort_transport_();
    throw;
  }
}

namespace {

char* atLeast(std::vector<char>& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

}  // namespace

void TwoLevelCommunicator::twoLevelAllgatherv(const void* in, char* out,
                                              const std::vector<size_t>& bytes_per_rank) {
  const size_t positions = local_->size(), hosts = members_.size();
  const int me = local_->rank();
  const auto offsets = exclusivePrefixSum(bytes_per_rank);
  std::vector<size_t> block_bytes(hosts, 0);
  for (size_t h = 0; h < hosts; ++h) {
    for (int r : members_[h]) block_bytes[h] += bytes_per_rank[r];
  }
  // Where host h's block is gathered: in place in the output, or in staging
  // when its members are not consecutive set ranks (scattered at the end).
  std::vector<bool> consecutive(hosts);
  size_t staged = 0;
  for (size_t h = 0; h < hosts; ++h) {
    consecutive[h] = members_[h].back() - members_[h].front() + 1 == static_cast<int>(positions);
    if (!consecutive[h]) staged += block_bytes[h];
  }
  std::vector<char*> block(hosts);
  char* staging = atLeast(host_blocks_, staged);
  for (size_t h = 0; h < hosts; ++h) {
    block[h] = consecutive[h] ? out + offsets[members_[h].front()] : staging;
    if (!consecutive[h]) staging += block_bytes[h];
  }
  // 1. This host's block.
  std::vector<size_t> local_bytes;
  for (int r : members_[host_]) local_bytes.push_back(bytes_per_rank[r]);
  local_->allgatherv(in, block[host_], local_bytes);

  // Chunk k of host h's block: bytes [k x kChunkBytes, ...), cut evenly
  // among the positions (the larger slices first).
  const size_t largest = *std::max_element(block_bytes.begin(), block_bytes.end());
  const size_t chunks = std::max<size_t>(1, (largest + kChunkBytes - 1) / kChunkBytes);
  auto begin = [&](size_t h, size_t k) { return std::min(k * kChunkBytes, block_bytes[h]); };
  auto slices = [&](size_t h, size_t k) {
    return evenSplit(std::min(kChunkBytes, block_bytes[h] - begin(h, k)), positions);
  };
  size_t sliced_bytes = 0;  // the most one chunk's cross allgather brings
  for (size_t h = 0; h < hosts; ++h) sliced_bytes += std::min(kChunkBytes, block_bytes[h]) / positions + 1;
  for (auto& buffer : slices_) atLeast(buffer, sliced_bytes);
  // 2. Slice `me` of chunk k of every host's block, in cross order.
  auto cross = [&](size_t k, char* into) {
    std::vector<size_t> cross_bytes;
    for (int h : cross_hosts_[me]) cross_bytes.push_back(slices(h, k)[me]);
    auto mine = slices(host_, k);
    size_t at = begin(host_, k) + std::accumulate(mine.begin(), mine.begin() + me, size_t{0});
    cross_->allgatherv(block[host_] + at, into, cross_bytes);
  };
  // 3. Chunk k of each other host's block from its slices, one per member:
  // the chunk is its slices end to end, as an allgather lays them out.
  // Every member takes the hosts in the same order, though positions order
  // them differently.
  auto spread = [&](size_t k, const char* from) {
    std::vector<size_t> at(hosts);
    size_t running = 0;
    for (int h : cross_hosts_[me]) {
      at[h] = running;
      running += slices(h, k)[me];
    }
    for (size_t h = 0; h < hosts; ++h) {
      if (static_cast<int>(h) != host_) local_->allgatherv(from + at[h], block[h] + begin(h, k), slices(h, k));
    }
  };
  if (chunks == 1) {
    cross(0, slices_[0].data());
    spread(0, slices_[0].data());
  } else {  // Note [Pipelined two levels]
    if (!worker_) worker_ = std::make_unique<CrossWorker>();
    try {
      for (size_t k = 0; k < chunks; ++k) {
        worker_->post([&cross, k, into = slices_[k % 2].data()] { cross(k, into); });
        if (k > 0) {
          worker_->waitOldest();
          spread(k - 1, slices_[(k - 1) % 2].data());
        }
      }
      worker_->waitOldest();
      spread(chunks - 1, slices_[(chunks - 1) % 2].data());
    } catch (...) {
      // Queued jobs use this frame: they must fail fast and be over first.
      abort_transport_();
      worker_->drain();
      throw;
    }
  }
  // A staged block is its members' blocks end to end.
  for (size_t h = 0; h < hosts; ++h) {
    if (consecutive[h]) continue;
    const char* from = block[h];
    for (int r : members_[h]) {
      if (bytes_per_rank[r] > 0) std::memcpy(out + offsets[r], from, bytes_per_rank[r]);
      from += bytes_per_rank[r];
    }
  }
}

}  // namespace hvdlite::transport::two_level
