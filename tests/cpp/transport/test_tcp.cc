// Tests the collectives of csrc/transport/tcp/ with 1 to 4 ranks as threads.
// Failure handling is in test_tcp_failures.cc. `test_tcp shm` runs the same
// contract over the shared-memory transport (ctest: test_tcp_contract_over_shm),
// and `test_tcp two-level` over fake hosts of 2 ranks each, where 4 ranks
// reduce in two levels (ctest: test_tcp_contract_over_two_levels).
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>

#include "common/errors.h"
#include "ranks.h"
#include "transport/two_level/two_level_communicator.h"
#include "testing.h"

using namespace hvdlite;
using namespace hvdlite::transport;
using namespace hvdlite::transport::two_level;
using hvdlite::testing::runRanks;

namespace {

std::vector<int> everyone(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

// Small integers, so float sums are exact whatever the order of operations.
std::vector<float> rankValues(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(rank + 1 + i % 13);
  return values;
}

void checkSumAllreduce(int size, size_t count) {
  runRanks(size, [&](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(size));
    std::vector<float> data = rankValues(rank, count);
    comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) {
      float expected = static_cast<float>(size * (size + 1) / 2 + size * (i % 13));
      if (data[i] != expected) CHECK_EQ(data[i], expected);
    }
  });
}

}  // namespace

TEST(allreduce_sum_small_and_ring_sizes) {
  for (int size : {2, 3, 4}) {
    for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{70001}, size_t{600000}}) {
      checkSumAllreduce(size, count);
    }
  }
}

// Random floats make the sum depend on the order of operations, so this
// checks that every rank ends with the same bits, not only close values.
TEST(allreduce_results_are_bitwise_identical) {
  for (int size : {3, 4}) {
    for (size_t count : {size_t{777}, size_t{300000}}) {
      std::vector<std::vector<float>> results(size);
      runRanks(size, [&](int rank, Transport& transport) {
        std::mt19937 random(rank * 7919 + 1);
        std::uniform_real_distribution<float> value(-1.0f, 1.0f);
        std::vector<float> data(count);
        for (auto& x : data) x = value(random);
        transport.communicator(everyone(size))->allreduce(data.data(), count, DataType::kFloat32,
                                                          ReduceOp::kSum);
        results[rank] = std::move(data);
      });
      for (int r = 1; r < size; ++r) {
        CHECK(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)) == 0);
      }
    }
  }
}

TEST(allreduce_ops_and_dtypes) {
  runRanks(3, [](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(3));
    std::vector<int32_t> ints = {rank, -rank, 5};
    std::vector<int32_t> maxima = ints, minima = ints;
    comm->allreduce(maxima.data(), 3, DataType::kInt32, ReduceOp::kMax);
    comm->allreduce(minima.data(), 3, DataType::kInt32, ReduceOp::kMin);
    CHECK(maxima == (std::vector<int32_t>{2, 0, 5}));
    CHECK(minima == (std::vector<int32_t>{0, -2, 5}));
    std::vector<double> product(100000, rank + 1.0);  // ring size
    comm->allreduce(product.data(), product.size(), DataType::kFloat64, ReduceOp::kProduct);
    CHECK_EQ(product[0], 6.0);
    CHECK_EQ(product.back(), 6.0);
    std::vector<uint8_t> bits = {static_cast<uint8_t>(0xF0 | rank), 0xFF};
    comm->allreduce(bits.data(), 2, DataType::kUInt8, ReduceOp::kBitAnd);
    CHECK_EQ(int{bits[0]}, 0xF0);
    std::vector<uint16_t> halves(5, 0x3C00);  // float16 1.0
    comm->allreduce(halves.data(), 5, DataType::kFloat16, ReduceOp::kSum);
    CHECK_EQ(halves[4], uint16_t{0x4200});  // 3.0
  });
}

