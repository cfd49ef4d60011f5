#include "mtrain/launch/launch_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/errors.h"

namespace mtrain::launch {

namespace {

bool to_sockaddr(const std::string& addr, int port, sockaddr_in& sa) {
  std::memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  const std::string ip = resolve_ipv4(addr);
  return !ip.empty() && inet_pton(AF_INET, ip.c_str(), &sa.sin_addr) == 1;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string ntop(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

// The interface holding `ipv4`, "" if none.
std::string interface_with_address(const std::string& ipv4) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if (ntop(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr) == ipv4) name = i->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

}  // namespace

std::string resolve_ipv4(const std::string& host) {
  in_addr a;
  if (inet_pton(AF_INET, host.c_str(), &a) == 1) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr) return "";
  const std::string ip = ntop(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr);
  freeaddrinfo(res);
  return ip;
}

std::string interface_reaching(const std::string& addr) {
  sockaddr_in sa;
  if (!to_sockaddr(addr, 9, sa)) return "";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // connect() on UDP sends nothing
  if (fd < 0) return "";
  std::string name;
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    name = interface_with_address(ntop(local.sin_addr));
  }
  close(fd);
  return name;
}

bool is_local_address(const std::string& ipv4) { return !interface_with_address(ipv4).empty(); }

int tcp_listen(const std::string& addr, int port) {
  sockaddr_in sa;
  if (!to_sockaddr(addr, port, sa)) {
    throw DistributedError(fmt::format("MASTER_ADDR={} does not resolve to an IPv4 address", addr),
                           "set MASTER_ADDR to node 0's address (the same value on every node)");
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw DistributedError(fmt::format("socket() failed: {}", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    const std::string hint = err == EADDRNOTAVAIL ? "NODE_RANK=0 must run on the machine that owns MASTER_ADDR"
                             : err == EADDRINUSE
                                 ? "another job (or a stale one) holds MASTER_PORT; choose a free MASTER_PORT"
                                 : "check MASTER_ADDR / MASTER_PORT";
    throw DistributedError(fmt::format("node 0 cannot listen on {}:{}: {}", addr, port, std::strerror(err)), hint);
  }
  set_nonblocking(fd);
  return fd;
}

int tcp_connect(const std::string& addr, int port, int timeout_ms) {
  sockaddr_in sa;
  if (!to_sockaddr(addr, port, sa)) {
    errno = EHOSTUNREACH;
    return -1;
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = ETIMEDOUT;
  if (poll(&p, 1, timeout_ms) == 1) {
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  }
  if (err != 0) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

int tcp_accept(int listen_fd) { return accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC); }

void tcp_keepalive(int fd) {
  const int on = 1, idle = 10, interval = 5, count = 4;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

LineReader::Status LineReader::next(int fd, std::string& line) {
  for (;;) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return Status::kLine;
    }
    if (buffer_.size() > 4096) return Status::kClosed;  // not our protocol
    char buf[512];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      buffer_.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      return Status::kClosed;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      return Status::kWouldBlock;
    } else {
      return Status::kClosed;
    }
  }
}

bool send_text(int fd, const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = send(fd, text.data() + off, text.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (poll(&p, 1, 1000) <= 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace mtrain::launch
