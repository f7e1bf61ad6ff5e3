// libflashcheck.so: the C API of include/flashcheck/flashcheck.h. flashcheck_check and flashcheck_audit
// copy their request structs into the CLI's own requests (cli/requests.hpp) and run the same
// run_check and run_audit as `flashcheck check` and `audit` (the same reports, replay lines and exit
// codes) on a kernel the caller provides; flashcheck_run parses a command line into those requests
// with the CLI's parser. Nothing but the flashcheck_* functions is exported (capi/exports.map), and
// no exception crosses the C boundary.
#include <flashcheck/flashcheck.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <new>
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
#include "cli/requests.hpp"
#include "io/errors.hpp"
#include "plugin/backend.hpp"
#include "plugin/dl_copy.hpp"
#include "plugin/executor.hpp"
#include "plugin/plugin_kernel.hpp"
#include "plugin/worker.hpp"
#include "plugin/worker_proto.hpp"

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

using fc::cli::UsageError;

std::string str(const char* s) { return s ? s : ""; }

std::vector<std::string> list(const char* what, const char* const* items) {
  std::vector<std::string> v;
  for (const char* const* a = items; a && *a; ++a) v.emplace_back(*a);
  for (const std::string& s : v)
    if (s.empty()) throw UsageError(fmt::format("{}: an empty entry", what));
  return v;
}

// A struct's size, checked against the one version this library knows.
template <typename T>
void check_size(const T* p, const char* name) {
  if (!p) throw UsageError(fmt::format("a NULL {}", name));
  if (p->struct_size != sizeof(T))
    throw UsageError(fmt::format("{}.struct_size is {}, expected {} (<flashcheck/flashcheck.h> version 1)", name,
                                 p->struct_size, sizeof(T)));
}

bool flag(const char* name, int32_t v) {
  if (v != 0 && v != 1) throw UsageError(fmt::format("{} is {}, expected 0 or 1", name, v));
  return v == 1;
}

std::string oracle_name(int32_t v) {
  switch (v) {
    case FLASHCHECK_ORACLE_AUTO: return "auto";
    case FLASHCHECK_ORACLE_CPU: return "cpu";
    case FLASHCHECK_ORACLE_GPU: return "gpu";
    default: throw UsageError(fmt::format("oracle is {}, expected FLASHCHECK_ORACLE_AUTO, _CPU or _GPU", v));
  }
}

std::string layout_name(int32_t v) {
  switch (v) {
    case FLASHCHECK_LAYOUT_MIXED: return "mixed";
    case FLASHCHECK_LAYOUT_COMPACT: return "compact";
    default: throw UsageError(fmt::format("layout is {}, expected FLASHCHECK_LAYOUT_MIXED or _COMPACT", v));
  }
}

// The subject of a request as the CLI's commands take an embedded kernel: valid for this call.
class Embedded {
 public:
  explicit Embedded(const flashcheck_subject* s) {
    check_size(s, "flashcheck_subject");
    kernel_ = s->kernel;
    worker_ = list("worker_argv", s->worker_argv);
    env_ = list("worker_env", s->worker_env);
    if (!kernel_ && worker_.empty()) throw UsageError("the subject has neither a kernel nor a worker command");
    if (kernel_ && !worker_.empty()) throw UsageError("the subject has both a kernel and a worker command");
    for (const std::string& e : env_)
      if (e.find('=') == std::string::npos || e.front() == '=')
        throw UsageError(fmt::format("worker_env entry {}: expected KEY=VALUE", e));
    buf_ = std::make_unique<CallbackBuf>(s->write, s->write_ctx);
    out_ = std::make_unique<std::ostream>(buf_.get());
    ext_.out = s->write ? out_.get() : nullptr;
    ext_.replay_prefix = str(s->replay_prefix);
    ext_.open = [this](const fc::cli::PluginArgs& a) {
      using namespace fc;
      const plugin::PluginKernelOptions so =
          cli::subject_options(a, kernel_ ? "a kernel in this process" : "a kernel served by " + worker_.back());
      std::unique_ptr<plugin::Backend> b =
          kernel_ ? plugin::in_process(kernel_) : plugin::isolated(worker_, a.timeout_s, env_);
      return std::make_unique<plugin::PluginKernel>(std::move(b), so);
    };
  }
  const fc::cli::ExternalKernel* ext() const { return &ext_; }
  std::ostream& out() { return ext_.out ? *ext_.out : std::cout; }