TEST(allreduce_of_nothing_and_of_one_rank) {
  runRanks(2, [](int, Transport& transport) {
    auto comm = transport.communicator(everyone(2));
    comm->allreduce(nullptr, 0, DataType::kFloat32, ReduceOp::kSum);
    float one = 1;
    comm->allreduce(&one, 1, DataType::kFloat32, ReduceOp::kSum);
    CHECK_EQ(one, 2.0f);
  });
  runRanks(1, [](int, Transport& transport) {
    auto comm = transport.communicator({0});
    float x = 4;
    comm->allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
    CHECK_EQ(x, 4.0f);
    CHECK(comm->gather("only", 0) == std::vector<std::string>{"only"});
    CHECK_EQ(transport.hostnames().size(), size_t{1});
  });
}

TEST(allgatherv_with_empty_and_in_place_contributions) {
  std::vector<size_t> sizes = {5, 0, 300000};
  runRanks(3, [&](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(3));
    std::vector<char> mine(sizes[rank], static_cast<char>('a' + rank));
    std::vector<char> out(300005, '?');
    comm->allgatherv(mine.data(), out.data(), sizes);
    CHECK(std::string(out.data(), 5) == "aaaaa");
    CHECK_EQ(out[5], 'c');
    CHECK_EQ(out.back(), 'c');
    // In place: this rank's part is already at its offset.
    std::vector<char> again(300005, '?');
    size_t offset = rank == 0 ? 0 : 5;
    std::memset(again.data() + offset, 'x' + rank, sizes[rank]);
    comm->allgatherv(again.data() + offset, again.data(), sizes);
    CHECK_EQ(again[0], 'x');
    CHECK_EQ(again[299000], 'z');
  });
}

TEST(broadcast_from_every_root_small_and_large) {
  for (int size : {2, 4}) {
    runRanks(size, [&](int rank, Transport& transport) {
      auto comm = transport.communicator(everyone(size));
      for (int root = 0; root < size; ++root) {
        for (size_t bytes : {size_t{10}, size_t{1} << 20}) {
          std::vector<char> data(bytes, rank == root ? static_cast<char>('A' + root) : '-');
          comm->broadcast(data.data(), bytes, root);
          CHECK_EQ(data[0], static_cast<char>('A' + root));
          CHECK_EQ(data[bytes - 1], static_cast<char>('A' + root));
        }
      }
      CHECK_THROWS(comm->broadcast(nullptr, 0, size), InvalidArgument, "root");
    });
  }
}

TEST(alltoallv_pairwise) {
  const int size = 3;
  // rank r sends (r + 1) * (to + 1) * 50000 bytes to each rank, none to the next one.
  auto amount = [](int from, int to) {
    return to == (from + 1) % size ? size_t{0} : size_t((from + 1) * (to + 1) * 50000);
  };
  runRanks(size, [&](int rank, Transport& transport) {
    std::vector<size_t> send(size), recv(size);
    std::string in, expected;
    for (int r = 0; r < size; ++r) {
      send[r] = amount(rank, r);
      recv[r] = amount(r, rank);
      in += std::string(send[r], static_cast<char>('a' + 3 * rank + r));
      expected += std::string(recv[r], static_cast<char>('a' + 3 * r + rank));
    }
    std::string out(expected.size(), '?');
    transport.communicator(everyone(size))->alltoallv(in.data(), send, out.data(), recv);
    CHECK(out == expected);
  });
}

TEST(reducescatter_uneven_counts) {
  std::vector<size_t> counts = {3, 0, 100000};
  runRanks(3, [&](int rank, Transport& transport) {
    std::vector<float> in = rankValues(rank, 100003);
    std::vector<float> out(counts[rank] + 1, -1.0f);
    transport.communicator(everyone(3))->reducescatter(in.data(), out.data(), counts,
                                                       DataType::kFloat32, ReduceOp::kSum);
    size_t offset = rank == 0 ? 0 : 3;
    for (size_t i = 0; i < counts[rank]; ++i) {
      float expected = static_cast<float>(6 + 3 * ((offset + i) % 13));
      if (out[i] != expected) CHECK_EQ(out[i], expected);
    }
    CHECK_EQ(out[counts[rank]], -1.0f);  // nothing written past this rank's block
  });
}

