// Negotiation for one process set: each cycle, decide with the other members
// which tensors are ready on every rank, and in which order to execute them.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/carried.h"
#include "core/coordinator.h"
#include "core/message.h"
#include "core/response_cache.h"
#include "core/tensor_queue.h"
#include "core/timeline.h"
#include "transport/communicator.h"

namespace hvdlite::core {

struct ControllerOptions {
  size_t cache_capacity = 1024;
  std::chrono::duration<double> stall_warning{60.0};   // 0 = no stall checks
  std::chrono::duration<double> stall_shutdown{0.0};   // 0 = never fail stalled tensors
  // Note [Divergence] in coordinator.cc: report after this (0 = never), and
  // fail once every rank is blocked after this (0 = leave it to the stall shutdown).
  std::chrono::duration<double> divergence_warning{5.0};
  std::chrono::duration<double> divergence_shutdown{10.0};
  bool join_average_active = false;  // Note [Join] in coordinator.cc
  // Note [Tensors carried by the negotiation] in carried.cc: bytes of small
  // cached allreduces each rank appends to its cache bits; 0 = none. Must be
  // the same on every member, like cache_capacity.
  size_t carry_bytes = kCarryBytes;
  int carry_max_ranks = kCarryMaxRanks;  // larger sets exchange the bits as before
  // Tests only (Note [Corrupt requests for tests] in controller.cc): "" off,
  // else how a rank other than 0 corrupts its request lists.
  std::string test_corrupt_requests;
};

// Who shut the runtime down, and what each member was waiting on then
// (Note [Naming who shut down] in controller.cc). Global ranks.
struct ShutdownReport {
  std::vector<int> requested;                       // asked to shut down
  std::map<int, std::set<std::string>> waiting;     // member -> names it had submitted

  // The members other than `self` that had not submitted `name`.
  std::vector<int> lacking(const std::string& name, int self) const {
    std::vector<int> out;
    for (const auto& [rank, names] : waiting) {
      if (rank != self && !names.count(name)) out.push_back(rank);
    }
    return out;
  }
};

struct CycleOutcome {
  std::vector<Response> responses;  // identical on every member, in execution order
  bool shutdown = false;            // some member asked to shut down
  ShutdownReport shutdown_report;   // with shutdown
  std::string parameters;           // rank 0's tuned parameters of this cycle; "" = unchanged
  // Note [Tensors carried by the negotiation]: when not empty, every
  // response's result (same order), reduced from the bytes the exchange
  // carried; the responses need no executor.
  std::vector<std::vector<uint8_t>> carried;
};

class Controller {
 public:
  Controller(int32_t process_set_id, transport::Communicator& comm, const ControllerOptions& options,
             Timeline& timeline);

  // One cycle. Blocks until every member has run the same cycle. Throws
  // TransportError if a member is lost. `parameters` (rank 0 only; others'
  // are ignored): opaque bytes every member receives in this cycle's outcome,
  // so that all of them apply a change at the same point (autotune).
  CycleOutcome negotiate(TensorQueue& queue, bool want_shutdown,
                         const std::string& parameters = std::string());

  // Requests this rank is still waiting on (for error messages at shutdown).
  size_t pendingCount() const { return pending_.size(); }

 private:
  struct PendingRequest {
    Request request;  // without its call site, which only a full request carries
    bool sent_full = false;  // sent to the coordinator rather than via cache bits
    Clock::time_point since;
    const CallSite* call_site = nullptr;  // the entry's (Note [Call sites])
    const TensorEntry* entry = nullptr;   // owned by the queue until executed
  };
  struct Exchange;  // the bit vector of one cycle, see Note [Cache bits]

  void admit(TensorQueue& queue, Clock::time_point now);
  std::vector<Request> collectBits(Exchange& bits, bool any_joined, Clock::time_point now);
  // The cached responses ready everywhere, and each one's slot in `taken_slots`.
  std::vector<Response> takeCached(const Exchange& bits, std::vector<size_t>* taken_slots);
  // The bits' exchange: a bitwise-AND allreduce, or with carried tensors an
  // allgather that leaves every rank's part in carried_parts_ and the AND in `bits`.
  void exchange(Exchange& bits, bool carrying);
  // What each rank carried in carried_parts_ (by rank), read off its ready bits.
  std::vector<std::vector<CarriedSlot>> carriedLayouts(size_t words) const;
  // The carried results of `responses` (slots: theirs), or {} where some
  // rank did not carry one of them.
  std::vector<std::vector<uint8_t>> reduceCarriedParts(const std::vector<Response>& responses,
                                                       const std::vector<size_t>& slots,
                                                       const std::vector<std::vector<CarriedSlot>>& layouts,
                                                       size_t words) const;
  std::vector<Response> roundTrip(const std::vector<Request>& mine, bool any_joined, const RankState& state);
  std::vector<Response> coordinate(const std::vector<std::string>& gathered, bool any_joined,
                                   std::string* report);
  // A pending request as sent in full: with its call site and how long it has waited.
  Request fullRequest(const PendingRequest& pending, Clock::time_point now) const;
  void remember(const std::vector<Response>& responses);
  ShutdownReport exchangeShutdown(TensorQueue& queue, bool want_shutdown);
  void traceResponses(const std::vector<Response>& responses, size_t cached) const;
  // The coordinator's reports, with the process set and what happens next.
  std::string whichSet() const;
  std::string stallMessage(const std::string& report) const;
  std::string divergenceMessage(const std::string& report) const;
  std::string divergenceConsequence() const;

  int32_t process_set_id_;
  transport::Communicator& comm_;
  ControllerOptions options_;
  Timeline& timeline_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // set rank 0 only
  std::map<std::string, PendingRequest> pending_;
  std::set<size_t> invalidate_next_;  // coordinator: slots to drop next cycle
  bool joined_ = false;               // this rank called join() and it has not completed
  bool any_joined_ = false;           // as of the last cycle
  Clock::time_point last_coordinator_check_{};
  std::vector<uint8_t> carried_parts_;  // every rank's bits and carried bytes, by rank
};

}  // namespace hvdlite::core
