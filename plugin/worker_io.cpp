#include "plugin/worker_io.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

namespace fc::plugin {

bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

Recv recv_all(int fd, void* data, size_t n, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s < 0 ? 0 : timeout_s);
  char* p = static_cast<char*>(data);
  while (n > 0) {
    int wait_ms = -1;
    if (timeout_s >= 0) {
      const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      if (left <= 0) return Recv::TimedOut;
      wait_ms = int(left * 1000) + 1;
    }
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return Recv::Closed;
    if (ready == 0) continue;  // the deadline check above decides
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return Recv::Closed;
    p += r, n -= size_t(r);
  }
  return Recv::Ok;
}

}  // namespace fc::plugin