TEST(barrier_gather_and_broadcast_message) {
  runRanks(4, [](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(4));
    for (int i = 0; i < 3; ++i) comm->barrier();
    std::string mine = rank == 2 ? std::string(1 << 20, 'q') : std::string(rank, 'm');
    auto all = comm->gather(mine, 1);
    if (rank == 1) {
      CHECK_EQ(all.size(), size_t{4});
      CHECK(all[0].empty());
      CHECK_EQ(all[2].size(), size_t{1} << 20);
      CHECK(all[3] == "mmm");
    } else {
      CHECK(all.empty());
    }
    std::string message = rank == 3 ? "from three" : "stale";
    comm->broadcastMessage(message, 3);
    CHECK(message == "from three");
    std::string empty = rank == 0 ? "" : "stale";
    comm->broadcastMessage(empty, 0);
    CHECK(empty.empty());
  });
}

// Sets share the mesh's links; disjoint sets can run at the same time.
TEST(process_set_communicators) {
  runRanks(4, [](int rank, Transport& transport) {
    std::vector<int> mine = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    auto pair = transport.communicator(mine);
    CHECK_EQ(pair->size(), 2);
    CHECK_EQ(pair->rank(), rank / 2);
    CHECK_EQ(pair->globalRank(1), mine[1]);
    std::vector<float> data(100000, static_cast<float>(rank));
    pair->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    CHECK_EQ(data[99999], static_cast<float>(mine[0] + mine[1]));
    if (rank < 3) {
      auto three = transport.communicator({0, 1, 2});
      int32_t value = rank;
      three->allreduce(&value, 1, DataType::kInt32, ReduceOp::kSum);
      CHECK_EQ(value, 3);
    }
    auto all = transport.communicator(everyone(4));
    all->barrier();
  });
}

