// The launcher's few socket operations (IPv4 TCP, non-blocking) and the
// interface that reaches MASTER_ADDR. Nothing here knows the protocol.
#pragma once

#include <string>

namespace mtrain::launch {

// Resolves a host name or dotted quad to a dotted quad; "" if it does not resolve.
std::string resolve_ipv4(const std::string& host);

// The network interface (e.g. "eth0") this node would use to reach `addr`, "" if unknown.
std::string interface_reaching(const std::string& addr);

// True if `ipv4` is an address of one of this node's interfaces.
bool is_local_address(const std::string& ipv4);

// Listens on addr:port (SO_REUSEADDR, non-blocking). Throws DistributedError naming both.
int tcp_listen(const std::string& addr, int port);
// Connects within `timeout_ms`; returns a non-blocking fd, or -1 with errno set.
int tcp_connect(const std::string& addr, int port, int timeout_ms);
// Accepts one pending connection (non-blocking fd), -1 if none.
int tcp_accept(int listen_fd);
// Short keepalive probes so a vanished peer machine is noticed in about 30 s.
void tcp_keepalive(int fd);

// Line-oriented reading from a non-blocking socket.
class LineReader {
 public:
  enum class Status { kLine, kWouldBlock, kClosed };
  // One complete line (without '\n') in `line`, or why there is none.
  Status next(int fd, std::string& line);

 private:
  std::string buffer_;
};

// Sends all of `text` (MSG_NOSIGNAL; the socket is small-message only); false on error.
bool send_text(int fd, const std::string& text);

}  // namespace mtrain::launch
