// A Transport owns this rank's connections to every other rank of the job and
// hands out a Communicator per process set over them.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/store.h"

namespace hvdlite::transport {

struct TransportOptions {
  int rank = 0;
  int size = 1;
  std::string secret;          // job secret; authenticates every data connection
  std::string key_prefix;      // store namespace of this rendezvous round, e.g. "r3/"
  std::string bind_address;    // address to listen on and publish; "" = auto (see tcp/)
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // rendezvous/connect
};

class Transport {
 public:
  virtual ~Transport() = default;
  // A communicator over the given global ranks (sorted, must include this rank).
  // Communicators of different sets share the transport's connections; the
  // runtime guarantees they are used by one thread in an order all ranks share.
  virtual std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) = 0;
  // Thread-safe. Closes every connection so that any blocked or later call on
  // this rank fails fast with TransportError, and so that peers blocked on
  // this rank notice at once. Idempotent.
  virtual void abort() = 0;
  // Host identity of every rank (hostname as published at rendezvous), for
  // local/cross rank computation. Index = global rank.
  virtual const std::vector<std::string>& hostnames() const = 0;
};

// Builds the transport selected by name: "auto"/"shm" (shared memory for
// process sets within one host, TCP otherwise) or "tcp". Performs the rendezvous
// through store: publishes this rank's address under key_prefix, reads all
// others', connects and authenticates. Throws Timeout naming the ranks that
// never showed up.
std::unique_ptr<Transport> createTransport(const std::string& name, const TransportOptions& options,
                                           Store& store);

}  // namespace hvdlite::transport