// Note [Checked entry points]: each bad call below is made by one member of
// the set only, and throws InvalidArgument naming the call, the rank and the
// bad value. Had it sent a byte or taken a shared-memory step, the allreduce
// after it would pair up wrongly: wrong sums, or a peer waiting forever.
TEST(bad_calls_throw_before_anything_is_sent) {
  runRanks(3, [](int rank, Transport& transport) {
    auto all = transport.communicator(everyone(3));
    if (rank == 1) return all->barrier();
    auto pair = transport.communicator({0, 2});
    if (rank == 2) {
      const std::string me = "on rank 1 (global rank 2) of a process set of 2: ";
      auto rejects = [&](const std::function<void()>& call, const std::string& call_name,
                         const std::string& why) {
        CHECK_THROWS(call(), InvalidArgument, call_name + " " + me + why);
      };
      std::vector<float> data(8, 1.0f), out(16);
      std::string message = "m";
      rejects([&] { pair->allgatherv(data.data(), out.data(), {32}); }, "allgatherv",
              "bytes_per_rank has 1 entries, but a process set of 2 ranks needs one per rank");
      rejects([&] { pair->alltoallv(data.data(), {4, 4, 4}, out.data(), {4, 4}); }, "alltoallv",
              "send_bytes has 3 entries");
      rejects([&] { pair->alltoallv(data.data(), {4, 4}, out.data(), {4}); }, "alltoallv",
              "recv_bytes has 1 entries");
      rejects([&] { pair->alltoallv(data.data(), {4, 4}, out.data(), {4, 8}); }, "alltoallv",
              "send_bytes[1] = 4 but recv_bytes[1] = 8");
      rejects([&] { pair->reducescatter(data.data(), out.data(), {8}, DataType::kFloat32, ReduceOp::kSum); },
              "reducescatter", "counts has 1 entries");
      rejects([&] { pair->broadcast(data.data(), 32, 2); }, "broadcast",
              "root 2 is not a rank of this process set (ranks 0..1)");
      rejects([&] { pair->broadcast(data.data(), 32, -1); }, "broadcast", "root -1");
      rejects([&] { pair->gather("m", 5); }, "gather", "root 5");
      rejects([&] { pair->broadcastMessage(message, -3); }, "broadcastMessage", "root -3");
      rejects([&] { pair->allreduce(data.data(), 8, DataType::kFloat32, ReduceOp::kAverage); }, "allreduce",
              "reduce op average never reaches a transport");
      rejects([&] { pair->allreduce(data.data(), 8, DataType::kFloat32, ReduceOp::kAdasum); }, "allreduce",
              "reduce op adasum is not implemented by any transport");
      rejects([&] { pair->reducescatter(data.data(), out.data(), {4, 4}, DataType::kFloat32, ReduceOp::kAverage); },
              "reducescatter", "reduce op average");
      rejects(
          [&] {
            auto pack = [](uint8_t*, size_t, size_t) {};
            auto unpack = [](const uint8_t*, size_t, size_t) {};
            pair->allreduceGathered(8, DataType::kFloat32, ReduceOp::kAdasum, pack, unpack,
                                    reinterpret_cast<uint8_t*>(out.data()));
          },
          "allreduce", "reduce op adasum");
      rejects([&] { pair->allreduce(data.data(), 8, static_cast<DataType>(42), ReduceOp::kSum); }, "allreduce",
              "dtype code 42 is not a known dtype");
      rejects([&] { pair->allreduce(data.data(), 8, DataType::kFloat32, static_cast<ReduceOp>(9)); },
              "allreduce", "reduce op code 9");
      rejects([&] { pair->allreduce(nullptr, 8, DataType::kFloat32, ReduceOp::kSum); }, "allreduce",
              "data is null but 32 bytes go through it");
    }
    // Both members' first collective on this communicator: nothing went before.
    std::vector<float> data(200000, static_cast<float>(rank + 1));
    pair->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    CHECK_EQ(data.front(), 4.0f);
    CHECK_EQ(data.back(), 4.0f);
    std::string message = rank == 0 ? "after" : "stale";
    pair->broadcastMessage(message, 0);
    CHECK(message == "after");
    all->barrier();
  });
}

TEST(hostnames_are_published) {
  runRanks(3, [](int, Transport& transport) {
    CHECK_EQ(transport.hostnames().size(), size_t{3});
    CHECK(!transport.hostnames()[2].empty());
    // Threads of one process share a host, unless they pretend otherwise.
    bool fake = hvdlite::testing::ranksPerFakeHost() > 0;
    CHECK((transport.hostnames()[0] == transport.hostnames()[2]) != fake);
  });
}

// Which communicator the contract above ran on: in two-level mode, 4 ranks
// (2 fake hosts of 2) reduce in two levels and 3 ranks (2 + 1) stay flat.
TEST(two_levels_only_where_every_host_holds_several_members) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  runRanks(4, [&](int, Transport& transport) {
    auto comm = transport.communicator(everyone(4));
    CHECK(comm->describe().rfind("two levels", 0) == 0);
    CHECK(comm->describe().find("inside each of 2 hosts") != std::string::npos);
  });
  runRanks(3, [&](int, Transport& transport) {
    CHECK_EQ(transport.communicator(everyone(3))->describe(), std::string("tcp"));
  });
  hvdlite::testing::ScopedAllgatherHierarchy flat_allgather(Hierarchy::kOff);
  runRanks(4, [&](int, Transport& transport) {
    CHECK(transport.communicator(everyone(4))->describe().rfind("two levels: allreduce by", 0) == 0);
  });
}

