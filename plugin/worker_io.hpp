// Whole-message reads and writes on the worker socket, with a deadline on reads. Writes use
// MSG_NOSIGNAL: a dead peer is an error return, never a SIGPIPE (the suite may run inside Python).
#pragma once

#include <cstddef>

namespace fc::plugin {

bool send_all(int fd, const void* data, size_t n);
enum class Recv { Ok, Closed, TimedOut };
Recv recv_all(int fd, void* data, size_t n, double timeout_s);  // timeout_s < 0: no limit

}  // namespace fc::plugin
