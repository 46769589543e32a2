// Note [Checked peer messages] (core/message.cc): every length, count, rank
// and size another process sends is checked before use, and a bad one fails
// with a BadPeerMessage that names the sender. One test per check, at the
// parser (message.cc), the coordinator (coordinator.cc), on receipt of a
// response (collective_math.cc), in the TCP framing (tcp_communicator.cc),
// and through the controller between real ranks (threads over TCP).
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>

#include "common/checked_math.h"
#include "common/errors.h"
#include "core/collective_math.h"
#include "core/controller.h"
#include "core/coordinator.h"
#include "core/message.h"
#include "testing.h"
#include "transport/ranks.h"
#include "transport/store.h"
#include "transport/tcp/mesh.h"
#include "transport/tcp/tcp_communicator.h"

using namespace hvdlite;
using namespace hvdlite::core;

namespace {

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();

Request request(int rank, OpType op, const std::string& name, std::vector<int64_t> shape) {
  Request r;
  r.rank = rank;
  r.op = op;
  r.name = name;
  r.shape = std::move(shape);
  return r;
}

// Runs `body`, which must throw BadPeerMessage naming global rank `rank`
// with `expected` in its message.
template <typename Body>
void expectBadPeer(Body body, int rank, const std::string& expected) {
  try {
    body();
  } catch (const BadPeerMessage& e) {
    const std::string what = e.what();
    if (what.find(expected) == std::string::npos) {
      throw testing::Failure("message lacks '" + expected + "': " + what);
    }
    CHECK_EQ(e.peerRank(), rank);
    CHECK(what.find("rank " + std::to_string(rank) + " ") != std::string::npos);
    return;
  }
  throw testing::Failure("no BadPeerMessage (expected '" + expected + "')");
}

void putU32(std::string& bytes, size_t at, uint32_t value) { std::memcpy(&bytes[at], &value, sizeof(value)); }

}  // namespace

// --- the parser: structure -------------------------------------------------

TEST(AbsurdRequestCountNamesTheRankAndTheBytes) {
  std::string bytes = serializeRequests({});  // count, then the state byte
  putU32(bytes, 0, 0xffffffffu);
  expectBadPeer([&] { parseRequests(bytes, nullptr, 2); }, 2,
                "rank 2 sent a request list claiming 4294967295 requests in 1 bytes");
}

TEST(AbsurdResponseCountIsRefused) {
  std::string bytes = serializeResponses({});
  putU32(bytes, 0, 0x10000000u);
  expectBadPeer([&] { parseResponses(bytes, nullptr, 0); }, 0, "claiming 268435456 responses");
}

TEST(CountLargerThanTheBytesLeftIsRefusedBeforeAllocating) {
  // One real request, then a shape count claiming more numbers than follow.
  Request r = request(1, OpType::kAllreduce, "x", {2, 3});
  std::string bytes = serializeRequests({r});
  // The shape's count follows the count, rank, 3 enum bytes, the name, root and the two scales.
  const size_t shape_at = 4 + 4 + 3 + (4 + 1) + 4 + 8 + 8;
  uint32_t claimed = 0;
  std::memcpy(&claimed, &bytes[shape_at], sizeof(claimed));
  CHECK_EQ(claimed, 2u);
  putU32(bytes, shape_at, 1000);
  expectBadPeer([&] { parseRequests(bytes, nullptr, 1); }, 1, "claiming 1000 numbers in");
}

TEST(AbsurdCountsInErrorDetailsAreRefused) {
  auto details = std::make_shared<ErrorDetails>();
  details->tensor_names = {"a"};
  Response failed;
  failed.name = "a";
  failed.error = true;
  failed.error_details = details;
  std::string bytes = serializeResponses({failed});
  // The details' tensor-name count sits right after their flag byte, which
  // follows the response's fixed part; find it by its value next to "a".
  const std::string marker = std::string("\x01\x01\x00\x00\x00\x01\x00\x00\x00" "a", 10);
  const size_t at = bytes.find(marker);
  CHECK(at != std::string::npos);
  putU32(bytes, at + 1, 0x7fffffffu);
  expectBadPeer([&] { parseResponses(bytes, nullptr, 0); }, 0, "claiming 2147483647 strings");
}