// HVDLITE_HIERARCHICAL_ALLREDUCE and _ALLGATHER each turn their own collective off.
TEST(two_level_thresholds_follow_each_variable) {
  auto both = TwoLevelThresholds::of(Hierarchy::kAuto, Hierarchy::kAuto);
  CHECK_EQ(both.allreduce, TwoLevelCommunicator::kTwoLevelMinBytes);
  CHECK_EQ(both.allgather, TwoLevelCommunicator::kTwoLevelAllgatherMinBytes);
  auto gather_only = TwoLevelThresholds::of(Hierarchy::kOff, Hierarchy::kOn);
  CHECK(gather_only.any() && gather_only.allreduce == TwoLevelThresholds::kNever);
  CHECK_EQ(TwoLevelThresholds::of(Hierarchy::kOn, Hierarchy::kOff).allgather, TwoLevelThresholds::kNever);
  CHECK(!TwoLevelThresholds::of(Hierarchy::kOff, Hierarchy::kOff).any());
}

// Several chunks (Note [Pipelined two levels]): the network step of one
// chunk overlaps the shared-memory steps of its neighbours. Odd size, so the
// last chunk and its shards are uneven.
TEST(pipelined_two_level_allreduce_of_several_chunks) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  const size_t count = 3 * (TwoLevelCommunicator::kChunkBytes / sizeof(float)) + 12345;
  for (int round = 0; round < 2; ++round) checkSumAllreduce(4, count);
}

// A member that stops during a pipelined allreduce fails every other member
// (its host peer over shared memory, the others over the network) instead of
// leaving one thread of theirs waiting.
TEST(a_member_lost_during_a_pipelined_allreduce_fails_every_member) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  const size_t count = 4 * (TwoLevelCommunicator::kChunkBytes / sizeof(float));
  std::mutex mutex;
  int failed = 0;
  runRanks(4, [&](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(4));
    std::vector<float> data(count, 1.0f);
    if (rank == 3) {
      transport.abort();  // as the runtime does when this rank hits an error
      return;
    }
    try {
      comm->allreduce(data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    } catch (const TransportError&) {
      std::lock_guard<std::mutex> lock(mutex);
      ++failed;
    }
  });
  CHECK_EQ(failed, 3);
}

namespace {

// Rank r's block of an allgather: bytes that say whose they are and where.
std::string blockOf(int rank, size_t bytes) {
  std::string block(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) block[i] = static_cast<char>(rank * 61 + i * 7 + i / 251);
  return block;
}

// Every rank allgathers blocks of the given sizes, out of place and in
// place, and checks the output byte for byte, as the flat ring makes it.
void checkAllgather(Transport& transport, int rank, const std::vector<size_t>& sizes) {
  auto comm = transport.communicator(everyone(static_cast<int>(sizes.size())));
  std::string expected;
  for (size_t r = 0; r < sizes.size(); ++r) expected += blockOf(static_cast<int>(r), sizes[r]);
  std::string mine = blockOf(rank, sizes[rank]);
  std::string out(expected.size(), '?');
  comm->allgatherv(mine.data(), out.data(), sizes);
  CHECK(out == expected);
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += sizes[r];
  std::string again(expected.size(), '?');
  again.replace(offset, mine.size(), mine);
  comm->allgatherv(again.data() + offset, again.data(), sizes);
  CHECK(again == expected);
}

}  // namespace

// Note [Two-level allgather]: 2 x 2 and 3 x 2 fake hosts, blocks even,
// uneven, empty (a host with nothing) and tiny.
TEST(two_level_allgather_of_even_and_uneven_blocks) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  for (int size : {4, 6}) {
    runRanks(size, [&](int rank, Transport& transport) {
      auto described = transport.communicator(everyone(size))->describe();
      CHECK(described.rfind("two levels: allreduce and allgather", 0) == 0);
      std::vector<size_t> even(size, 200001), uneven(size), one_rank(size, 0), small(size, 7);
      for (int r = 0; r < size; ++r) uneven[r] = r == 1 ? 0 : 150001 + 99991 * r;
      one_rank[size - 1] = 300001;  // one rank's block, others empty: a host with nothing
      for (const auto& sizes : {even, uneven, one_rank, small}) checkAllgather(transport, rank, sizes);
    });
  }
}

