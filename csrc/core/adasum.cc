#include "core/adasum.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/half.h"

namespace hvdlite::core {

// Note [Adasum halving]
// Vector halving, distance doubling (as in Horovod's CPU Adasum): at level
// 2^k (k = 0, 1, ...) rank r pairs with r ^ 2^k. Both hold the same range of
// the fused buffer; the one with bit k clear (the left one) keeps the first
// floor(n/2) elements of it and the right one the rest, each receiving the
// partner's values for the half it keeps. Each then combines its half of its
// own vector with its half of the partner's, which needs the dot product and
// norms of the whole tensors: after level k the block of 2^(k+1) ranks that
// share the bits above k hold disjoint parts that together cover the buffer,
// so their partial sums, added, give the whole tensors' (every block member
// adds them in rank order, so all use the same coefficients). The levels
// thus build the tree ((0,1),(2,3)) -> (0..3), with the left vector always
// the one of the lower ranks. Afterwards every element has been computed by
// exactly one rank; the same exchanges in reverse order (distance halving)
// copy them to every rank, so all ranks end with the same bytes.
//
// Note [Adasum over alltoallv]
// The exchanges are point to point, which Communicator has no call for. An
// alltoallv in which only the partner gets bytes is one: tcp skips empty
// messages (a direct exchange with the partner), MPI passes zero counts to
// MPI_Alltoallv, and shared memory moves the one message through its slots.
// A sendrecv() on the interface would be faster on shared memory only, and
// would have to be added to every implementation (tcp, shm, mpi, the test
// doubles); Adasum is a CPU-bound algorithm (dot products, scaled adds) whose
// exchanges are a small part of its cost.

namespace {

struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// The part of [0, count) that `rank` holds after `levels` levels of halving.
Range keptRange(size_t count, int rank, int levels) {
  Range range{0, count};
  for (int k = 0; k < levels; ++k) {
    const size_t middle = range.begin + range.size() / 2;
    if (rank & (1 << k)) range.begin = middle;
    else range.end = middle;
  }
  return range;
}

// Tensors [first, last) that overlap `range` (empty tensors inside count as
// overlapping; their sums are zero).
struct Span {
  size_t first = 0, last = 0;
  size_t size() const { return last - first; }
};

Span tensorsIn(const std::vector<size_t>& bounds, Range range) {
  if (range.size() == 0) return {};
  auto first = std::upper_bound(bounds.begin(), bounds.end(), range.begin) - bounds.begin() - 1;
  auto last = std::lower_bound(bounds.begin(), bounds.end(), range.end) - bounds.begin();
  return {static_cast<size_t>(first), static_cast<size_t>(last)};
}

// Sends `send_bytes` to `peer` and receives `recv_bytes` from it (Note
// [Adasum over alltoallv]).
void exchange(transport::Communicator& comm, int peer, const uint8_t* send, size_t send_bytes,
              uint8_t* recv, size_t recv_bytes) {
  std::vector<size_t> sends(comm.size(), 0), recvs(comm.size(), 0);
  sends[peer] = send_bytes;
  recvs[peer] = recv_bytes;
  comm.alltoallv(send, sends, recv, recvs);
}

// Element types, computed in double.
template <typename T>
struct Native {
  using Storage = T;
  static double load(T v) { return v; }
  static T store(double v) { return static_cast<T>(v); }
};
struct Half {
  using Storage = uint16_t;
  static double load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(double v) { return floatToHalf(static_cast<float>(v)); }
};
struct BHalf {
  using Storage = uint16_t;
  static double load(uint16_t v) { return bfloat16ToFloat(v); }
  static uint16_t store(double v) { return floatToBFloat16(static_cast<float>(v)); }
};

template <typename Fn>
void visitFloat(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat16: return fn(Half{});
    case DataType::kBFloat16: return fn(BHalf{});
    case DataType::kFloat32: return fn(Native<float>{});
    case DataType::kFloat64: return fn(Native<double>{});
    default:
      throw InvalidArgument(detail::concat("Adasum reduces floating-point tensors only, not ",
                                           dtypeName(dtype)));
  }
}

// One level of the halving, as seen by one rank.
struct Level {
  int k;        // the level is 2^k
  bool left;    // this rank's bit k is clear
  Range kept;   // what it holds after the level
  Span tensors; // the tensors in `kept`
};

// This tensor's elements within the level's kept range.
Range partOf(const std::vector<size_t>& bounds, size_t t, Range kept) {
  return {std::max(bounds[t], kept.begin), std::min(bounds[t + 1], kept.end)};
}

// sums[3 * i..] = {a·b, |left|², |right|²} over this rank's part of tensor
// level.tensors.first + i, where a is its own half and b the partner's.
template <typename E, typename S = typename E::Storage>
void partialSums(const S* values, const S* theirs, const std::vector<size_t>& bounds,
                 const Level& level, std::vector<double>& sums) {
  sums.assign(3 * level.tensors.size(), 0.0);
  for (size_t t = level.tensors.first; t < level.tensors.last; ++t) {
    const Range part = partOf(bounds, t, level.kept);
    double dot = 0, aa = 0, bb = 0;
    for (size_t i = part.begin; i < part.end; ++i) {
      const double x = E::load(values[i]), y = E::load(theirs[i - level.kept.begin]);
      dot += x * y;
      aa += x * x;
      bb += y * y;
    }
    double* out = &sums[3 * (t - level.tensors.first)];
    out[0] = dot;
    out[1] = level.left ? aa : bb;
    out[2] = level.left ? bb : aa;
  }
}

// Adds up, for each tensor this rank holds, the partial sums of every rank
// of its block (Note [Adasum halving]), in rank order; in place over sums.
void blockSums(transport::Communicator& comm, const std::vector<size_t>& bounds,
               const Level& level, std::vector<double>& sums, std::vector<double>& gathered) {
  const int size = comm.size();
  std::vector<Span> spans(size);
  std::vector<size_t> bytes(size), at(size);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    spans[r] = tensorsIn(bounds, keptRange(bounds.back(), r, level.k + 1));
    at[r] = total;
    total += 3 * spans[r].size();
    bytes[r] = 3 * spans[r].size() * sizeof(double);
  }
  gathered.resize(total + 1);
  comm.allgatherv(sums.data(), gathered.data(), bytes);
  const int block = comm.rank() >> (level.k + 1);
  std::fill(sums.begin(), sums.end(), 0.0);
  for (int r = block << (level.k + 1); r < (block + 1) << (level.k + 1); ++r) {
    const size_t first = std::max(spans[r].first, level.tensors.first);
    const size_t last = std::min(spans[r].last, level.tensors.last);
    for (size_t t = first; t < last; ++t) {
      for (int j = 0; j < 3; ++j) {
        sums[3 * (t - level.tensors.first) + j] += gathered[at[r] + 3 * (t - spans[r].first) + j];
      }
    }
  }
}

