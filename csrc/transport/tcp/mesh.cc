#include "transport/tcp/mesh.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>

#include "common/logging.h"
#include "transport/tcp/acceptor.h"
#include "transport/tcp/handshake.h"

namespace hvdlite::transport::tcp {
namespace {

std::string localHostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// A wildcard listener is reachable on every interface, but peers need one
// concrete address: take the first non-loopback IPv4 one.
std::string advertisedHost(const std::string& bind_address) {
  if (bind_address.empty()) return "127.0.0.1";
  if (bind_address != "0.0.0.0" && bind_address != "::") return bind_address;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return localHostname();
  std::string found;
  for (ifaddrs* entry = list; entry != nullptr && found.empty(); entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    if ((entry->ifa_flags & IFF_LOOPBACK) || !(entry->ifa_flags & IFF_UP)) continue;
    char text[INET_ADDRSTRLEN];
    const auto* ipv4 = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if (inet_ntop(AF_INET, &ipv4->sin_addr, text, sizeof(text)) != nullptr) found = text;
  }
  freeifaddrs(list);
  return found.empty() ? localHostname() : found;
}

// Negative means "no limit" to the store and to Socket::connect.
std::chrono::milliseconds remaining(Deadline deadline) {
  if (deadline == kNoDeadline) return std::chrono::milliseconds(-1);
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace

Mesh::Mesh(const TransportOptions& options, Store& store)
    : rank_(options.rank),
      size_(options.size),
      addresses_(options.size),
      hostnames_(options.size),
      links_(options.size),
      stall_(options.stall),
      peer_timeout_(options.peer_timeout) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw InvalidArgument(detail::concat("rank ", rank_, " is not a rank of a job of ", size_));
  }
  hostnames_[rank_] = options.hostname.empty() ? localHostname() : options.hostname;
  if (size_ == 1) return;
  Deadline deadline = deadlineAfter(options.timeout);
  Socket listener = listenAndPublish(options, store);
  readPeers(options, store, deadline);
  connectToLowerRanks(options, store, deadline);
  acceptHigherRanks(listener, options, store, deadline);
  // The listener closes here, so nobody can connect once the mesh stands.
}

Link& Mesh::link(int global_rank) {
  HVD_CHECK(global_rank >= 0 && global_rank < size_ && links_[global_rank] != nullptr,
            "no link from rank ", rank_, " to rank ", global_rank);
  return *links_[global_rank];
}

uint64_t Mesh::bytesSentTo(int global_rank) const {
  if (global_rank < 0 || global_rank >= size_ || links_[global_rank] == nullptr) return 0;
  return links_[global_rank]->socket().bytesSent();
}

void Mesh::abort() {
  aborted_.store(true);
  for (auto& link : links_) {
    if (link) link->shutdown();
  }
}

Socket Mesh::listenAndPublish(const TransportOptions& options, Store& store) {
  Socket listener = Socket::listen(options.bind_address, 0);
  addresses_[rank_] = formatAddress(advertisedHost(options.bind_address), listener.localPort());
  std::string me = std::to_string(rank_);
  store.set(options.key_prefix + "host/" + me, hostnames_[rank_]);
  store.set(options.key_prefix + "addr/" + me, addresses_[rank_]);
  return listener;
}

void Mesh::readPeers(const TransportOptions& options, Store& store, Deadline deadline) {
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    std::string key = options.key_prefix + "addr/" + std::to_string(r);
    try {
      addresses_[r] = getUnlessAborted(options, store, key, deadline);
    } catch (const Timeout&) {
      std::vector<int> missing;
      for (int m = r; m < size_; ++m) {
        if (m != rank_ && !store.tryGet(options.key_prefix + "addr/" + std::to_string(m), nullptr)) {
          missing.push_back(m);
        }
      }
      throw Timeout(detail::concat(
          "rank ", rank_, " waited ", options.timeout.count(), " ms for rank(s) ",
          detail::joinRanks(missing), " to publish their address (store keys '", options.key_prefix,
          "addr/<rank>'); they did not start, failed before init(), or cannot reach the store"));
    }
    hostnames_[r] = store.get(options.key_prefix + "host/" + std::to_string(r), remaining(deadline));
  }
}

