// libflashcheck.so: the C API of include/flashcheck/flashcheck.h. `flashcheck_run` is the CLI's
// `check` or `audit` (cli/cmd_check.cpp, cli/cmd_audit.cpp: the same options, reports, replay lines
// and exit codes) on a kernel the caller provides; nothing but the flashcheck_* functions is exported (capi/exports.map), and no
// exception crosses the C boundary.
#include <flashcheck/flashcheck.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/plugin_options.hpp"
#include "io/errors.hpp"
#include "kernels/plugin/backend.hpp"
#include "kernels/plugin/dl_copy.hpp"
#include "kernels/plugin/executor.hpp"
#include "kernels/plugin/subject.hpp"
#include "kernels/plugin/worker.hpp"
#include "kernels/plugin/worker_proto.hpp"

namespace {

// A streambuf handing each line (or each flush) to the caller's write callback.
class CallbackBuf : public std::streambuf {
 public:
  CallbackBuf(flashcheck_write_fn write, void* ctx) : write_(write), ctx_(ctx) {}
  ~CallbackBuf() override { sync(); }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    line_ += char(c);
    if (c == '\n') sync();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    line_.append(s, size_t(n));
    if (line_.find('\n') != std::string::npos) sync();
    return n;
  }
  int sync() override {
    if (!line_.empty() && write_) write_(line_.data(), line_.size(), ctx_);
    line_.clear();
    return 0;
  }

 private:
  flashcheck_write_fn write_;
  void* ctx_;
  std::string line_;
};

void put_error(char* error, size_t size, std::string what) {
  for (char& c : what)
    if (c == '\n' || c == '\r') c = ' ';
  if (!error || size == 0) return;
  const size_t n = std::min(what.size(), size - 1);
  std::memcpy(error, what.data(), n);
  error[n] = 0;
}

}  // namespace

extern "C" int flashcheck_run(const fc_kernel* kernel, const char* const* worker_argv, const char* replay_prefix,
                              int argc, const char* const* argv, flashcheck_write_fn write, void* ctx, char* error,
                              size_t error_size) {
  using namespace fc;
  put_error(error, error_size, "");
  plugin::allow_producer(false);  // an embedder's kernel runs on its framework's streams (executor.hpp)
  try {
    if (!kernel && (!worker_argv || !worker_argv[0])) throw cli::UsageError("neither a kernel nor a worker command");
    std::vector<std::string> worker;
    for (const char* const* a = worker_argv; a && *a; ++a) worker.emplace_back(*a);
    CallbackBuf buf(write, ctx);
    std::ostream out(&buf);
    cli::ExternalKernel ext;
    ext.out = write ? &out : nullptr;
    ext.replay_prefix = replay_prefix ? replay_prefix : "";
    ext.open = [&](const cli::PluginArgs& a) {
      const plugin::SubjectOptions so = cli::subject_options(
          a, kernel ? "a kernel in this process" : "a kernel served by " + worker.back());
      std::unique_ptr<plugin::Backend> b = kernel ? plugin::in_process(kernel) : plugin::isolated(worker, a.timeout_s);
      return std::make_unique<plugin::Subject>(std::move(b), so);
    };
    CLI::App app{"flashcheck (C API)"};
    app.require_subcommand(1);
    const std::vector<std::pair<std::string, cli::Run>> runs = {{"check", cli::setup_check(app, &ext)},
                                                                {"audit", cli::setup_audit(app, &ext)}};
    std::vector<std::string> args = {"flashcheck"};
    for (int i = 0; i < argc; ++i) args.emplace_back(argv[i] ? argv[i] : "");
    std::vector<const char*> ptrs;
    for (const std::string& s : args) ptrs.push_back(s.c_str());
    try {
      app.parse(int(ptrs.size()), const_cast<char**>(ptrs.data()));
    } catch (const CLI::CallForHelp&) {
      for (const auto& [name, run] : runs)
        if (app.got_subcommand(name)) out << app.get_subcommand(name)->help();
      return cli::kExitPass;
    } catch (const CLI::ParseError& e) {
      throw cli::UsageError(e.what());
    }
    for (const auto& [name, run] : runs)
      if (app.got_subcommand(name)) {
        const int code = run();
        out.flush();
        return code;
      }
    throw cli::UsageError("the first argument must be check or audit");
  } catch (const std::exception& e) {
    put_error(error, error_size, e.what());
    return cli::kExitUsage;
  } catch (...) {
    put_error(error, error_size, "an unknown error");
    return cli::kExitUsage;
  }
}

extern "C" int flashcheck_serve(const fc_kernel* kernel, const char* load_error) {
  if (!std::getenv(fc::plugin::proto::kFdsEnv)) {
    std::fprintf(stderr, "flashcheck_serve: not started as a worker by flashcheck_run\n");
    return 2;
  }
  fc::plugin::allow_producer(false);  // as flashcheck_run's: the embedder's framework picks its streams
  try {
    return fc::plugin::serve(kernel, kernel ? "" : load_error && *load_error ? load_error : "no kernel to serve");
  } catch (...) {
    return 2;
  }
}

extern "C" int flashcheck_copy(const DLTensor* src, const DLTensor* dst, char* error, size_t error_size) {
  try {
    const std::string why = !src || !dst ? "a NULL tensor" : fc::plugin::dl_copy(*src, *dst);
    put_error(error, error_size, why);
    return why.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    put_error(error, error_size, e.what());
    return 1;
  }
}

// 1 inside a supports() call of flashcheck's start-up probe (what the kernel accepts at all), 0 in one
// that gates a case: a Python kernel's supports() sees it as Problem.probing.
extern "C" int flashcheck_probing(void) { return fc::plugin::probing_supports() ? 1 : 0; }

extern "C" const char* flashcheck_version(void) { return "flashcheck " FLASHCHECK_VERSION " (plugin ABI 2)"; }
