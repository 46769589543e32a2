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
// each connection is authenticated both ways (Note [Mesh handshake]); a rank
// accepts and authenticates its connections side by side, so that strangers
// on the data port cannot hold up the ranks it waits for (Note [Concurrent
// handshakes], acceptor.h).
//
// Note [Rendezvous abort]
// A rank that dies after its peers began the rendezvous (it published its
// address, or was about to) leaves them waiting for it until
// options.timeout, which is long (--start-timeout) because slow starts are
// normal. Whoever learns of the death sooner (hvdliterun's elastic driver)
// sets options.key_prefix + "abort" to the reason, and every wait of the
// rendezvous (for a key, a connect, an accept) runs in slices of
// kAbortPollInterval with a look at that key in between: a rank gives up
// within a slice, with a TransportError that carries the reason.
class Mesh {
 public:
  static constexpr std::chrono::milliseconds kAbortPollInterval{200};

  // Blocks until this rank is connected to every other one. Throws Timeout
  // naming the ranks that never published or never connected within
  // options.timeout, TransportError when a peer rejects this rank's secret,
  // and TransportError with the reason when the rendezvous was aborted
  // (Note [Rendezvous abort]).
  Mesh(const TransportOptions& options, Store& store);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Link& link(int global_rank);
  // Transport::bytesSentTo.
  uint64_t bytesSentTo(int global_rank) const;
  const std::vector<std::string>& hostnames() const { return hostnames_; }

  // Thread-safe and idempotent: shuts every connection down (see Transport).
  void abort();

 private:
  Socket listenAndPublish(const TransportOptions& options, Store& store);
  void readPeers(const TransportOptions& options, Store& store, Deadline deadline);
  void connectToLowerRanks(const TransportOptions& options, Store& store, Deadline deadline);
  void acceptHigherRanks(Socket& listener, const TransportOptions& options, Store& store,
                         Deadline deadline);
  // store.get(key) until `deadline`, giving up early when the rendezvous is aborted.
  std::string getUnlessAborted(const TransportOptions& options, Store& store,
                               const std::string& key, Deadline deadline);
  Socket connectUnlessAborted(const TransportOptions& options, Store& store, int peer,
                              Deadline deadline);
  // Throws TransportError with the reason if the rendezvous was aborted.
  void checkAborted(const TransportOptions& options, Store& store) const;
  void addLink(int peer, Socket socket);

  int rank_;
  int size_;
  std::atomic<bool> aborted_{false};
  std::vector<std::string> addresses_;  // published "host:port" of each rank
  std::vector<std::string> hostnames_;
  std::vector<std::unique_ptr<Link>> links_;  // by global rank; null for this rank
  StallLimits stall_;  // the links' (Note [Stalled transfers])
  std::chrono::milliseconds peer_timeout_;  // Note [Socket tuning]
};

}  // namespace hvdlite::transport::tcp