// values = c_own * values + c_partner * theirs, tensor by tensor.
template <typename E, typename S = typename E::Storage>
void combine(S* values, const S* theirs, const std::vector<size_t>& bounds, const Level& level,
             const std::vector<double>& sums) {
  for (size_t t = level.tensors.first; t < level.tensors.last; ++t) {
    const Range part = partOf(bounds, t, level.kept);
    const double* s = &sums[3 * (t - level.tensors.first)];
    const auto c = adasumCoefficients(s[0], s[1], s[2]);
    const double own = level.left ? c.left : c.right, partner = level.left ? c.right : c.left;
    for (size_t i = part.begin; i < part.end; ++i) {
      values[i] = E::store(own * E::load(values[i]) + partner * E::load(theirs[i - level.kept.begin]));
    }
  }
}

}  // namespace

AdasumCoefficients adasumCoefficients(double dot, double left_norm2, double right_norm2) {
  AdasumCoefficients c;
  if (left_norm2 >= 1e-8) c.left = 1.0 - dot / (2.0 * left_norm2);
  if (right_norm2 >= 1e-8) c.right = 1.0 - dot / (2.0 * right_norm2);
  return c;
}

void Adasum::allreduce(void* data, DataType dtype, const std::vector<size_t>& bounds,
                       transport::Communicator& comm) {
  const int size = comm.size(), rank = comm.rank();
  HVD_CHECK(size > 0 && (size & (size - 1)) == 0, "Adasum over ", size, " ranks");
  HVD_CHECK(!bounds.empty() && bounds.front() == 0, "Adasum needs tensor bounds starting at 0");
  const size_t count = bounds.back(), esize = dtypeSize(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  received_.resize(std::max<size_t>(received_.size(), (count - count / 2) * esize));
  int levels = 0;
  for (; (1 << levels) < size; ++levels) {
    const int peer = rank ^ (1 << levels);
    const Range held = keptRange(count, rank, levels);
    Level level{levels, (rank & (1 << levels)) == 0, keptRange(count, rank, levels + 1), {}};
    level.tensors = tensorsIn(bounds, level.kept);
    const Range given = level.left ? Range{level.kept.end, held.end} : Range{held.begin, level.kept.begin};
    exchange(comm, peer, bytes + given.begin * esize, given.size() * esize, received_.data(),
             level.kept.size() * esize);
    visitFloat(dtype, [&](auto element) {
      using E = decltype(element);
      using S = typename E::Storage;
      partialSums<E>(reinterpret_cast<const S*>(bytes), reinterpret_cast<const S*>(received_.data()),
                     bounds, level, sums_);
      blockSums(comm, bounds, level, sums_, gathered_);
      combine<E>(reinterpret_cast<S*>(bytes), reinterpret_cast<const S*>(received_.data()), bounds,
                 level, sums_);
    });
  }
  // Distance halving: every element, computed by one rank, reaches every rank.
  for (--levels; levels >= 0; --levels) {
    const int peer = rank ^ (1 << levels);
    const Range mine = keptRange(count, rank, levels + 1), theirs = keptRange(count, peer, levels + 1);
    exchange(comm, peer, bytes + mine.begin * esize, mine.size() * esize, bytes + theirs.begin * esize,
             theirs.size() * esize);
  }
}

}  // namespace hvdlite::core
