// The messages between the suite and its worker process (worker.hpp), over a UNIX socket pair. The
// tensors themselves never cross the socket: they are in the shared arena (a memfd both map), and a
// request carries only the call's plan. Plain structs, both ends built from the same source.
#pragma once

#include <cstdint>

#include "plugin/abi_map.hpp"
#include "plugin/loader.hpp"

namespace fc::plugin::proto {

constexpr uint32_t kMagic = 0x66633033;  // "fc03"
constexpr int kSockFd = 3;               // the fds a worker inherits
constexpr int kMemFd = 4;
constexpr const char* kFdsEnv = "FLASHCHECK_WORKER_FDS";  // "3,4": set for the worker

enum Op : uint32_t { kSupports = 1, kCall = 2 };

struct Hello {
  uint32_t magic = kMagic;
  int32_t ok = 0;  // 0: the worker cannot serve; `error` says why
  int32_t device_type = 0;
  int32_t writes_lse = 0;
  int32_t backward = 0;
  int32_t abi_version = 0;
  int32_t merge = 0;  // a merge-state kernel (served in the flashcheck process only)
  Declared declared;  // the kernel's declarations (plain data)
  char name[72]{};
  char error[1024]{};
};

struct Request {
  uint32_t magic = kMagic;
  uint32_t op = kSupports;
  uint64_t arena_bytes = 0;  // the memfd's current size: the worker maps that much
  CallPlan plan;
};

struct Reply {
  uint32_t magic = kMagic;
  int32_t status = 0;  // kSupports: nonzero = supported; kCall: 0 = success
  int32_t fatal = 0;   // the worker's CUDA context is broken: it exits after this reply
  char error[2048]{};
};

}  // namespace fc::plugin::proto
