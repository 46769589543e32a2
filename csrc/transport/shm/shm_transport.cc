#include "transport/shm/shm_transport.h"

#include <algorithm>
#include <exception>

#include "common/logging.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_communicator.h"
#include "transport/two_level/two_level_communicator.h"

namespace hvdlite::transport::shm {

// A set across hosts is two-level (two_level/), made here from shared memory
// inside each host and tcp across.
using two_level::SetLayout;
using two_level::TwoLevelCommunicator;
using two_level::TwoLevelThresholds;

namespace {

// "job/r3/" -> "r3": the round's part of the store prefix, to tag segments.
std::string roundTag(const std::string& key_prefix) {
  std::string tag;
  for (char c : key_prefix.substr(key_prefix.find('/') + 1)) {
    if (std::isalnum(static_cast<unsigned char>(c))) tag += c;
  }
  return tag.empty() ? "r0" : tag;
}

std::string jobOf(const std::string& key_prefix) { return key_prefix.substr(0, key_prefix.find('/')); }

}  // namespace

ShmTransport::ShmTransport(const TransportOptions& options, Store& store)
    : options_(options), tcp_((removeStaleSegments(jobOf(options.key_prefix),
                                                   "-" + roundTag(options.key_prefix) + "-"),
                               options),
                              store) {}

// The set's rank 0 adds 128 random bits to this (Note [Segment names]); the
// job's prefix and the round's tag let removeStaleSegments and the launcher
// find leftovers (Note [Segment lifetime]).
std::string ShmTransport::segmentPrefixOfRound() const {
  return segmentPrefix(jobOf(options_.key_prefix)) + roundTag(options_.key_prefix) + "-";
}

std::shared_ptr<Segment> ShmTransport::createOrOpen(Communicator& control, size_t bytes) {
  int rank = control.rank();
  std::shared_ptr<Segment> segment;
  std::string name;  // "" from rank 0: it failed to create one
  std::exception_ptr failure;
  if (rank == 0) {
    try {
      segment = std::make_shared<Segment>(Segment::createUnique(segmentPrefixOfRound(), bytes));
      Progress(segment->data(), control.size(), rank).initialize();
      name = segment->name();
    } catch (const TransportError&) {
      failure = std::current_exception();
    }
  }
  // Over the set's authenticated links: a stranger can neither learn nor forge it.
  control.broadcastMessage(name, 0);
  if (failure) std::rethrow_exception(failure);
  if (name.empty()) {
    throw TransportError(detail::concat("shared-memory transport: rank 0 of the set could not "
                                        "create its segment; see its log"));
  }
  if (rank != 0) segment = std::make_shared<Segment>(Segment::open(name, bytes));
  return segment;
}

std::unique_ptr<Communicator> ShmTransport::communicator(const std::vector<int>& global_ranks) {
  auto control = tcp_.communicator(global_ranks);
  if (global_ranks.size() < 2) return control;
  auto layout = SetLayout::of(global_ranks, tcp_.hostnames(), options_.rank);
  if (layout.hosts > 1) {
    auto thresholds = TwoLevelThresholds::of(options_.hierarchy, options_.allgather_hierarchy);
    if (!thresholds.any() || !layout.twoLevels()) return control;
    // Collective among this host's members (a segment), then a view of the
    // mesh: every member makes both in this order.
    auto local = communicator(layout.local);
    auto cross = tcp_.communicator(layout.cross);
    return std::make_unique<TwoLevelCommunicator>(std::move(control), std::move(local), std::move(cross),
                                                  layout, thresholds, [this] { abort(); });
  }
  int rank = control->rank(), size = control->size();
  size_t bytes = ShmCommunicator::segmentBytes(size);
  std::shared_ptr<Segment> segment = createOrOpen(*control, bytes);  // created, then opened
  control->barrier();  // mapped everywhere: the name can go (Note [Segment lifetime])
  const std::string& name = segment->name();
  HVD_LOG(kDebug, options_.rank, "shared-memory segment '", name, "' of ", bytes, " B ",
          rank == 0 ? "created" : "mapped", " for ranks ", detail::joinRanks(global_ranks));
  segment->unlink();
  auto progress = std::make_shared<Progress>(segment->data(), size, rank, options_.stall);
  progress->join(options_.rank);
  {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    live_.emplace_back(progress, segment);
  }
  return std::make_unique<ShmCommunicator>(segment, progress, global_ranks, rank);
}

void ShmTransport::abort() {
  {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    for (auto& [weak_progress, weak_segment] : live_) {
      auto progress = weak_progress.lock();
      auto segment = weak_segment.lock();
      if (progress && segment) progress->abort(options_.rank);
    }
  }
  tcp_.abort();
}

}  // namespace hvdlite::transport::shm
