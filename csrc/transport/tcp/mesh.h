// The full mesh of authenticated connections of one rendezvous round: one
// Link from this rank to every other rank of the job.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "transport/store.h"
#include "transport/tcp/link.h"
#include "transport/transport.h"

namespace hvdlite::transport::tcp {

// Note [Rendezvous keys]
// Each rank listens on options.bind_address ("" = 127.0.0.1), port 0, and
// publishes under options.key_prefix:
//   host/<rank>  its hostname (gethostname), for local/cross rank computation
//   addr/<rank>  "host:port" of its listener, written last, so a reader that
//                sees addr/<rank> also finds host/<rank>
// Then rank i connects to every rank j < i and accepts every rank j > i, and
// each connection is authenticated both ways (Note [Mesh handshake]).
class Mesh {
 public:
  // Blocks until this rank is connected to every other one. Throws Timeout
  // naming the ranks that never published or never connected within
  // options.timeout, and TransportError when a peer rejects this rank's secret.
  Mesh(const TransportOptions& options, Store& store);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Link& link(int global_rank);
  const std::vector<std::string>& hostnames() const { return hostnames_; }

  // Thread-safe and idempotent: shuts every connection down (see Transport).
  void abort();

 private:
  Socket listenAndPublish(const TransportOptions& options, Store& store);
  void readPeers(const TransportOptions& options, Store& store, Deadline deadline);
  void connectToLowerRanks(const TransportOptions& options, Deadline deadline);
  void acceptHigherRanks(Socket& listener, const TransportOptions& options, Deadline deadline);
  void addLink(int peer, Socket socket);

  int rank_;
  int size_;
  std::atomic<bool> aborted_{false};
  std::vector<std::string> addresses_;  // published "host:port" of each rank
  std::vector<std::string> hostnames_;
  std::vector<std::unique_ptr<Link>> links_;  // by global rank; null for this rank
};

}  // namespace hvdlite::transport::tcp