TEST(EveryTruncationOfAValidMessageIsRefused) {
  Request r = request(1, OpType::kAlltoall, "grad/w", {4, 2});
  r.splits = {1, 3};
  r.group = "g";
  r.group_size = 1;
  r.call_site = std::make_shared<const CallSite>(CallSite{"train.py", 42, "step"});
  const std::string requests = serializeRequests({r, r});
  for (size_t n = 0; n < requests.size(); ++n) {
    expectBadPeer([&] { parseRequests(requests.substr(0, n), nullptr, 1); }, 1, "rank 1 sent a request list");
  }
  Response s;
  s.op = OpType::kAllgather;
  s.shape = {2};
  s.per_rank = {2, 3};
  const std::string responses = serializeResponses({s}, "note");
  for (size_t n = 0; n < responses.size(); ++n) {
    expectBadPeer([&] { parseResponses(responses.substr(0, n), nullptr, 0); }, 0, "rank 0 sent a response list");
  }
  // Cut inside the second request's call site: the count fits, a field does not.
  expectBadPeer([&] { parseRequests(requests.substr(0, requests.size() - 10), nullptr, 3); }, 3, "cut short: ");
}

TEST(TrailingBytesAreRefused) {
  expectBadPeer([&] { parseRequests(serializeRequests({}) + "xyz", nullptr, 1); }, 1, "with 3 bytes after its end");
}

TEST(EnumsOutOfRangeAreRefused) {
  std::string bytes = serializeRequests({request(1, OpType::kAllreduce, "x", {1})});
  bytes[4 + 4] = static_cast<char>(200);  // the op, after the count and the rank
  expectBadPeer([&] { parseRequests(bytes, nullptr, 1); }, 1, "with operation 200 (valid: 0 to 8)");
  bytes = serializeRequests({request(1, OpType::kAllreduce, "x", {1})});
  bytes[4 + 4 + 2] = static_cast<char>(kNumDataTypes);  // the dtype
  expectBadPeer([&] { parseRequests(bytes, nullptr, 1); }, 1, "with dtype 11");
  std::string failure = serializeFailure(Status::Error(StatusKind::kTimeout, "slow"));
  failure[0] = static_cast<char>(kNumStatusKinds);
  CHECK_THROWS(parseFailure(failure), TransportError,
               "a peer sent a failure record with kind " + std::to_string(kNumStatusKinds) + " (valid: 0 to " +
                   std::to_string(kNumStatusKinds - 1) + ")");
}

// --- the coordinator: meaning ----------------------------------------------

TEST(ARequestClaimingAnotherRankIsRefusedNamingTheSender) {
  Coordinator c({0, 5, 9});
  // Set rank 1 (global 5) sends a request that says it is set rank 0.
  expectBadPeer([&] { c.add(1, {request(0, OpType::kAllreduce, "x", {2})}, Clock::now()); }, 5,
                "rank 5 sent an allreduce of 'x' claiming to come from rank 0 of the process set, on the "
                "connection of its rank 1");
  // Nothing of it was taken: the honest ranks' requests alone are not ready.
  c.add(0, {request(0, OpType::kAllreduce, "x", {2})}, Clock::now());
  c.add(2, {request(2, OpType::kAllreduce, "x", {2})}, Clock::now());
  CHECK(c.takeReady().empty());
  c.add(1, {request(1, OpType::kAllreduce, "x", {2})}, Clock::now());
  CHECK_EQ(c.takeReady().size(), size_t{1});
}

