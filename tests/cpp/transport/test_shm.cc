// Tests what is particular to csrc/transport/shm/: which sets use shared
// memory, segment cleanup, and failure of a peer. The collective contract
// itself runs over shm through `test_tcp shm`.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "common/reduce.h"
#include "ranks.h"
#include "testing.h"
#include "transport/shm/progress.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_communicator.h"

using namespace hvdlite;
using namespace hvdlite::transport;
using hvdlite::testing::runRanks;

namespace {

int segmentsNamed(const std::string& prefix) {
  int count = 0;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (dirent* entry = readdir(dir)) {
    if (std::string(entry->d_name).rfind(prefix, 0) == 0) ++count;
  }
  closedir(dir);
  return count;
}

}  // namespace

TEST(segments_are_unlinked_once_every_member_mapped_them) {
  // The test rendezvous prefixes are "t<N>/": the job id is "t<N>".
  runRanks(3, [](int rank, Transport& transport) {
    auto comm = transport.communicator({0, 1, 2});
    std::vector<float> data(300000, 1.0f);
    comm->allreduce(data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    CHECK_EQ(data[299999], 3.0f);
    comm->barrier();
  }, "shm");
  CHECK_EQ(segmentsNamed("hvdlite-t"), 0);
}

TEST(stale_segments_of_earlier_rounds_are_removed) {
  auto name = shm::segmentPrefix("stalejob") + "r1-leftover";
  auto left_by_crash = shm::Segment::create(name, 4096);
  auto current = shm::Segment::create(shm::segmentPrefix("stalejob") + "r2-current", 4096);
  CHECK_EQ(segmentsNamed("hvdlite-stalejob-"), 2);
  CHECK_EQ(shm::removeStaleSegments("stalejob", "-r2-"), 1);
  CHECK_EQ(segmentsNamed("hvdlite-stalejob-r1"), 0);
  CHECK_EQ(segmentsNamed("hvdlite-stalejob-r2"), 1);
}

TEST(abort_wakes_a_member_blocked_on_a_peer) {
  CHECK_THROWS(runRanks(2, [](int rank, Transport& transport) {
    auto comm = transport.communicator({0, 1});
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      transport.abort();
      throw TransportError("rank 1 gave up on purpose");
    }
    comm->barrier();  // rank 1 never comes
  }, "shm"), TransportError, "");
}

// A member process that dies is noticed by the one waiting for it.
TEST(a_crashed_member_process_is_reported) {
  auto segment = std::make_shared<shm::Segment>(
      shm::Segment::create(shm::segmentPrefix("crashtest") + "r0-x", shm::ShmCommunicator::segmentBytes(2)));
  shm::Progress(segment->data(), 2, 0).initialize();
  pid_t child = fork();
  if (child == 0) {
    shm::Progress progress(segment->data(), 2, 1);
    progress.join(1);
    _exit(3);  // dies without taking part
  }
  int status = 0;
  waitpid(child, &status, 0);  // reaped, as the launcher would
  auto progress = std::make_shared<shm::Progress>(segment->data(), 2, 0);
  progress->join(0);
  shm::ShmCommunicator comm(segment, progress, {0, 1}, 0);
  CHECK_THROWS(comm.barrier(), TransportError, "rank 0 lost rank 1");
  segment->unlink();
  CHECK_EQ(segmentsNamed("hvdlite-crashtest-"), 0);
}