// Note [Pipelined two levels]: hosts' blocks of several chunks, uneven (host
// 0: 3 chunks, the last short; host 1: 2 chunks, so its slices of chunk 2
// are empty) and even.
TEST(pipelined_two_level_allgather_of_several_chunks) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  const size_t chunk = TwoLevelCommunicator::kChunkBytes;
  runRanks(4, [&](int rank, Transport& transport) {
    checkAllgather(transport, rank, {2 * chunk + 3, 1, 0, chunk + 5});
    checkAllgather(transport, rank, {chunk + 1, chunk + 1, chunk + 1, chunk + 1});
  });
}

// Hosts a, b, b, a: this host's members are not consecutive set ranks (step 1
// gathers into staging) and the two positions see the hosts in opposite
// orders (position 0: a then b; position 1: b then a).
TEST(two_level_allgather_where_ranks_interleave_hosts) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  hvdlite::testing::fakeHosts() = {0, 1, 1, 0};
  try {
    runRanks(4, [&](int rank, Transport& transport) {
      CHECK(transport.communicator(everyone(4))->describe().rfind("two levels", 0) == 0);
      checkAllgather(transport, rank, {300001, 5, 0, 262147});
      checkAllgather(transport, rank, {200000, 200000, 200000, 200000});
      const size_t chunk = TwoLevelCommunicator::kChunkBytes;
      checkAllgather(transport, rank, {chunk + 1, 3, chunk + 7, chunk / 2});  // pipelined
    });
  } catch (...) {
    hvdlite::testing::fakeHosts().clear();
    throw;
  }
  hvdlite::testing::fakeHosts().clear();
}

// The kernel's count of bytes each rank sent to each other rank (TCP_INFO),
// around one allgather of `block` bytes per rank, on the flat ring
// (transport "tcp") or in two levels: what each fake host of 2 ranks sends
// to the others, and the most any rank sent to a rank at another position
// on another host.
struct HostTraffic {
  uint64_t host_out_max = 0;
  uint64_t host_out_min = UINT64_MAX;
  uint64_t off_position_max = 0;
};

HostTraffic allgatherTraffic(int size, size_t block, const std::string& transport_name) {
  std::vector<std::vector<uint64_t>> sent(size, std::vector<uint64_t>(size, 0));
  runRanks(size, [&](int rank, Transport& transport) {
    auto comm = transport.communicator(everyone(size));
    std::vector<size_t> sizes(size, block);
    std::string mine = blockOf(rank, block), out(block * size, '?');
    comm->barrier();
    std::vector<uint64_t> before(size);
    for (int r = 0; r < size; ++r) before[r] = transport.bytesSentTo(r);
    comm->allgatherv(mine.data(), out.data(), sizes);
    comm->barrier();  // every byte of the allgather has arrived, so has left
    for (int r = 0; r < size; ++r) sent[rank][r] = transport.bytesSentTo(r) - before[r];
  }, transport_name);
  HostTraffic traffic;
  for (int host = 0; host < size / 2; ++host) {
    uint64_t out = 0;
    for (int from = 2 * host; from < 2 * host + 2; ++from) {
      for (int to = 0; to < size; ++to) {
        if (to / 2 == host) continue;
        out += sent[from][to];
        if (to % 2 != from % 2) traffic.off_position_max = std::max(traffic.off_position_max, sent[from][to]);
      }
    }
    traffic.host_out_max = std::max(traffic.host_out_max, out);
    traffic.host_out_min = std::min(traffic.host_out_min, out);
  }
  return traffic;
}