TEST(AnOutOfRangeJoinRankIsRefused) {
  Coordinator c({0, 1, 2});
  for (int claimed : {7, -1, 3}) {
    expectBadPeer([&] { c.add(1, {request(claimed, OpType::kJoin, kJoinName, {})}, Clock::now()); }, 1,
                  "claiming to come from rank " + std::to_string(claimed));
  }
  CHECK(!c.anyJoined());
  // A whole list is refused if one request in it is bad: the good join before it is not taken.
  expectBadPeer([&] {
    c.add(1, {request(1, OpType::kJoin, kJoinName, {}), request(9, OpType::kJoin, kJoinName, {})}, Clock::now());
  }, 1, "rank 9");
  CHECK(!c.anyJoined());
}

TEST(OverflowingShapesAreRefused) {
  Coordinator c({0, 1});
  // 2^62 * 4 elements overflows; so does 2^61 float32 elements' bytes.
  expectBadPeer([&] { c.add(1, {request(1, OpType::kAllreduce, "x", {kHuge / 2, 4})}, Clock::now()); }, 1,
                "of shape [4611686018427387903, 4]: a negative dimension, or more bytes than fit in 64 bits");
  expectBadPeer([&] { c.add(1, {request(1, OpType::kAllreduce, "x", {int64_t{1} << 61})}, Clock::now()); }, 1,
                "more bytes than fit in 64 bits");
  expectBadPeer([&] { c.add(1, {request(1, OpType::kAllgather, "x", {3, -2})}, Clock::now()); }, 1,
                "a negative dimension");
  expectBadPeer([&] { c.add(1, {request(1, OpType::kAllgather, "x", {})}, Clock::now()); }, 1,
                "an allgather of 'x' of a scalar");
}

TEST(AlltoallSplitsAreChecked) {
  Coordinator c({0, 1, 2});
  Request r = request(2, OpType::kAlltoall, "a", {4, 2});
  r.splits = {1, 3};
  expectBadPeer([&] { c.add(2, {r}, Clock::now()); }, 2, "with 2 splits for a set of 3 ranks");
  r.splits = {1, 1, 1};
  expectBadPeer([&] { c.add(2, {r}, Clock::now()); }, 2, "whose splits [1, 1, 1] do not add up to its first dimension, 4");
  r.splits = {kHuge, kHuge, 6};  // wraps around to 4 without the check
  expectBadPeer([&] { c.add(2, {r}, Clock::now()); }, 2, "do not add up");
  r.splits = {5, -1, 0};
  expectBadPeer([&] { c.add(2, {r}, Clock::now()); }, 2, "do not add up");
  r.splits = {1, 1, 2};
  c.add(2, {r}, Clock::now());  // a good one is taken
}

TEST(RootsGroupsAndProcessSetRanksAreChecked) {
  Coordinator c({0, 1, 2});
  Request b = request(1, OpType::kBroadcast, "b", {2});
  b.root_rank = 3;
  expectBadPeer([&] { c.add(1, {b}, Clock::now()); }, 1, "from root rank 3 of a set of 3 ranks");
  Request g = request(1, OpType::kAllreduce, "g", {2});
  g.group = "grp";
  g.group_size = 0;
  expectBadPeer([&] { c.add(1, {g}, Clock::now()); }, 1, "in group 'grp' of 0 members");
  Request add = request(1, OpType::kAddProcessSet, "__add_process_set", {});
  add.process_set_ranks = {0, 3};
  expectBadPeer([&] { c.add(1, {add}, Clock::now()); }, 1, "naming rank 3 in a job of 3 ranks");
  Request d = request(1, OpType::kAllreduce, "d", {2});
  d.device = -7;
  expectBadPeer([&] { c.add(1, {d}, Clock::now()); }, 1, "on device -7");
  Request remove = request(1, OpType::kRemoveProcessSet, "__remove_process_set", {});
  remove.process_set_id = 0;
  expectBadPeer([&] { c.add(1, {remove}, Clock::now()); }, 1, "a remove_process_set of '__remove_process_set' of process set 0");
}

// --- responses, on every rank ----------------------------------------------

