// Negotiation for one process set: each cycle, decide with the other members
// which tensors are ready on every rank, and in which order to execute them.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cached_exchange.h"
#include "core/coordinator.h"
#include "core/message.h"
#include "core/node_pool.h"
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
};

class Controller {
 public:
  Controller(int32_t process_set_id, transport::Communicator& comm, const ControllerOptions& options,
             Timeline& timeline);

  // One cycle. Blocks until every member has run the same cycle. Throws
  // TransportError if a member is lost. `parameters` (rank 0 only; others'
  // are ignored): opaque bytes every member receives in this cycle's outcome,
  // so that all of them apply a change at the same point (autotune).
  // `now`: the cycle's time (Note [One clock reading a cycle] in runtime_cycles.cc).
  // The outcome is the controller's own, valid until the next call.
  CycleOutcome& negotiate(TensorQueue& queue, bool want_shutdown,
                          const std::string& parameters = std::string(), Clock::time_point now = Clock::now());

  // Requests this rank is still waiting on (for error messages at shutdown).
  size_t pendingCount() const { return pending_.size(); }

 private:
  struct PendingRequest {
    Request request;  // without its call site, which only a full request carries
    bool sent_full = false;  // sent to the coordinator rather than via cache bits
    Clock::time_point since;
    const CallSite* call_site = nullptr;  // the entry's (Note [Call sites])
    // Its data, when small enough to ride the cache bits' exchange (Note
    // [One exchange for a cached small allreduce] in cached_exchange.cc).
    CarriedData carried;
  };
  // The cache hits collectBits set: how many, and the last one's request and slot.
  struct Hits {
    size_t count = 0;
    const PendingRequest* last = nullptr;
    size_t last_slot = 0;
  };
  struct Exchange;  // the bit vector of one cycle, see Note [Cache bits]
  // Hashed by name (Note [Pending requests hashed] in controller.cc).
  using PendingMap = std::unordered_map<std::string, PendingRequest>;

  void admit(TensorQueue& queue, Clock::time_point now);
  // Sets every field of `pending` from `entry`, reusing the buffers a kept
  // node brought (Note [Map nodes kept for reuse]).
  void describe(PendingRequest& pending, const TensorEntry& entry, Clock::time_point now) const;
  // Removes a request that got its response (keeping its node: pending_nodes_).
  void retire(PendingMap::iterator it);
  std::vector<Request> collectBits(Exchange& bits, bool any_joined, Clock::time_point now, Hits& hits);
  // Note [One exchange for a cached small allreduce]: this rank's lane, and
  // after the exchange, the lone cached response's data reduced from all lanes.
  void carry(Exchange& bits, const std::vector<Request>& mine, const Hits& hits);
  void reduceCarried(const Exchange& bits, Response& response) const;
  // The cached responses ready on every rank, into `out` (replacing what it held).
  void takeCached(const Exchange& bits, std::vector<Response>& out);
  // Slot `slot`'s response into place n of `out` (Note [Cached responses copied once]).
  void putCached(std::vector<Response>& out, size_t n, size_t slot);
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
  PendingMap pending_;
  CycleOutcome outcome_;  // negotiate()'s, valid until its next call
  // For each of outcome_.responses, the cache stamp it was copied under; 0:
  // not a cached response's copy (Note [Cached responses copied once]).
  std::vector<uint64_t> outcome_stamps_;
  // Nodes of retired requests, for the next admitted (Note [Map nodes kept for reuse]).
  NodePool<PendingMap> pending_nodes_;
  std::vector<const TensorEntry*> admitted_;  // admit()'s, kept for its capacity
  std::vector<uint64_t> exchange_words_;      // each cycle's Exchange, likewise
  size_t lane_words_ = 0;                     // ExchangeLanes::wordsFor the set, 0 without a cache
  std::set<size_t> invalidate_next_;  // coordinator: slots to drop next cycle
  bool joined_ = false;               // this rank called join() and it has not completed
  bool any_joined_ = false;           // as of the last cycle
  Clock::time_point last_coordinator_check_{};
};

}  // namespace hvdlite::core