// Note [Two-level allgather]'s table, counted: each host sends (N-1)/N of
// the output on the flat ring and (H-1)/H in two levels, the latter only to
// the ranks at the sender's own position. Barriers add a few bytes.
TEST(allgather_across_hosts_sends_what_hosts_lack) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  const uint64_t block = 256 << 10, slack = 4096;
  for (int hosts : {2, 3}) {
    const int size = 2 * hosts;
    const uint64_t total = block * size;
    HostTraffic flat = allgatherTraffic(size, block, "tcp");
    HostTraffic two = allgatherTraffic(size, block, "shm");
    if (flat.host_out_max == 0) {
      std::printf("  (this kernel reports no TCP_INFO byte counts: nothing to compare)\n");
      return;
    }
    std::printf("  allgather of %llu B on %d hosts x 2: each host sends %.3f x that flat, %.3f in two levels\n",
                static_cast<unsigned long long>(total), hosts, double(flat.host_out_max) / total,
                double(two.host_out_max) / total);
    const uint64_t flat_expected = total / size * (size - 1), two_expected = total / hosts * (hosts - 1);
    CHECK(flat.host_out_min >= flat_expected && flat.host_out_max <= flat_expected + slack);
    CHECK(two.host_out_min >= two_expected && two.host_out_max <= two_expected + slack);
    CHECK(two.off_position_max <= slack);
  }
  // HVDLITE_HIERARCHICAL_ALLGATHER=0: the flat ring, across positions.
  HostTraffic off;
  {
    hvdlite::testing::ScopedAllgatherHierarchy flat_allgather(Hierarchy::kOff);
    off = allgatherTraffic(4, block, "shm");
  }
  CHECK(off.off_position_max > slack && off.host_out_max >= block * 3);
}

// A member that stops before an allgather in two levels fails every other
// member: its host peer over shared memory, the others over the network
// once that peer gives up (the other host's position 0 waits for it only);
// in one chunk and pipelined (a failure on the worker thread too).
TEST(a_member_lost_during_a_two_level_allgather_fails_every_member) {
  if (hvdlite::testing::ranksPerFakeHost() == 0) return;
  for (size_t block : {size_t{1} << 20, TwoLevelCommunicator::kChunkBytes + 1}) {
    std::mutex mutex;
    int failed = 0;
    runRanks(4, [&](int rank, Transport& transport) {
      auto comm = transport.communicator(everyone(4));
      std::vector<size_t> sizes(4, block);
      std::string mine = blockOf(rank, block), out(4 * block, '?');
      if (rank == 3) {
        transport.abort();  // as the runtime does when this rank hits an error
        return;
      }
      try {
        comm->allgatherv(mine.data(), out.data(), sizes);
      } catch (const TransportError&) {
        std::lock_guard<std::mutex> lock(mutex);
        ++failed;
      }
    });
    CHECK_EQ(failed, 3);
  }
}

TEST(set_layout_groups_ranks_by_host_and_position) {
  std::vector<std::string> hosts = {"a", "a", "b", "b", "c", "c"};
  auto layout = SetLayout::of({0, 1, 2, 3, 4, 5}, hosts, 3);
  CHECK(layout.local == (std::vector<int>{2, 3}));
  CHECK(layout.cross == (std::vector<int>{1, 3, 5}));
  CHECK(layout.twoLevels());
  CHECK(layout.host == (std::vector<int>{0, 0, 1, 1, 2, 2}));
  auto interleaved = SetLayout::of({0, 1, 2, 3}, {"b", "a", "a", "b"}, 2);
  CHECK(interleaved.host == (std::vector<int>{0, 1, 1, 0}));
  CHECK(interleaved.cross == (std::vector<int>{2, 3}));  // position 1: a's rank 2, b's rank 3
  auto subset = SetLayout::of({0, 2, 3}, hosts, 0);  // a: 1 member, b: 2
  CHECK(!subset.uniform);
  CHECK(!subset.twoLevels());
  auto one_each = SetLayout::of({0, 2, 4}, hosts, 2);
  CHECK(one_each.uniform);
  CHECK(!one_each.twoLevels());
}

int main(int argc, char** argv) {
  hvdlite::testing::useTransportArgument(argc, argv);
  return RUN_ALL_TESTS();
}