void Mesh::connectToLowerRanks(const TransportOptions& options, Store& store,
                               Deadline deadline) {
  Authenticator authenticator(options.secret, options.key_prefix, rank_);
  for (int peer = 0; peer < rank_; ++peer) {
    Socket socket = connectUnlessAborted(options, store, peer, deadline);
    try {
      authenticator.proveTo(socket, peer, addresses_[peer], deadline);
    } catch (const SocketError& error) {
      throw PeerLost(detail::concat("rank ", rank_, " lost rank ", peer, " (tcp ", addresses_[peer], ", ",
                                    error.what(), ") during the handshake; see rank ", peer, "'s log"),
                     peer, false);
    }
    addLink(peer, std::move(socket));
  }
}

void Mesh::acceptHigherRanks(Socket& listener, const TransportOptions& options, Store& store,
                             Deadline deadline) {
  Authenticator authenticator(options.secret, options.key_prefix, rank_);
  Acceptor acceptor(listener, authenticator, size_, rank_);  // Note [Concurrent handshakes]
  int expected = size_ - 1 - rank_;
  while (expected > 0) {
    Acceptor::Proven proven = acceptor.next(std::min(deadline, Clock::now() + kAbortPollInterval));
    if (proven.rank < 0) {
      checkAborted(options, store);
      if (Clock::now() >= deadline) break;
      continue;
    }
    if (links_[proven.rank] != nullptr) {
      // Only a rank of this job can prove itself, so this is one reconnecting
      // after a linked attempt: the first link stands.
      HVD_LOG(kInfo, rank_, "dropped a second connection from rank ", proven.rank, " (",
              proven.from, "): it is linked already");
      continue;
    }
    addLink(proven.rank, std::move(proven.socket));
    --expected;
  }
  if (expected == 0) return;
  std::vector<int> missing;
  for (int r = rank_ + 1; r < size_; ++r) {
    if (!links_[r]) missing.push_back(r);
  }
  std::string detail_text;
  for (const auto& line : acceptor.refused()) detail_text += "; refused " + line;
  if (acceptor.refusedCount() > acceptor.refused().size()) {
    detail_text += detail::concat("; and ", acceptor.refusedCount() - acceptor.refused().size(),
                                  " more such connections");
  }
  std::string message = detail::concat("rank ", rank_, " waited ", options.timeout.count(),
                                       " ms for rank(s) ", detail::joinRanks(missing),
                                       " to connect and authenticate", detail_text);
  // A refused connection is most likely a rank started with another secret.
  if (acceptor.refusedCount() > 0) throw TransportError(message);
  throw Timeout(message);
}

std::string Mesh::getUnlessAborted(const TransportOptions& options, Store& store,
                                   const std::string& key, Deadline deadline) {
  while (true) {
    Deadline slice = std::min(deadline, Clock::now() + kAbortPollInterval);
    try {
      return store.get(key, remaining(slice));
    } catch (const Timeout&) {
      checkAborted(options, store);
      if (Clock::now() >= deadline) throw;
    }
  }
}

Socket Mesh::connectUnlessAborted(const TransportOptions& options, Store& store, int peer,
                                  Deadline deadline) {
  std::string host;
  int port = 0;
  parseAddress(addresses_[peer], &host, &port);
  while (true) {
    Deadline slice = std::min(deadline, Clock::now() + kAbortPollInterval);
    try {
      return Socket::connect(host, port, remaining(slice));
    } catch (const TransportError& error) {
      checkAborted(options, store);
      if (Clock::now() < deadline) continue;
      throw TransportError(detail::concat("rank ", rank_, " cannot reach rank ", peer, " within ",
                                          options.timeout.count(), " ms: ", error.what()));
    }
  }
}

void Mesh::checkAborted(const TransportOptions& options, Store& store) const {
  std::string reason;
  if (!store.tryGet(options.key_prefix + "abort", &reason)) return;
  throw TransportError(detail::concat("rank ", rank_, " gave up the rendezvous of '",
                                      options.key_prefix, "': ", reason));
}

void Mesh::addLink(int peer, Socket socket) {
  socket.tuneForData(peer_timeout_);
  links_[peer] = std::make_unique<Link>(std::move(socket), rank_, peer, addresses_[peer], hostnames_[peer],
                                       peer_timeout_, aborted_, stall_);
}

}  // namespace hvdlite::transport::tcp
