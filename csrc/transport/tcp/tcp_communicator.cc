#include "transport/tcp/tcp_communicator.h"

#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "common/prefix_sum.h"
#include "transport/tcp/ring.h"

namespace hvdlite::transport::tcp {
namespace {

constexpr size_t kLengthBytes = 8;

// Message lengths travel as 8 bytes, big-endian.
std::string framed(const std::string& message) {
  std::string out(kLengthBytes, '\0');
  uint64_t size = message.size();
  for (size_t i = 0; i < kLengthBytes; ++i) {
    out[i] = static_cast<char>(size >> (8 * (kLengthBytes - 1 - i)));
  }
  return out + message;
}

// A length above Communicator::kMaxMessageBytes is refused before
// anything is allocated for it (Note [Checked peer messages] in core/message.cc).
std::string recvFramed(Link& from) {
  unsigned char header[kLengthBytes];
  from.recv(header, sizeof(header));
  uint64_t size = 0;
  for (unsigned char byte : header) size = (size << 8) | byte;
  if (size > Communicator::kMaxMessageBytes) {
    throw BadPeerMessage(
        detail::concat("rank ", from.peerRank(), " sent a negotiation message claiming ", size, " bytes, more than ",
                       Communicator::kMaxMessageBytes, " (Communicator::kMaxMessageBytes): hvdlite never "
                       "sends one that large, so rank ", from.peerRank(), " runs another version of hvdlite, has a "
                       "bug, or is not one of this job's processes; the job stops here rather than trust it"),
        from.peerRank());
  }
  // Grown as the bytes arrive: a peer that claims much and sends little
  // costs what it sent, not what it claimed.
  constexpr size_t kStep = size_t{1} << 20;
  std::string message;
  while (message.size() < size) {
    const size_t at = message.size(), n = std::min<size_t>(size - at, kStep);
    message.resize(at + n);
    from.recv(message.data() + at, n);
  }
  return message;
}

}  // namespace

TcpCommunicator::TcpCommunicator(Mesh& mesh, std::vector<int> global_ranks)
    : mesh_(mesh), ranks_(std::move(global_ranks)) {
  HVD_CHECK(std::is_sorted(ranks_.begin(), ranks_.end()) &&
                std::adjacent_find(ranks_.begin(), ranks_.end()) == ranks_.end(),
            "process set ranks must be sorted and distinct");
  auto self = std::find(ranks_.begin(), ranks_.end(), mesh.rank());
  HVD_CHECK(self != ranks_.end(), "rank ", mesh.rank(), " is not a member of this process set");
  rank_ = static_cast<int>(self - ranks_.begin());
  for (int global : ranks_) {
    HVD_CHECK(global >= 0 && global < mesh.size(), "rank ", global, " is not in the job");
  }
}

char* TcpCommunicator::scratch(std::vector<char>& buffer, size_t bytes) {
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void TcpCommunicator::doAllgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytes_per_rank) {
  std::vector<size_t> offsets = exclusivePrefixSum(bytes_per_rank);
  char* base = static_cast<char*>(out);
  if (bytes_per_rank[rank_] > 0 && in != base + offsets[rank_]) {
    std::memmove(base + offsets[rank_], in, bytes_per_rank[rank_]);
  }
  int n = size();
  if (n == 1) return;
  auto block = [&](int k) { return ((rank_ - k) % n + n) % n; };
  RingPlan plan;
  plan.first = base + offsets[rank_];
  plan.first_bytes = bytes_per_rank[rank_];
  for (int k = 0; k < n - 1; ++k) {
    int b = block(k + 1);
    plan.incoming.push_back({base + offsets[b], nullptr, bytes_per_rank[b]});
  }
  plan.piece_bytes = 1;  // nothing is reduced
  runRing(right(), left(), plan);
}

void TcpCommunicator::doBroadcast(void* data, size_t bytes, int root) {
  if (size() == 1 || bytes == 0) return;
  if (bytes < kChainThreshold) {
    treeBroadcast(data, bytes, root);
  } else {
    chainBroadcast(data, bytes, root);
  }
}

// Binomial tree over ranks relative to the root: log2(n) latencies.
void TcpCommunicator::treeBroadcast(void* data, size_t bytes, int root) {
  int n = size();
  int relative = (rank_ - root + n) % n;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (relative & mask) {
      peer((relative - mask + root) % n).recv(data, bytes);
      break;
    }
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < n) peer((relative + mask + root) % n).send(data, bytes);
  }
}

// root -> root+1 -> ... : every rank forwards bytes as they arrive, so the
// time is about one transfer of the buffer plus n small hops.
void TcpCommunicator::chainBroadcast(void* data, size_t bytes, int root) {
  int n = size();
  int relative = (rank_ - root + n) % n;
  int next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
  if (relative == 0) {
    peer(next).send(data, bytes);
  } else if (relative == n - 1) {
    peer(prev).recv(data, bytes);
  } else {
    relay(peer(prev), peer(next), data, bytes);
  }
}

void TcpCommunicator::doAlltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                                  const std::vector<size_t>& recv_bytes) {
  int n = size();
  std::vector<size_t> send_offsets = exclusivePrefixSum(send_bytes);
  std::vector<size_t> recv_offsets = exclusivePrefixSum(recv_bytes);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  if (send_bytes[rank_] > 0) {
    std::memmove(dst + recv_offsets[rank_], src + send_offsets[rank_], send_bytes[rank_]);
  }
  for (int k = 1; k < n; ++k) {
    int to = (rank_ + k) % n, from = (rank_ + n - k) % n;
    sendRecv(peer(to), src + send_offsets[to], send_bytes[to], peer(from),
             dst + recv_offsets[from], recv_bytes[from]);
  }
}

// Dissemination: after round k every rank has heard, directly or not, from
// the 2^(k+1) ranks before it.
void TcpCommunicator::doBarrier() {
  int n = size();
  for (int distance = 1; distance < n; distance <<= 1) {
    char token = 0, received = 0;
    sendRecv(peer((rank_ + distance) % n), &token, 1, peer((rank_ + n - distance) % n), &received,
             1);
  }
}

std::vector<std::string> TcpCommunicator::doGather(const std::string& mine, int root) {
  if (rank_ != root) {
    std::string message = framed(mine);
    peer(root).send(message.data(), message.size());
    return {};
  }
  std::vector<std::string> all(size());
  for (int r = 0; r < size(); ++r) all[r] = r == root ? mine : recvFramed(peer(r));
  return all;
}

// The binomial tree of treeBroadcast, with the length leading the payload.
void TcpCommunicator::doBroadcastMessage(std::string& message, int root) {
  int n = size();
  int relative = (rank_ - root + n) % n;
  int mask = 1;
  for (; mask < n; mask <<= 1) {
    if (relative & mask) {
      message = recvFramed(peer((relative - mask + root) % n));
      break;
    }
  }
  std::string out;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask >= n) continue;
    if (out.empty()) out = framed(message);
    peer((relative + mask + root) % n).send(out.data(), out.size());
  }
}

}  // namespace hvdlite::transport::tcp
