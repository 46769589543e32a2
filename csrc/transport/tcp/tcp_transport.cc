#include "transport/tcp/tcp_transport.h"

#include "transport/tcp/tcp_communicator.h"

namespace hvdlite::transport::tcp {

std::unique_ptr<Communicator> TcpTransport::communicator(const std::vector<int>& global_ranks) {
  return std::make_unique<TcpCommunicator>(mesh_, global_ranks);
}

}  // namespace hvdlite::transport::tcp
