#include "transport/two_level/device_two_level_communicator.h"

#include <cstdint>
#include <utility>

#include "common/errors.h"
#include "transport/transport.h"
#include "transport/two_level/two_level_communicator.h"

namespace hvdlite::transport {

// A rank's part of the buffer is its position among its host's ranks (its
// rank in the local communicator), so parts with the same position meet.
// For several hosts laid out alike; with one rank per host the local step is
// a 1-rank NCCL communicator and every byte crosses on the CPU transport
// (what a user who asks for it there gets; a flat NCCL communicator would use
// NCCL's own network transport instead).
std::unique_ptr<DeviceCommunicator> hierarchicalDeviceCommunicator(std::unique_ptr<DeviceCommunicator> flat,
                                                                   const std::vector<int>& global_ranks,
                                                                   int my_global_rank, Transport& cpu,
                                                                   DeviceTransport& device) {
  auto layout = two_level::SetLayout::of(global_ranks, cpu.hostnames(), my_global_rank);
  if (layout.hosts < 2 || !layout.uniform) return flat;
  // Every rank creates its host's communicator, then its cross one: creation
  // is collective among each one's members, in the same order everywhere.
  auto local_cpu = cpu.communicator(layout.local);
  auto cross = cpu.communicator(layout.cross);
  auto local = device.communicator(*local_cpu);
  return std::make_unique<two_level::DeviceTwoLevelCommunicator>(std::move(flat), std::move(local_cpu),
                                                                 std::move(local), std::move(cross));
}

namespace two_level {

DeviceTwoLevelCommunicator::DeviceTwoLevelCommunicator(std::unique_ptr<DeviceCommunicator> flat,
                                                       std::unique_ptr<Communicator> local_cpu,
                                                       std::unique_ptr<DeviceCommunicator> local,
                                                       std::unique_ptr<Communicator> cross)
    : flat_(std::move(flat)), local_cpu_(std::move(local_cpu)), local_(std::move(local)), cross_(std::move(cross)) {
  HVD_CHECK(flat_->size() == local_->size() * cross_->size(),
            "the local and cross communicators do not cover the set: ", local_->size(), " x ", cross_->size(),
            " ranks for ", flat_->size());
}

std::string DeviceTwoLevelCommunicator::describe() const {
  return "two levels: allreduce by " + local_->describe() + " inside each of " + std::to_string(cross_->size()) +
         " hosts and " + cross_->describe() + " across them; other collectives by " + flat_->describe();
}

DeviceCommunicator& DeviceTwoLevelCommunicator::flat() {
  if (flat_->device() < 0) flat_->useDevice(local_->device());
  flat_ran_ = true;
  return *flat_;
}

// Note [Whose done event]
// Both communicators queue on their GPU's one stream (Note [Device
// ordering]), so an event recorded by either marks everything queued before
// it, by both: a consumer waiting on a batch's done event is ordered after
// the batch whichever communicator recorded it. What differs is whose list of
// unfinished batches holds it. Each one's close() votes "finished", and then
// finalizes its NCCL communicator, once the batches on its own list are done,
// and its health() times the oldest of them (Note [Failing, not hanging]).
// Were a flat broadcast's event on the local list, the flat communicator would
// vote "finished" while its kernel still ran and finalize under it (or, hung,
// poll ncclCommFinalize until the timeout). So the communicator that ran the
// batch's collective records the event (both, were a batch to use both; the
// local one when none ran, as for an empty allreduce). The one stream also
// means that a hung kernel of either holds back the other's later work: the
// watchdog times each list, and its abort() stops both communicators, so
// neither close() waits behind the other past the timeout.
DeviceEvent DeviceTwoLevelCommunicator::recordDone(const std::string& what) {
  DeviceEvent done;
  if (flat_ran_) done = flat_->recordDone(what);
  if (local_ran_ || !done) done = local_->recordDone(what);
  flat_ran_ = local_ran_ = false;
  return done;
}

std::string DeviceTwoLevelCommunicator::health(double timeout_seconds) {
  std::string failure = local_->health(timeout_seconds);
  return failure.empty() ? flat_->health(timeout_seconds) : failure;
}

void DeviceTwoLevelCommunicator::abort() {
  flat_->abort();
  local_->abort();
}

// Each is collective over its own members, who all reach it here.
void DeviceTwoLevelCommunicator::close() {
  flat_->close();
  local_->close();
}

size_t DeviceTwoLevelCommunicator::allreduceRoom(size_t count) const {
  const size_t n = static_cast<size_t>(local_->size());
  return (count + n - 1) / n * n;
}

// Note [Hierarchical allreduce]
// NCCL reduce-scatter among this host's ranks leaves each with 1/local_size
// of the host's sum; those parts are summed across hosts by the CPU transport
// (rank i of every host together), then an NCCL allgather inside the host
// gives everyone the whole result. Only 1/local_size of the data crosses the
// network from each rank. The buffer is padded to a multiple of local_size
// (allreduceRoom: the executor reserves it), so that every part has the same
// size and NCCL reduce-scatters in one call; the padding is reduced with the
// rest and never read.
template <typename Scatter>
void DeviceTwoLevelCommunicator::inTwoLevels(void* data, size_t count, DataType dtype, ReduceOp op,
                                             Scatter&& scatter, const HostFinish* finish) {
  // Nothing to reduce. The count is the response's, the same on every rank,
  // so every rank skips alike and no peer waits; and a tensor of no elements
  // may have no memory at all, which no copy to the host should be asked to read.
  if (count == 0) return;
  local_ran_ = true;
  const size_t esize = dtypeSize(dtype);
  const size_t n = static_cast<size_t>(local_->size());
  const size_t chunk = allreduceRoom(count) / n;
  const size_t chunk_bytes = chunk * esize;
  auto* buffer = static_cast<uint8_t*>(data);
  uint8_t* mine = buffer + local_->rank() * chunk_bytes;
  scatter(buffer, mine, std::vector<size_t>(n, chunk));
  // Through pinned memory, waiting on an event (Note [Device ordering]).
  void* host = local_->stageToHost(mine, chunk_bytes);
  cross_->allreduce(host, chunk, dtype, op);
  if (finish) (*finish)(host, chunk);
  local_->copyFromHost(mine, host, chunk_bytes);
  local_->allgatherv(mine, buffer, std::vector<size_t>(n, chunk_bytes));
}

void DeviceTwoLevelCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  doAllreduceFinishingOnHost(data, count, dtype, op, nullptr);
}

void DeviceTwoLevelCommunicator::doAllreduceFinishingOnHost(void* data, size_t count, DataType dtype, ReduceOp op,
                                                            const HostFinish& finish) {
  auto scatter = [&](const void* in, void* out, const std::vector<size_t>& counts) {
    local_->reducescatter(in, out, counts, dtype, op);
  };
  inTwoLevels(data, count, dtype, op, scatter, finish ? &finish : nullptr);
}

// The factor is applied once, inside the host; across hosts it is a plain sum.
void DeviceTwoLevelCommunicator::doAllreduceScaled(void* data, size_t count, DataType dtype, double factor) {
  auto scatter = [&](const void* in, void* out, const std::vector<size_t>& counts) {
    local_->reducescatterScaled(in, out, counts, dtype, factor);
  };
  inTwoLevels(data, count, dtype, ReduceOp::kSum, scatter, nullptr);
}

}  // namespace two_level
}  // namespace hvdlite::transport
