// The built-in TCP transport: a full mesh of authenticated connections and
// TcpCommunicators over it.
#pragma once

#include <memory>

#include "transport/tcp/mesh.h"
#include "transport/transport.h"

namespace hvdlite::transport::tcp {

class TcpTransport : public Transport {
 public:
  // Rendezvous and connect (Note [Rendezvous keys]); blocks up to options.timeout.
  TcpTransport(const TransportOptions& options, Store& store) : mesh_(options, store) {}

  std::unique_ptr<Communicator> communicator(const std::vector<int>& global_ranks) override;
  void abort() override { mesh_.abort(); }
  const std::vector<std::string>& hostnames() const override { return mesh_.hostnames(); }
  uint64_t bytesSentTo(int global_rank) const override { return mesh_.bytesSentTo(global_rank); }

 private:
  Mesh mesh_;
};

}  // namespace hvdlite::transport::tcp