TEST(ResponsesWithOverflowingPerRankSizesAreRefused) {
  Response r;
  r.op = OpType::kAllgather;
  r.name = "g";
  r.dtype = DataType::kFloat32;
  r.shape = {1, 16};
  r.per_rank = {1, 2};
  CHECK(checkResponse(r, 2).empty());
  CHECK_EQ(allgatherLayout(r).total, size_t{3 * 64});
  r.per_rank = {kHuge / 64, 1};  // rows fit, their bytes do not
  CHECK(checkResponse(r, 2).find("more bytes in all than fit in 64 bits") != std::string::npos);
  r.per_rank = {kHuge, 1};  // the rows' sum overflows
  CHECK(!checkResponse(r, 2).empty());
  r.per_rank = {3, -1};
  CHECK(checkResponse(r, 2).find("a negative size") != std::string::npos);
  r.per_rank = {1, 2, 3};
  CHECK(checkResponse(r, 2).find("with 3 per-rank sizes for a set of 2 ranks (expected 2)") != std::string::npos);
  r.op = OpType::kAlltoall;
  r.per_rank = {1, 2, 3};
  CHECK(checkResponse(r, 2).find("expected 4") != std::string::npos);
  r.per_rank = {1, 2, 3, kHuge / 8};
  CHECK(!checkResponse(r, 2).empty());
  r.per_rank = {1, 2, 3, 4};
  CHECK(checkResponse(r, 2).empty());
  CHECK_EQ(alltoallLayout(r, 2, 1).recv[0], size_t{2 * 64});
  Response s;
  s.op = OpType::kReducescatter;
  s.name = "rs";
  s.shape = {kHuge / 2, 3};
  CHECK(checkResponse(s, 2).find("more bytes than fit in 64 bits") != std::string::npos);
  s.op = OpType::kBroadcast;
  s.shape = {2};
  s.root_rank = 2;
  CHECK(checkResponse(s, 2).find("from root rank 2 of a set of 2 ranks") != std::string::npos);
  Response remove;
  remove.op = OpType::kRemoveProcessSet;
  remove.process_set_id = 0;
  CHECK(checkResponse(remove, 2).find("of process set 0") != std::string::npos);
  s.error = true;  // an error response carries no sizes to execute
  CHECK(checkResponse(s, 2).empty());
}

TEST(AResponseThatDoesNotFitThisRanksEntryIsRefused) {
  Response r;
  r.op = OpType::kAllreduce;
  r.name = "x";
  r.shape = {1000000};
  CHECK(checkAgainstEntry(r, {4}, DataType::kFloat32, 2, 1)
            .find("allreduce of 'x' that has this rank send shape [1000000], but it submitted [4]") != std::string::npos);
  r.shape = {4};
  CHECK(checkAgainstEntry(r, {4}, DataType::kFloat32, 2, 1).empty());
  CHECK(checkAgainstEntry(r, {4}, DataType::kFloat64, 2, 1).find("as float32, but this rank submitted float64") !=
        std::string::npos);
  r.op = OpType::kAllgather;
  r.shape = {2, 3};
  r.per_rank = {2, 5};
  CHECK(checkAgainstEntry(r, {5, 3}, DataType::kFloat32, 2, 1).empty());
  CHECK(!checkAgainstEntry(r, {4, 3}, DataType::kFloat32, 2, 1).empty());
  CHECK(!checkAgainstEntry(r, {5, 4}, DataType::kFloat32, 2, 1).empty());
  r.op = OpType::kAlltoall;
  r.per_rank = {1, 1, 3, 2};  // rank 1 sends 3 + 2 rows
  CHECK(checkAgainstEntry(r, {5, 3}, DataType::kFloat32, 2, 1).empty());
  CHECK(checkAgainstEntry(r, {2, 3}, DataType::kFloat32, 2, 1).find("send shape [5, 3], but it submitted [2, 3]") !=
        std::string::npos);
  r.op = OpType::kBarrier;  // moves no tensor
  CHECK(checkAgainstEntry(r, {}, DataType::kFloat32, 2, 1).empty());
}

