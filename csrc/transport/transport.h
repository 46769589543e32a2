// A Transport owns this rank's connections to every other rank of the job and
// hands out a Communicator per process set over them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/communicator.h"
#include "transport/stall.h"
#include "transport/store.h"

namespace hvdlite::transport {

// Whether a process set across hosts reduces in two levels (Note [Two-level
// allreduce] in two_level/two_level_communicator.cc): HVDLITE_HIERARCHICAL_ALLREDUCE
// unset = kAuto (when several hosts hold several members each), 1 = kOn
// (also CUDA tensors' hierarchy), 0 = kOff (one flat ring).
enum class Hierarchy { kAuto, kOff, kOn };

struct TransportOptions {
  int rank = 0;
  int size = 1;
  std::string secret;          // job secret; authenticates every data connection
  std::string key_prefix;      // store namespace of this rendezvous round, e.g. "r3/"
  std::string bind_address;    // address to listen on and publish; "" = auto (see tcp/)
  // This rank's host identity (HVDLITE_HOSTNAME, which hvdliterun sets to
  // the host it started the rank on); "" = gethostname(). Ranks with the same
  // identity are local to each other (shared memory, local_rank).
  std::string hostname;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};  // rendezvous/connect
  // The MPI communicator passed to hvdlite.init(comm=...), as its Fortran
  // handle (MPI_Comm_c2f); -1 = MPI_COMM_WORLD. Only the MPI transport reads it.
  int64_t mpi_comm = -1;
  // Where the MPI transport looks for libmpi (Note [MPI at run time] in
  // mpi/mpi_loader.h): HVDLITE_MPI_LIBRARY, and HVDLITE_MPI_LIBRARY_PATH
  // (':'-separated folders).
  std::string mpi_library;
  std::string mpi_library_path;
  // When a wait for a peer inside a collective is reported and failed
  // (Note [Stalled transfers]); the default never does either.
  StallLimits stall;
  Hierarchy hierarchy = Hierarchy::kAuto;
  // The same for allgather (Note [Two-level allgather]), on the same layouts:
  // HVDLITE_HIERARCHICAL_ALLGATHER unset (kAuto) or 1 (kOn): from
  // two_level::TwoLevelCommunicator::kTwoLevelAllgatherMinBytes; 0 = kOff.
  Hierarchy allgather_hierarchy = Hierarchy::kAuto;
  // How long a peer host may stay silent before its connections fail
  // (HVDLITE_PEER_TIMEOUT_SECONDS; Note [Socket tuning] in tcp/socket.cc);
  // 0 = the kernel's defaults (many minutes).
  std::chrono::milliseconds peer_timeout{std::chrono::seconds(10)};
};

class Transport {
 public:
  virtual ~Transport() = default;
  // A communicator over the given global ranks (sorted, must include this rank).
  // Communicators of different sets share the transport's connections; the
  // runtime guarantees they are used by one thread in an order all ranks share.
  virtual std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) = 0;
  // The communicator negotiation runs over, when it is not communicator()'s
  // (HVDLITE_CONTROLLER selects another transport than the data's); null
  // otherwise. Called right after communicator(), with the same ranks.
  virtual std::unique_ptr<Communicator> controlCommunicator(const std::vector<int>& global_ranks) {
    return nullptr;
  }
  // Thread-safe. Closes every connection so that any blocked or later call on
  // this rank fails fast with TransportError, and so that peers blocked on
  // this rank notice at once. Idempotent.
  virtual void abort() = 0;
  // Host identity of every rank (hostname as published at rendezvous), for
  // local/cross rank computation. Index = global rank.
  virtual const std::vector<std::string>& hostnames() const = 0;
  // Bytes this rank has sent to `global_rank` over the network so far, as
  // the kernel counts them (TCP_INFO), to show what crosses hosts in tests
  // and benchmarks; 0 where unknown (MPI, this rank itself).
  virtual uint64_t bytesSentTo(int global_rank) const { return 0; }
};

// Builds the transport selected by name for data: "auto"/"shm" (shared memory
// for process sets within one host, TCP otherwise), "tcp" or "mpi" (when built
// with MPI); and `controller` for negotiation: "auto" (the data's transport),
// "mpi" or "tcp" (the built-in one). The built-in transports rendezvous
// through store: publish this rank's address under key_prefix, read all
// others', connect and authenticate; they throw Timeout naming the ranks that
// never showed up. MPI needs no store.
std::unique_ptr<Transport> createTransport(const std::string& name, const std::string& controller,
                                           const TransportOptions& options, Store& store);
// The same, negotiating over the data's transport.
std::unique_ptr<Transport> createTransport(const std::string& name, const TransportOptions& options,
                                           Store& store);

// Whether the selected transports meet through a rendezvous store (false when
// MPI carries both data and negotiation).
bool needsStore(const std::string& name, const std::string& controller);

// The transports this build has, e.g. {"tcp", "shm", "mpi"}.
std::vector<std::string> builtTransports();

// True when MPI is initialised in this process with MPI_THREAD_MULTIPLE.
bool mpiThreadsSupported();

}  // namespace hvdlite::transport