// A member that dies while the other already sleeps on its counter: nobody
// wakes the sleeper, whose timed-out sleep looks at the peer's process
// (Note [Health checks after a quiet sleep]) well within a second.
TEST(a_member_that_dies_during_a_sleep_is_reported_soon) {
  auto segment = std::make_shared<shm::Segment>(
      shm::Segment::create(shm::segmentPrefix("sleeptest") + "r0-x", shm::ShmCommunicator::segmentBytes(2)));
  shm::Progress(segment->data(), 2, 0).initialize();
  pid_t child = fork();
  if (child == 0) {
    shm::Progress progress(segment->data(), 2, 1);
    progress.join(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(3);  // dies without taking part, while rank 0 sleeps
  }
  auto progress = std::make_shared<shm::Progress>(segment->data(), 2, 0);
  progress->join(0);
  shm::ShmCommunicator comm(segment, progress, {0, 1}, 0);
  auto started = std::chrono::steady_clock::now();
  CHECK_THROWS(comm.barrier(), TransportError, "rank 0 lost rank 1");
  auto waited = std::chrono::steady_clock::now() - started;
  int status = 0;
  waitpid(child, &status, 0);  // not reaped before: rank 0 saw a zombie, as under a launcher that is slow to reap
  CHECK(waited >= std::chrono::milliseconds(250));
  CHECK(waited < std::chrono::milliseconds(1300));
  segment->unlink();
  CHECK_EQ(segmentsNamed("hvdlite-sleeptest-"), 0);
}

TEST(local_sets_use_shared_memory) {
  // All test ranks share a host, so every multi-rank set uses shm; a
  // one-rank set needs no segment at all.
  runRanks(2, [](int rank, Transport& transport) {
    auto alone = transport.communicator({rank});
    CHECK_EQ(alone->size(), 1);
    auto both = transport.communicator({0, 1});
    CHECK(dynamic_cast<shm::ShmCommunicator*>(both.get()) != nullptr);
  }, "shm");
}

// Note [Segment names]: a name someone else took first (the old predictable
// name, or a lucky guess of the random part) is skipped for a fresh one and
// left alone; the job's own segment gets mode 0600.
TEST(names_taken_by_someone_else_are_skipped_not_removed) {
  std::string prefix = shm::segmentPrefix("guessjob") + "r0-";
  shm_unlink((prefix + "guess").c_str());  // an earlier run's, if it failed half-way
  int planted = shm_open((prefix + "guess").c_str(), O_CREAT | O_EXCL | O_RDWR, 0666);
  CHECK(planted >= 0);
  CHECK_EQ(ftruncate(planted, 123), 0);
  std::vector<std::string> parts = {"guess", "fresh"};
  size_t drawn = 0;
  {
    auto segment = shm::Segment::createUnique(prefix, 4096, [&] { return parts.at(drawn++); });
    CHECK_EQ(segment.name(), prefix + "fresh");
    CHECK_EQ(drawn, size_t{2});
    struct stat info {};
    int fd = shm_open(segment.name().c_str(), O_RDONLY, 0);
    CHECK(fd >= 0 && fstat(fd, &info) == 0);
    CHECK_EQ(info.st_mode & 0777, 0600u);
    close(fd);
    struct stat theirs {};
    CHECK(fstat(planted, &theirs) == 0);
    CHECK_EQ(theirs.st_size, 123);  // untouched
  }
  CHECK_EQ(segmentsNamed("hvdlite-guessjob-r0-fresh"), 0);  // ours is gone with the Segment
  CHECK_EQ(segmentsNamed("hvdlite-guessjob-r0-guess"), 1);  // theirs stays
  close(planted);
  shm_unlink((prefix + "guess").c_str());
  // A generator that only ever repeats a taken name fails with a clear error.
  planted = shm_open((prefix + "guess").c_str(), O_CREAT | O_EXCL | O_RDWR, 0666);
  CHECK_THROWS(shm::Segment::createUnique(prefix, 4096, [] { return std::string("guess"); }),
               TransportError, "existed already; someone is creating files under this job's names");
  close(planted);
  shm_unlink((prefix + "guess").c_str());
  CHECK_EQ(segmentsNamed("hvdlite-guessjob-"), 0);
}

// A member maps only a segment of ours with no group or other access.
TEST(a_segment_that_is_not_ours_is_never_mapped) {
  std::string name = shm::segmentPrefix("strangerjob") + "r0-planted";
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  CHECK(fd >= 0);
  CHECK_EQ(ftruncate(fd, 4096), 0);
  CHECK_EQ(fchmod(fd, 0666), 0);
  CHECK_THROWS(shm::Segment::open(name, 4096), TransportError, "with mode 0666, not to this user");
  CHECK_EQ(fchmod(fd, 0600), 0);
  if (geteuid() == 0) {
    CHECK_EQ(fchown(fd, 54321, static_cast<gid_t>(-1)), 0);
    CHECK_THROWS(shm::Segment::open(name, 4096), TransportError, "belongs to uid 54321");
    CHECK_EQ(fchown(fd, 0, static_cast<gid_t>(-1)), 0);
  }
  CHECK_EQ(shm::Segment::open(name, 4096).size(), size_t{4096});  // ours, 0600: fine
  close(fd);
  shm_unlink(name.c_str());
  CHECK_EQ(segmentsNamed("hvdlite-strangerjob-"), 0);
}

namespace {

// How the executor hands a gathered allreduce its staging buffer: a tensor
// reduced in place, one reduced into another output (staged in that output),
// and a fused batch (staged in a fusion buffer of its own).
enum class Staging { kInPlace, kInOutput, kFusionBuffer };

// rank r's element i; exact in float32 and int32 for every op below.
int32_t valueOf(int rank, size_t i) { return static_cast<int32_t>((i * 7 + rank * 3) % 11) - 4 + rank; }

// with_combine: the executor's combine (reduce straight from the input).
template <typename T>
void checkGathered(int size, size_t count, DataType dtype, ReduceOp op, Staging staging, bool with_combine) {
  runRanks(size, [&](int rank, Transport& transport) {
    std::vector<int> members(size);
    for (int r = 0; r < size; ++r) members[r] = r;
    auto comm = transport.communicator(members);
    std::vector<T> input(count), output(count), fusion(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      input[i] = static_cast<T>(valueOf(rank, i));
      T combined = static_cast<T>(valueOf(0, i));
      for (int r = 1; r < size; ++r) {
        T v = static_cast<T>(valueOf(r, i));
        combined = op == ReduceOp::kSum ? combined + v : op == ReduceOp::kMax ? std::max(combined, v)
                                                                             : combined * v;
      }
      want[i] = combined;
    }
    const size_t bytes = count * sizeof(T);
    auto* in = reinterpret_cast<uint8_t*>(input.data());
    uint8_t* out = staging == Staging::kInPlace ? in : reinterpret_cast<uint8_t*>(output.data());
    uint8_t* stage = staging == Staging::kFusionBuffer ? reinterpret_cast<uint8_t*>(fusion.data()) : out;
    std::vector<int> packed(bytes, 0), unpacked(bytes, 0);  // combined bytes count as packed
    size_t copied = 0;  // bytes pack and unpack really moved
    auto pack = [&](uint8_t* dst, size_t begin, size_t end) {
      for (size_t b = begin; b < end; ++b) ++packed[b];
      if (dst != in + begin) std::memcpy(dst, in + begin, end - begin), copied += end - begin;
    };
    auto unpack = [&](const uint8_t* src, size_t begin, size_t end) {
      for (size_t b = begin; b < end; ++b) ++unpacked[b];
      if (src != out + begin) std::memcpy(out + begin, src, end - begin), copied += end - begin;
    };
    Communicator::CombineFn combine;
    if (with_combine) {
      combine = [&](uint8_t* dst, const uint8_t* other, size_t begin, size_t end) {
        for (size_t b = begin; b < end; ++b) ++packed[b];
        reduce3(dst, in + begin, other, (end - begin) / sizeof(T), dtype, op);
      };
    }
    comm->allreduceGathered(count, dtype, op, pack, unpack, stage, combine);
    const T* result = reinterpret_cast<const T*>(out);
    for (size_t i = 0; i < count; ++i) {
      if (result[i] != want[i]) CHECK_EQ(static_cast<double>(result[i]), static_cast<double>(want[i]));
    }
    for (size_t b = 0; b < bytes; ++b) {
      if (packed[b] != 1 || unpacked[b] != 1) CHECK_EQ(packed[b] * 10 + unpacked[b], 11);
    }
    // Note [Reducing from the staging buffer]: in place or combining, a member
    // packs only the others' parts of each split step and unpacks everything.
    if ((staging == Staging::kInPlace || with_combine) && bytes > shm::ShmCommunicator::kSmallBytes &&
        size == 2) {
      CHECK(copied <= bytes + bytes / 2 + 64);
    }
    comm->barrier();
  }, "shm");
}

}  // namespace

// Every staging the executor uses, small and split steps, one step and
// several, 2 and 3 members: the result, each byte packed and unpacked once.
TEST(gathered_allreduce_reduces_from_every_staging) {
  const size_t counts[] = {1000, 5000, 300001, (size_t{3} << 18) + 17};
  for (Staging staging : {Staging::kInPlace, Staging::kInOutput, Staging::kFusionBuffer}) {
    for (bool with_combine : {false, true}) {
      for (size_t count : counts) {
        checkGathered<float>(2, count, DataType::kFloat32, ReduceOp::kSum, staging, with_combine);
        checkGathered<int32_t>(3, count, DataType::kInt32, ReduceOp::kMax, staging, with_combine);
      }
      checkGathered<int32_t>(2, 70000, DataType::kInt32, ReduceOp::kProduct, staging, with_combine);
      checkGathered<float>(3, 70001, DataType::kFloat32, ReduceOp::kSum, staging, with_combine);
    }
  }
}

int main() { return RUN_ALL_TESTS(); }
