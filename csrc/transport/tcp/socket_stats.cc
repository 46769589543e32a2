// Apart from socket.cc: the kernel's struct tcp_info with tcpi_bytes_sent
// (Linux 4.19) comes from <linux/tcp.h>, which clashes with <netinet/tcp.h>.
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "transport/tcp/socket.h"

namespace hvdlite::transport::tcp {

uint64_t Socket::bytesSent() const {
  struct tcp_info info = {};
  socklen_t length = sizeof(info);
  if (fd_ < 0 || getsockopt(fd_, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return 0;
  // An older kernel fills less of the struct: its bytes_sent stays 0.
  // Retransmissions (a tail loss probe on a loaded machine resends 32 KiB
  // that had arrived) are not what the collective moved.
  return info.tcpi_bytes_sent - info.tcpi_bytes_retrans;
}

}  // namespace hvdlite::transport::tcp
