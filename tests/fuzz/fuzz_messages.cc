// The fuzz target of the core's message parsing (Note [Checked peer
// messages] in csrc/core/message.cc): bytes as another process could send
// them go through the parsers and, where they parse, through what the
// coordinator and every rank do with them next (Coordinator::add and its
// responses; checkResponse and the collective layouts). Any input may be
// refused with an hvdlite::Error; none may crash, read out of bounds,
// overflow a signed integer or allocate for a count the bytes do not hold
// (AddressSanitizer and UBSan, tests/fuzz/CMakeLists.txt).
//
// The first byte picks the parser, so one corpus covers all three.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.h"
#include "core/collective_math.h"
#include "core/coordinator.h"
#include "core/message.h"
#include "fuzz_messages.h"

namespace hvdlite::fuzz {
namespace {

using core::Clock;
using hvdlite::OpType;
using core::Request;
using core::Response;

constexpr int kSetSize = 3;

// What every rank does with a response it received: checked, then laid out.
void executeSizes(const Response& r) {
  if (!core::checkResponse(r, kSetSize).empty() || r.error) return;
  (void)r.elementCount();
  for (int rank = 0; rank < kSetSize; ++rank) {
    if (r.op == OpType::kAllgather) (void)core::allgatherLayout(r);
    if (r.op == OpType::kAlltoall) (void)core::alltoallLayout(r, kSetSize, rank);
    if (r.op == OpType::kReducescatter) (void)core::reducescatterLayout(r, kSetSize, rank);
  }
}

// The coordinator's side: each parsed list as sent by the rank it names
// (the checks past the rank tie), and once by rank 1 (the tie itself).
void coordinate(const std::vector<Request>& requests) {
  core::Coordinator coordinator({0, 4, 7});
  const auto now = Clock::now();
  try {
    coordinator.add(1, requests, now);
  } catch (const Error&) {
  }
  for (const auto& request : requests) {
    if (request.rank < 0 || request.rank >= kSetSize) continue;
    try {
      coordinator.add(request.rank, {request}, now);
    } catch (const Error&) {
    }
  }
  auto responses = coordinator.takeReady();
  coordinator.stallReport(now + std::chrono::hours(1), std::chrono::seconds(1));
  coordinator.divergenceReport(now + std::chrono::hours(1), std::chrono::seconds(1));
  auto failed = coordinator.failStalled(now + std::chrono::hours(1), std::chrono::seconds(1));
  responses.insert(responses.end(), failed.begin(), failed.end());
  // What the coordinator built from checked requests must parse and pass
  // every rank's checks: anything else is a bug, not a refusal.
  std::vector<Response> sent;
  try {
    sent = core::parseResponses(core::serializeResponses(responses), nullptr, 0);
  } catch (const Error& e) {
    throw std::logic_error(std::string("the coordinator's responses do not parse: ") + e.what());
  }
  for (const auto& r : sent) {
    const std::string problem = core::checkResponse(r, kSetSize);
    if (!problem.empty()) throw std::logic_error("the coordinator built a response its ranks refuse: " + problem);
    executeSizes(r);
  }
}

}  // namespace

std::vector<std::string> seedMessages() {
  std::vector<std::string> seeds;
  auto add = [&](Kind kind, const std::string& bytes) { seeds.push_back(std::string(1, char(kind)) + bytes); };

  Request allreduce;
  allreduce.rank = 1;
  allreduce.name = "grad/fc1.weight";
  allreduce.shape = {16, 8};
  allreduce.call_site = std::make_shared<const core::CallSite>(core::CallSite{"train.py", 42, "step"});
  Request allgather = allreduce;
  allgather.op = OpType::kAllgather;
  allgather.name = "gather";
  Request alltoall = allreduce;
  alltoall.op = OpType::kAlltoall;
  alltoall.name = "a2a";
  alltoall.splits = {4, 4, 8};
  Request broadcast = allreduce;
  broadcast.op = OpType::kBroadcast;
  broadcast.root_rank = 2;
  Request grouped = allreduce;
  grouped.group = "g";
  grouped.group_size = 2;
  Request join;
  join.rank = 1;
  join.op = OpType::kJoin;
  join.name = core::kJoinName;
  Request add_set;
  add_set.rank = 1;
  add_set.op = OpType::kAddProcessSet;
  add_set.name = "__add_process_set";
  add_set.process_set_ranks = {0, 2};
  core::RankState blocked;
  blocked.blocked = true;
  add(Kind::kRequests, core::serializeRequests({}));
  add(Kind::kRequests, core::serializeRequests({allreduce}));
  add(Kind::kRequests, core::serializeRequests({allreduce, allgather, alltoall, broadcast}, blocked));
  add(Kind::kRequests, core::serializeRequests({grouped, join, add_set}));
  auto other = alltoall;
  other.rank = 0;
  add(Kind::kRequests, core::serializeRequests({alltoall, other}));

  Response gathered;
  gathered.op = OpType::kAllgather;
  gathered.name = "gather";
  gathered.shape = {2, 8};
  gathered.per_rank = {2, 3, 1};
  Response exchanged;
  exchanged.op = OpType::kAlltoall;
  exchanged.name = "a2a";
  exchanged.shape = {6, 2};
  exchanged.per_rank = {1, 2, 3, 3, 2, 1, 0, 0, 6};
  Response scattered;
  scattered.op = OpType::kReducescatter;
  scattered.name = "rs";
  scattered.shape = {7, 3};
  auto details = std::make_shared<core::ErrorDetails>();
  details->tensor_names = {"x"};
  details->ranks = {1, 2};
  details->hosts = {"node1"};
  details->field = "shape";
  details->calls.push_back({1, "x", "allreduce", core::CallSite{"train.py", 7, "f"}, "[2]", true});
  Response failed;
  failed.name = "x";
  failed.error = true;
  failed.error_kind = core::StatusKind::kPrecondition;
  failed.error_message = "mismatched shape";
  failed.error_details = details;
  add(Kind::kResponses, core::serializeResponses({}));
  add(Kind::kResponses, core::serializeResponses({gathered, exchanged, scattered}, "stall: 'x' waits"));
  add(Kind::kResponses, core::serializeResponses({failed}));
  add(Kind::kFailure, core::serializeFailure(core::Status::Error(core::StatusKind::kTransport, "lost", details)));
  add(Kind::kFailure, core::serializeFailure(core::Status::Error(core::StatusKind::kTimeout, "slow")));
  return seeds;
}

int parseOne(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (static_cast<Kind>(data[0] % 3)) {
      case Kind::kRequests: {
        core::RankState state;
        coordinate(core::parseRequests(bytes, &state, 4));
        break;
      }
      case Kind::kResponses:
        for (const auto& r : core::parseResponses(bytes, nullptr, 0)) executeSizes(r);
        break;
      case Kind::kFailure:
        (void)core::parseFailure(bytes);
        break;
    }
    return 1;
  } catch (const Error&) {
    return 0;  // refused, as it should be: a BadPeerMessage or TransportError
  }
}

}  // namespace hvdlite::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hvdlite::fuzz::parseOne(data, size);
  return 0;
}