 private:
  const fc_kernel* kernel_ = nullptr;
  std::vector<std::string> worker_, env_;
  std::unique_ptr<CallbackBuf> buf_;
  std::unique_ptr<std::ostream> out_;
  fc::cli::ExternalKernel ext_;
};

fc::cli::CheckRequest to_check(const flashcheck_check_request& q) {
  fc::cli::CheckRequest r;
  if (q.cases != 0) r.cases = q.cases;
  r.seed_given = flag("seed_given", q.seed_given);
  r.seed = q.seed;
  r.law = str(q.law), r.reproduce = str(q.reproduce), r.case_file = str(q.case_file), r.inputs = str(q.inputs);
  r.regressions = str(q.regressions), r.json_out = str(q.json_out);
  r.save = flag("save_regressions", q.save_regressions);
  if (q.timeout_s != 0) r.plugin.timeout_s = q.timeout_s;
  r.plugin.layout = layout_name(q.layout);
  r.plugin.max_n = q.max_n, r.plugin.max_batch = q.max_batch, r.plugin.max_heads = q.max_heads;
  r.plugin.shape_buckets = flag("shape_buckets", q.shape_buckets);
  r.oracle = oracle_name(q.oracle);
  switch (q.on_inconclusive) {
    case FLASHCHECK_INCONCLUSIVE_EXIT3: break;
    case FLASHCHECK_INCONCLUSIVE_FAIL: r.fail_inconclusive = true; break;
    case FLASHCHECK_INCONCLUSIVE_PASS: r.allow_inconclusive = true; break;
    default:
      throw UsageError(fmt::format("on_inconclusive is {}, expected FLASHCHECK_INCONCLUSIVE_EXIT3, _FAIL or _PASS",
                                   q.on_inconclusive));
  }
  if (q.shrink_faults != 0) r.shrink_faults = q.shrink_faults;
  if (q.replay_repeats != 0) r.replay_repeats = q.replay_repeats == -1 ? 0 : q.replay_repeats;
  r.no_progress = flag("no_progress", q.no_progress);
  return r;
}

fc::cli::AuditRequest to_audit(const flashcheck_audit_request& q) {
  fc::cli::AuditRequest r;
  if (q.out) r.out = q.out;
  r.quick = flag("quick", q.quick);
  r.accumulation = flag("accumulation", q.accumulation);
  r.kernels = list("kernels", q.kernels), r.dtypes = list("dtypes", q.dtypes);
  r.regimes = list("regimes", q.regimes), r.cases = list("cases", q.cases);
  if (flag("seed_given", q.seed_given)) r.seed = q.seed;
  if (q.timeout_s != 0) r.plugin.timeout_s = q.timeout_s;
  r.plugin.layout = layout_name(q.layout);
  r.jobs = q.jobs;
  r.oracle = oracle_name(q.oracle);
  r.junit = str(q.junit), r.shard = str(q.shard);
  r.as_json = flag("print_json", q.print_json);
  return r;
}

// What a result points into, freed by flashcheck_result_free.
struct Held {
  std::string error, json;
  std::vector<fc::cli::LawOutcome> outcomes;
  std::vector<flashcheck_law_result> laws;
};

int32_t status_code(const std::string& s) {
  return s == "pass"           ? FLASHCHECK_LAW_PASS
         : s == "fail"         ? FLASHCHECK_LAW_FAIL
         : s == "inconclusive" ? FLASHCHECK_LAW_INCONCLUSIVE
                               : FLASHCHECK_LAW_NOT_APPLICABLE;
}

