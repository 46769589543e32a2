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
                                           std::unique_ptr<Communicator> cross)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)) {}

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
// A buffer with fewer elements than local ranks (negotiation flags, a
// scalar) is reduced whole inside the host, then across hosts by every
// position at once: each computes the same sum of the same host sums.
void TwoLevelCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  const size_t local_size = static_cast<size_t>(local_->size());
  if (count < local_size) {
    local_->allreduce(data, count, dtype, op);
    cross_->allreduce(data, count, dtype, op);
    return;
  }
  const size_t element = dtypeSize(dtype);
  std::vector<size_t> counts(local_size, count / local_size);
  for (size_t i = 0; i < count % local_size; ++i) ++counts[i];
  const size_t mine = counts[static_cast<size_t>(local_->rank())];
  if (shard_.size() < mine * element) shard_.resize(mine * element);
  local_->reducescatter(data, shard_.data(), counts, dtype, op);
  cross_->allreduce(shard_.data(), mine, dtype, op);
  std::vector<size_t> bytes(counts);
  for (auto& b : bytes) b *= element;
  local_->allgatherv(shard_.data(), data, bytes);
}

}  // namespace hvdlite::transport
