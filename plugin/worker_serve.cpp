// The worker's side of isolation (worker.hpp): greet, then answer supports/call requests on the
// shared arena until the parent goes away. A broken CUDA context ends the worker after its reply.
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "plugin/worker.hpp"
#include "plugin/worker_io.hpp"
#include "plugin/worker_proto.hpp"

namespace fc::plugin {
namespace {

template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  const size_t n = std::min(s.size(), N - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = 0;
}

}  // namespace

int serve(const fc_kernel* k, const std::string& load_error) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // the suite gone: so is its worker, even one stuck in a kernel
  // The kernel's crash kills the worker with its own signal, which the suite names (a sanitizer's or
  // an interpreter's handler would turn it into an exit status or a report).
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(sig, SIG_DFL);
  const int sock = proto::kSockFd, mem = proto::kMemFd;
  proto::Hello hello;
  std::unique_ptr<Executor> ex;
  std::string error = load_error;
  if (error.empty()) {
    try {
      const Meta m = validate(k, "the kernel");
      put(hello.name, m.name);
      hello.device_type = m.device_type, hello.writes_lse = m.writes_lse, hello.backward = m.backward;
      hello.abi_version = m.abi_version, hello.declared = m.declared, hello.merge = m.merge;
      ex = std::make_unique<Executor>(k);
      error = ex->init();
      if (!error.empty()) error = m.name + ": " + error;
    } catch (const LoadError& e) {
      error = e.what();
    }
  }
  hello.ok = error.empty();
  put(hello.error, error);
  if (!send_all(sock, &hello, sizeof hello) || !hello.ok) return 2;

  unsigned char* map = nullptr;
  uint64_t mapped = 0;
  for (;;) {
    auto req = std::make_unique<proto::Request>();
    if (recv_all(sock, req.get(), sizeof *req, -1) != Recv::Ok || req->magic != proto::kMagic) return 0;
    if (req->arena_bytes != mapped) {
      if (map) munmap(map, mapped);
      void* m = mmap(nullptr, req->arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
      if (m == MAP_FAILED) return 4;
      map = static_cast<unsigned char*>(m), mapped = req->arena_bytes;
    }
    proto::Reply rep;
    if (req->op == proto::kSupports) {
      rep.status = ex->supports(req->plan);
    } else if (req->plan.bytes > mapped) {
      rep.status = 1;
      put(rep.error, "the arena is smaller than the call's plan");
    } else {
      const CallResult r = ex->call(req->plan, map);
      rep.status = r.ok ? 0 : 1, rep.fatal = r.fatal;
      put(rep.error, r.error);
    }
    if (!send_all(sock, &rep, sizeof rep) || rep.fatal) return rep.fatal ? 3 : 0;
  }
}

int worker_main(int argc, char** argv) {
  if (argc < 3 || !std::getenv(proto::kFdsEnv)) {
    std::fprintf(stderr, "flashcheck: usage: flashcheck __worker PLUGIN.so (started by check --plugin)\n");
    return 2;
  }
  try {
    return serve(load_plugin(argv[2]), "");
  } catch (const LoadError& e) {
    return serve(nullptr, e.what());
  }
}

}  // namespace fc::plugin
