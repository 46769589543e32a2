#include "transport/mpi/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <numeric>
#include <thread>

#include "common/errors.h"
#include "common/prefix_sum.h"
#include "transport/mpi/mpi_library.h"

namespace hvdlite::transport::mpi {
namespace {

// Note [Large MPI counts]
// MPI-3 counts and displacements are ints. Element-wise calls (allreduce,
// broadcast) go in pieces of kMaxPiece; calls whose layout spans ranks
// (allgatherv, alltoallv, reducescatter) use the one-call form when every
// count and offset fits, and otherwise a slower sequence of pieces that
// does (broadcasts from each rank, pairwise exchanges, one full allreduce).
constexpr size_t kMaxPiece = size_t{1} << 30;

// fn(first, n) for each piece [first, first + n) of at most `piece` of
// [0, count): the split of Note [Large MPI counts], written once.
template <typename Fn>
void inPieces(size_t count, size_t piece, Fn&& fn) {
  for (size_t first = 0; first < count; first += piece) {
    fn(first, static_cast<int>(std::min(piece, count - first)));
  }
}

// Note [Waiting in MPI]
// Collectives on data run as MPI's blocking calls: peers arrive together
// (negotiation made sure every rank is ready), MPI's tuned algorithms give
// the bandwidth, and Open MPI yields the core between polls (mpi_library.cc).
// Negotiation is different: a rank waits there for peers that are still
// computing their gradients, possibly for a whole training step. So its
// calls are non-blocking and waited on like the shm transport's steps: spin
// briefly, then yield the core, then nap, so an idle background thread does
// not take a core from the framework's compute threads.
constexpr auto kSpinFor = std::chrono::microseconds(20);
constexpr auto kYieldFor = std::chrono::microseconds(200);
constexpr auto kNap = std::chrono::microseconds(50);

bool fitsInt(size_t value) { return value <= static_cast<size_t>(INT_MAX); }

// MPI's int counts or displacements, for values that all fit.
std::vector<int> mpiInts(const std::vector<size_t>& values) {
  return std::vector<int>(values.begin(), values.end());
}

// Tag of the pairwise exchange's messages (collectives on the same
// communicator never match point-to-point messages).
constexpr int kExchangeTag = 7301;

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::vector<int> global_ranks)
    : comm_(comm), ranks_(std::move(global_ranks)) {
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  int size = 0;
  check(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
  HVD_CHECK(size == static_cast<int>(ranks_.size()), "MPI communicator of ", size,
            " ranks for a process set of ", ranks_.size());
}

MpiCommunicator::~MpiCommunicator() {
  if (!mpiFinalized()) MPI_Comm_free(&comm_);
}

void MpiCommunicator::waitPatiently(MPI_Request& request, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  int done = 0;
  while (true) {
    check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    auto waited = std::chrono::steady_clock::now() - start;
    if (waited < kSpinFor) continue;
    if (waited < kYieldFor) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
}

void MpiCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  if (count == 0 || size() == 1) return;
  MPI_Datatype type = mpiDatatype(dtype);
  MPI_Op mpi_op = ops_.get(dtype, op);
  const size_t esize = dtypeSize(dtype);
  // kBitAnd is negotiation's cache-bit exchange (communicator.h), small.
  if (op == ReduceOp::kBitAnd && fitsInt(count)) {
    MPI_Request request;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), type, mpi_op, comm_,
                         &request),
          "MPI_Iallreduce");
    waitPatiently(request, "MPI_Iallreduce");
    return;
  }
  char* bytes = static_cast<char*>(data);
  inPieces(count, kMaxPiece / esize, [&](size_t first, int n) {
    check(MPI_Allreduce(MPI_IN_PLACE, bytes + first * esize, n, type, mpi_op, comm_), "MPI_Allreduce");
  });
}

void MpiCommunicator::doAllgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytes_per_rank) {
  std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  const size_t total = offsets.back() + bytes_per_rank.back();
  char* base = static_cast<char*>(out);
  char* mine = base + offsets[rank_];
  if (in != mine && bytes_per_rank[rank_] > 0) std::memcpy(mine, in, bytes_per_rank[rank_]);
  if (size() == 1 || total == 0) return;
  if (fitsInt(total)) {
    std::vector<int> counts = mpiInts(bytes_per_rank), displs = mpiInts(offsets);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_BYTE, base, counts.data(), displs.data(), MPI_BYTE,
                         comm_),
          "MPI_Allgatherv");
    return;
  }
  for (int r = 0; r < size(); ++r) {
    inPieces(bytes_per_rank[r], kMaxPiece, [&](size_t first, int n) {
      check(MPI_Bcast(base + offsets[r] + first, n, MPI_BYTE, r, comm_), "MPI_Bcast (allgatherv)");
    });
  }
}

void MpiCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  if (size() == 1) return;
  char* p = static_cast<char*>(data);
  inPieces(bytes, kMaxPiece, [&](size_t first, int n) {
    check(MPI_Bcast(p + first, n, MPI_BYTE, root, comm_), "MPI_Bcast");
  });
}

void MpiCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                  const std::vector<size_t>& recv_bytes) {
  const size_t send_total = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t{0});
  const size_t recv_total = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0});
  if (!fitsInt(send_total) || !fitsInt(recv_total)) {
    pairwiseExchange(static_cast<const char*>(in), send_bytes, static_cast<char*>(out), recv_bytes);
    return;
  }
  std::vector<int> scounts = mpiInts(send_bytes), sdispls = mpiInts(exclusivePrefixSum(send_bytes));
  std::vector<int> rcounts = mpiInts(recv_bytes), rdispls = mpiInts(exclusivePrefixSum(recv_bytes));
  check(MPI_Alltoallv(in, scounts.data(), sdispls.data(), MPI_BYTE, out, rcounts.data(),
                      rdispls.data(), MPI_BYTE, comm_),
        "MPI_Alltoallv");
}

// Step k sends to rank+k and receives from rank-k, each in pieces MPI can
// count; both sides know every pair's size from the negotiation.
void MpiCommunicator::pairwiseExchange(const char* in, const std::vector<size_t>& send_bytes,
                                       char* out, const std::vector<size_t>& recv_bytes) {
  std::vector<size_t> send_at = exclusivePrefixSum(send_bytes);
  std::vector<size_t> recv_at = exclusivePrefixSum(recv_bytes);
  std::memcpy(out + recv_at[rank_], in + send_at[rank_], send_bytes[rank_]);
  for (int k = 1; k < size(); ++k) {
    int to = (rank_ + k) % size(), from = (rank_ + size() - k) % size();
    std::vector<MPI_Request> requests;
    inPieces(recv_bytes[from], kMaxPiece, [&](size_t first, int n) {
      requests.emplace_back();
      check(MPI_Irecv(out + recv_at[from] + first, n, MPI_BYTE, from, kExchangeTag, comm_, &requests.back()),
            "MPI_Irecv (alltoallv)");
    });
    inPieces(send_bytes[to], kMaxPiece, [&](size_t first, int n) {
      requests.emplace_back();
      check(MPI_Isend(in + send_at[to] + first, n, MPI_BYTE, to, kExchangeTag, comm_, &requests.back()),
            "MPI_Isend (alltoallv)");
    });
    check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall (alltoallv)");
  }
}

void MpiCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                      DataType dtype, ReduceOp op) {
  const size_t esize = dtypeSize(dtype);
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t offset = exclusivePrefixSum(counts)[rank_];
  if (size() == 1 || total == 0) {
    std::memcpy(out, static_cast<const char*>(in) + offset * esize, counts[rank_] * esize);
    return;
  }
  if (fitsInt(total)) {
    std::vector<int> recv_counts = mpiInts(counts);
    check(MPI_Reduce_scatter(in, out, recv_counts.data(), mpiDatatype(dtype), ops_.get(dtype, op),
                             comm_),
          "MPI_Reduce_scatter");
    return;
  }
  work_.resize(total * esize);
  std::memcpy(work_.data(), in, total * esize);
  doAllreduce(work_.data(), total, dtype, op);
  std::memcpy(out, work_.data() + offset * esize, counts[rank_] * esize);
}

void MpiCommunicator::doBarrier() {
  MPI_Request request;
  check(MPI_Ibarrier(comm_, &request), "MPI_Ibarrier");
  waitPatiently(request, "MPI_Ibarrier");
}

std::vector<std::string> MpiCommunicator::doGather(const std::string& mine, int root) {
  HVD_CHECK(fitsInt(mine.size()), "negotiation message of ", mine.size(), " bytes");
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank_ == root ? size() : 0);
  MPI_Request request;
  check(MPI_Igather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm_, &request),
        "MPI_Igather");
  waitPatiently(request, "MPI_Igather");
  std::vector<int> displs(lengths.size(), 0);
  std::vector<char> all;
  if (rank_ == root) {
    size_t total = 0;
    for (int r = 0; r < size(); ++r) {
      HVD_CHECK(lengths[r] >= 0, "negotiation message of ", lengths[r], " bytes from rank ", globalRank(r));
      displs[r] = static_cast<int>(total);
      total += static_cast<size_t>(lengths[r]);
    }
    HVD_CHECK(fitsInt(total), "negotiation messages of ", total, " bytes");
    all.resize(std::max<size_t>(total, 1));
  }
  check(MPI_Igatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), displs.data(),
                     MPI_BYTE, root, comm_, &request),
        "MPI_Igatherv");
  waitPatiently(request, "MPI_Igatherv");
  std::vector<std::string> out;
  if (rank_ != root) return out;
  for (int r = 0; r < size(); ++r) out.emplace_back(all.data() + displs[r], lengths[r]);
  return out;
}

void MpiCommunicator::doBroadcastMessage(std::string& message, int root) {
  uint64_t length = message.size();
  MPI_Request request;
  check(MPI_Ibcast(&length, 1, MPI_UINT64_T, root, comm_, &request), "MPI_Ibcast");
  waitPatiently(request, "MPI_Ibcast");
  // Checked before it sizes anything: the length came from the root
  // (Note [Checked peer messages] in core/message.cc).
  HVD_CHECK(fitsInt(length), "negotiation message of ", length, " bytes from rank ", globalRank(root));
  message.resize(length);
  if (length == 0 || size() == 1) return;
  check(MPI_Ibcast(message.data(), static_cast<int>(length), MPI_BYTE, root, comm_, &request),
        "MPI_Ibcast");
  waitPatiently(request, "MPI_Ibcast");
}

}  // namespace hvdlite::transport::mpi
