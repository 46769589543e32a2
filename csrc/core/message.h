// Negotiation messages: a Request says "this rank has tensor X ready with these
// parameters"; a Response, decided by the process set's coordinator, says
// "every rank has X, execute it like this" (or "X failed, here is why").
// Both serialise to a compact binary form for the coordinator round trip.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"
#include "core/call_site.h"
#include "core/status.h"

namespace hvdlite::core {

// Every rank's join is one operation: the coordinator answers it under this
// name, and a join enqueued under any other is renamed to it (entry
// validation), else no answer would ever match it.
inline constexpr char kJoinName[] = "__join";

struct Request {
  int32_t rank = 0;  // rank within the process set
  OpType op = OpType::kAllreduce;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  std::string name;
  int32_t root_rank = 0;  // broadcast, in process-set ranks
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: first-dimension rows sent to each rank
  int32_t device = -1;          // -1 = CPU
  std::string group;            // grouped allreduce: the group's name, "" if none
  int32_t group_size = 0;
  std::vector<int64_t> process_set_ranks;  // add_process_set: the new set's global ranks
  int32_t process_set_id = -1;             // remove_process_set: the set to remove
  // Where this rank called it (Note [Call sites]), and how long it had
  // waited when this request was sent (a request sent in full after waiting
  // as cache bits: Note [Demoting to find divergence] in controller.cc).
  std::shared_ptr<const CallSite> call_site;  // null: unknown (no string to copy per request)
  uint32_t waited_ms = 0;

  // Same parameters (everything but rank, call site and wait). Used for the
  // response cache: a name called from another line is still a hit.
  bool sameParameters(const Request& other) const;
};

// What a rank says about itself with its requests in each round trip.
struct RankState {
  // Some thread of the rank is blocked until a collective completes
  // (synchronize(), a blocking collective, join(), barrier(), a TF or JAX
  // op): the rank submits nothing more until one does (Note [Divergence] in
  // coordinator.cc).
  bool blocked = false;
};

struct Response {
  OpType op = OpType::kAllreduce;
  bool error = false;
  StatusKind error_kind = StatusKind::kCollective;  // with error: what the ranks' callbacks get
  std::string error_message;
  std::string name;
  ReduceOp reduce_op = ReduceOp::kSum;
  DataType dtype = DataType::kFloat32;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  // The agreed shape. For allgather, first dimension of rank 0 (see per_rank).
  std::vector<int64_t> shape;
  // allgather: every rank's first dimension. alltoall: the size x size matrix of
  // splits, row r = what rank r sends to each rank.
  std::vector<int64_t> per_rank;
  int32_t device = -1;
  // What an Average divides by: the process set's size, joined ranks
  // included (they contribute zeros), as in Horovod; or, with
  // HVDLITE_JOIN_AVERAGE_ACTIVE, the ranks that had not joined.
  int32_t average_ranks = 0;
  // join: the last rank to join.
  int32_t value = 0;
  std::string group;
  int32_t group_size = 0;
  std::vector<int64_t> process_set_ranks;  // add_process_set: the new set's global ranks
  int32_t process_set_id = -1;             // remove_process_set: the set to remove
  // With error: what a program can read besides the message (null: nothing).
  std::shared_ptr<const ErrorDetails> error_details;
  // Never sent or cached: set by this rank's controller on a cycle's outcome
  // when the cycle's exchange gathered every rank's data and reduced it
  // (Note [One exchange for a cached small allreduce] in cached_exchange.cc),
  // before the average and postscale; the executor then only unpacks it.
  std::vector<uint8_t> reduced_in_negotiation;

  // Product of shape (allreduce/broadcast/reducescatter); a shape that
  // passed checkResponse has one.
  int64_t elementCount() const;
};

// The parsers take bytes from another process (Note [Checked peer messages]
// in message.cc): `sender` is the global rank they came from, named by the
// BadPeerMessage a malformed message throws (-1: unknown; a TransportError).
// They check the message's structure (counts against the bytes left, enum
// ranges, no trailing bytes); what the fields mean is checked by
// Coordinator::add (requests) and checkResponse (responses).
std::string serializeRequests(const std::vector<Request>& requests, const RankState& state = {});
std::vector<Request> parseRequests(const std::string& bytes, RankState* state = nullptr, int sender = -1);
// `note`: text the coordinator sends every rank with the responses (the stall
// report, Note [Stall reports on every rank] in controller.cc).
std::string serializeResponses(const std::vector<Response>& responses, const std::string& note = {});
std::vector<Response> parseResponses(const std::string& bytes, std::string* note = nullptr, int sender = -1);

// A failure as one string, for the store's record of the first failure
// (Runtime::recordFailure), so that every rank reports its kind and details.
std::string serializeFailure(const Status& failure);
Status parseFailure(const std::string& bytes);

std::string shapeString(const std::vector<int64_t>& shape);  // "[2, 3]"

// Note [Checked peer messages] in message.cc. The error for a message that
// failed a check: "rank <sender> <sent>", then why the job stops and what to
// check. `sender`: a global rank, or -1 when unknown (a TransportError then).
[[noreturn]] void throwBadPeerMessage(int sender, const std::string& sent);

}  // namespace hvdlite::core