int publish(flashcheck_result* res, std::unique_ptr<Held> h, int code) {
  for (const fc::cli::LawOutcome& o : h->outcomes)
    h->laws.push_back({sizeof(flashcheck_law_result), o.id.c_str(), status_code(o.status), o.cases, o.regression_cases,
                       o.declined, o.message.c_str()});
  res->exit_code = code;
  res->error = h->error.c_str();
  res->json = h->json.c_str();
  res->json_size = h->json.size();
  res->laws = h->laws.data();
  res->num_laws = h->laws.size();
  res->law_size = sizeof(flashcheck_law_result);
  res->internal = h.release();
  return code;
}

// Runs `body` (which returns an Outcome) for a result: every exception is exit 2 with one line.
template <typename Body>
int run_into(flashcheck_result* res, Body body) {
  if (!res || res->struct_size != sizeof(flashcheck_result)) return fc::cli::kExitUsage;
  const size_t size = res->struct_size;
  std::memset(static_cast<void*>(res), 0, size);
  res->struct_size = size;
  auto h = std::make_unique<Held>();
  fc::plugin::allow_producer(false);  // an embedder's kernel runs on its framework's streams (executor.hpp)
  try {
    fc::cli::Outcome o = body();
    h->json = std::move(o.json);
    h->outcomes = std::move(o.laws);
    return publish(res, std::move(h), o.code);
  } catch (const std::bad_alloc&) {
    h->error = "out of memory";
  } catch (const std::exception& e) {
    h->error = e.what();
  } catch (...) {
    h->error = "an unknown error";
  }
  for (char& c : h->error)
    if (c == '\n' || c == '\r') c = ' ';
  return publish(res, std::move(h), fc::cli::kExitUsage);
}

}  // namespace

extern "C" int flashcheck_check(const flashcheck_check_request* request, flashcheck_result* result) {
  return run_into(result, [request] {
    check_size(request, "flashcheck_check_request");
    Embedded sub(&request->subject);
    fc::cli::Outcome o = fc::cli::run_check(to_check(*request), sub.ext());
    sub.out().flush();
    return o;
  });
}

extern "C" int flashcheck_audit(const flashcheck_audit_request* request, flashcheck_result* result) {
  return run_into(result, [request] {
    check_size(request, "flashcheck_audit_request");
    Embedded sub(&request->subject);
    fc::cli::Outcome o = fc::cli::run_audit(to_audit(*request), sub.ext());
    sub.out().flush();
    return o;
  });
}

extern "C" void flashcheck_result_free(flashcheck_result* result) {
  if (!result || result->struct_size != sizeof(flashcheck_result) || !result->internal) return;
  delete static_cast<Held*>(result->internal);
  result->internal = nullptr;
  result->error = result->json = nullptr;
  result->laws = nullptr;
  result->json_size = result->num_laws = 0;
}

extern "C" int flashcheck_run(const flashcheck_subject* subject, int argc, const char* const* argv, char* error,
                              size_t error_size) {
  using namespace fc;
  put_error(error, error_size, "");
  plugin::allow_producer(false);
  try {
    Embedded sub(subject);
    CLI::App app{"flashcheck (C API)"};
    app.require_subcommand(1);
    const std::vector<std::pair<std::string, cli::Action>> runs = {{"check", cli::setup_check(app, sub.ext())},
                                                                   {"audit", cli::setup_audit(app, sub.ext())}};
    std::vector<std::string> args = {"flashcheck"};
    for (int i = 0; i < argc; ++i) args.emplace_back(argv && argv[i] ? argv[i] : "");
    std::vector<const char*> ptrs;
    for (const std::string& s : args) ptrs.push_back(s.c_str());
    try {
      app.parse(int(ptrs.size()), const_cast<char**>(ptrs.data()));
    } catch (const CLI::CallForHelp&) {
      for (const auto& [name, run] : runs)
        if (app.got_subcommand(name)) sub.out() << app.get_subcommand(name)->help();
      sub.out().flush();
      return cli::kExitPass;
    } catch (const CLI::ParseError& e) {
      throw UsageError(e.what());
    }
    for (const auto& [name, run] : runs)
      if (app.got_subcommand(name)) {
        const int code = run();
        sub.out().flush();
        return code;
      }
    throw UsageError("the first argument must be check or audit");
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
