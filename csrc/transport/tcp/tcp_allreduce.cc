// The reducing collectives of TcpCommunicator: allreduce and reducescatter.
#include <cstring>

#include "common/prefix_sum.h"
#include "common/reduce.h"
#include "transport/tcp/ring.h"
#include "transport/tcp/tcp_communicator.h"

namespace hvdlite::transport::tcp {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Splits count elements into n nearly equal blocks, in bytes.
std::vector<size_t> evenBlocks(size_t count, int n, size_t element) {
  std::vector<size_t> bytes(n);
  for (int b = 0; b < n; ++b) {
    bytes[b] = (count / n + (static_cast<size_t>(b) < count % n ? 1 : 0)) * element;
  }
  return bytes;
}

size_t pieceFor(DataType dtype, size_t piece_bytes) {
  size_t element = dtypeSize(dtype);
  return std::max(element, piece_bytes / element * element);
}

}  // namespace

void TcpCommunicator::doAllreduce(void* data, size_t count, DataType dtype, ReduceOp op) {
  if (size() == 1 || count == 0) return;
  // Every member passes the same count, so every member takes the same branch.
  if (count * dtypeSize(dtype) < kRingThreshold || count < static_cast<size_t>(size())) {
    recursiveDoubling(static_cast<char*>(data), count, dtype, op);
  } else {
    ringAllreduce(static_cast<char*>(data), count, dtype, op);
  }
}

// log2(n) exchanges of the whole buffer. A size that is not a power of two is
// first folded: each of the first 2*rem ranks pairs up, the odd one takes the
// even one's values and later sends it the result. Partners combine the same
// two operands (the kernels are commutative), so all ranks agree bitwise.
void TcpCommunicator::recursiveDoubling(char* data, size_t count, DataType dtype, ReduceOp op) {
  int n = size();
  size_t bytes = count * dtypeSize(dtype);
  char* theirs = scratch(piece_, bytes);
  int power = 1;
  while (power * 2 <= n) power *= 2;
  int rem = n - power;
  int folded;  // this rank's index among the `power` ranks that double; -1 if folded away
  if (rank_ < 2 * rem && rank_ % 2 == 0) {
    peer(rank_ + 1).send(data, bytes);
    folded = -1;
  } else if (rank_ < 2 * rem) {
    peer(rank_ - 1).recv(theirs, bytes);
    reduceInto(data, theirs, count, dtype, op);
    folded = rank_ / 2;
  } else {
    folded = rank_ - rem;
  }
  for (int mask = 1; folded >= 0 && mask < power; mask <<= 1) {
    int partner_folded = folded ^ mask;
    int partner = partner_folded < rem ? partner_folded * 2 + 1 : partner_folded + rem;
    Link& link = peer(partner);
    sendRecv(link, data, bytes, link, theirs, bytes);
    reduceInto(data, theirs, count, dtype, op);
  }
  if (rank_ < 2 * rem) {
    if (rank_ % 2 == 0) {
      peer(rank_ + 1).recv(data, bytes);
    } else {
      peer(rank_ - 1).send(data, bytes);
    }
  }
}

// Reduce-scatter then allgather as one stream (Note [Ring as one stream]).
// With blocks numbered by owner, rank r first sends its raw block r-1,
// receives and reduces blocks r-2, r-3, ..., r (ending as their owner), then
// receives the finished blocks r-1, r-2, ..., r+1, forwarding all but the last.
void TcpCommunicator::ringAllreduce(char* data, size_t count, DataType dtype, ReduceOp op) {
  int n = size();
  std::vector<size_t> bytes = evenBlocks(count, n, dtypeSize(dtype));
  std::vector<size_t> offsets = exclusivePrefixSum(bytes);
  RingPlan plan = reducingRing(data, data, data + offsets[rank_], bytes, offsets, dtype, op);
  for (int k = 0; k < n - 1; ++k) {
    int b = mod(rank_ - k - 1, n);
    plan.incoming.push_back({data + offsets[b], nullptr, bytes[b]});
  }
  runRing(right(), left(), plan);
}

// The reduce-scatter half of ringAllreduce over the caller's blocks. `in` is
// read-only, so partial sums go to a work buffer and the owned block to out.
void TcpCommunicator::doReducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                                      DataType dtype, ReduceOp op) {
  int n = size();
  size_t element = dtypeSize(dtype);
  std::vector<size_t> bytes(n);
  for (int b = 0; b < n; ++b) bytes[b] = counts[b] * element;
  std::vector<size_t> offsets = exclusivePrefixSum(bytes);
  const char* input = static_cast<const char*>(in);
  if (n == 1) {
    if (bytes[0] > 0) std::memmove(out, input, bytes[0]);
    return;
  }
  char* work = scratch(work_, offsets[n - 1] + bytes[n - 1]);
  runRing(right(), left(), reducingRing(input, work, static_cast<char*>(out), bytes, offsets, dtype, op));
}

// Rank r sends its own block r-1 of `in` first, then reduces blocks r-2,
// r-3, ..., r-n+1 into `sums` and the last, block r, into `owned`.
RingPlan TcpCommunicator::reducingRing(const char* in, char* sums, char* owned, const std::vector<size_t>& bytes,
                                       const std::vector<size_t>& offsets, DataType dtype, ReduceOp op) {
  int n = size();
  RingPlan plan;
  int first = mod(rank_ - 1, n);
  plan.first = in + offsets[first];
  plan.first_bytes = bytes[first];
  for (int k = 0; k < n - 1; ++k) {
    int b = mod(rank_ - k - 2, n);
    char* dst = k == n - 2 ? owned : sums + offsets[b];
    plan.incoming.push_back({dst, in + offsets[b], bytes[b]});
  }
  plan.dtype = dtype;
  plan.op = op;
  plan.piece_bytes = pieceFor(dtype, kPieceBytes);
  plan.piece = scratch(piece_, plan.piece_bytes);
  return plan;
}

}  // namespace hvdlite::transport::tcp