TEST(CheckedMathCatchesOverflow) {
  CHECK(!checkedMul<int64_t>(kHuge, 2));
  CHECK(!checkedAdd<int64_t>(kHuge, 1));
  CHECK_EQ(*checkedMul<size_t>(3, 4), size_t{12});
  CHECK_EQ(*checkedProduct({2, 3, 4}), int64_t{24});
  CHECK_EQ(*checkedProduct({2, 3, 4}, 1, 2), int64_t{24});
  CHECK(!checkedProduct({2, -3}));
  CHECK(!checkedProduct({int64_t{1} << 32, int64_t{1} << 32}));
  CHECK(!checkedSum({kHuge, 1}));
  CHECK(!checkedSum({1, -1}));
  CHECK_EQ(*checkedSum({}), int64_t{0});
}

// --- between real ranks ----------------------------------------------------

// A frame header claiming a terabyte is refused before anything is
// allocated for it (TcpCommunicator::kMaxMessageBytes).
TEST(AnAbsurdFrameLengthIsRefused) {
  transport::InMemoryStore store;
  std::string failure;
  auto body = [&](int rank) {
    transport::tcp::Mesh mesh(testing::rankOptions(rank, 2, "frame/"), store);
    transport::tcp::TcpCommunicator comm(mesh, {0, 1});
    if (rank == 1) {
      // A gather's frame: 8 bytes of length, big-endian, then the bytes.
      const unsigned char header[8] = {0, 0, 1, 0, 0, 0, 0, 0};  // 2^40
      mesh.link(0).send(header, sizeof(header));
      return;
    }
    try {
      comm.gather("mine", 0);
    } catch (const BadPeerMessage& e) {
      CHECK_EQ(e.peerRank(), 1);
      failure = e.what();
    }
  };
  std::thread other([&] { body(1); });
  body(0);
  other.join();
  CHECK(failure.find("rank 1 sent a negotiation message claiming 1099511627776 bytes, more than 1073741824") !=
        std::string::npos);
}

namespace {

// Rank 0 coordinates; rank 1 corrupts its requests as `how` says (Note
// [Corrupt requests for tests] in controller.cc). Returns rank 0's failure.
std::string negotiateWithCorruptRank(const std::string& how, int size) {
  std::string failure;
  std::atomic<bool> stopped{false};
  try {
    testing::runRanks(size, [&](int rank, transport::Transport& transport) {
      std::vector<int> ranks;
      for (int r = 0; r < size; ++r) ranks.push_back(r);
      auto comm = transport.communicator(ranks);
      ControllerOptions options;
      options.test_corrupt_requests = rank == 1 ? how : "";
      Timeline timeline(rank);
      Controller controller(0, *comm, options, timeline);
      TensorQueue queue;
      auto entry = std::make_unique<TensorEntry>();
      entry->name = "grad";
      entry->shape = {4};
      queue.add(std::move(entry), rank);
      try {
        controller.negotiate(queue, false);
      } catch (const BadPeerMessage& e) {
        if (rank == 0) failure = e.what();
        transport.abort();  // as the runtime's fatal path does: the others see a lost peer
        throw;
      }
    }, "tcp");
  } catch (const std::exception&) {
    stopped = true;
  }
  CHECK(stopped);
  return failure;
}

}  // namespace

TEST(TheCoordinatorTiesRequestsToTheirConnection) {
  auto failure = negotiateWithCorruptRank("rank", 3);
  CHECK(failure.find("rank 1 sent an allreduce of 'grad' claiming to come from rank 2 of the process set, on the "
                     "connection of its rank 1") != std::string::npos);
}

TEST(ACorruptCountFailsTheJobNamingTheRank) {
  auto failure = negotiateWithCorruptRank("count", 2);
  CHECK(failure.find("rank 1 sent a request list claiming 4294967295 requests in ") != std::string::npos);
}

int main() { return RUN_ALL_TESTS(); }
