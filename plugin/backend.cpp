#include "plugin/backend.hpp"

#include <cstdlib>
#include <new>

#include "plugin/worker.hpp"

namespace fc::plugin {
namespace {

class InProcess final : public Backend {
 public:
  explicit InProcess(const fc_kernel* k) : meta_(validate(k, "the kernel")), ex_(k), k_(k) {
    const std::string err = ex_.init();
    if (!err.empty()) throw LoadError(meta_.name + ": " + err);
  }
  ~InProcess() override { std::free(arena_); }
  Meta meta() const override { return meta_; }
  unsigned char* arena(uint64_t bytes) override {
    if (bytes > size_) {
      std::free(arena_);
      size_ = (bytes + 4095) / 4096 * 4096;
      arena_ = static_cast<unsigned char*>(std::aligned_alloc(4096, size_));
      if (!arena_) throw std::bad_alloc();
    }
    return arena_;
  }
  bool supports(const CallPlan& plan, std::string*) override { return ex_.supports(plan); }
  CallResult run(const CallPlan& plan) override { return ex_.call(plan, arena_); }
  const fc_kernel* in_process_kernel() const override { return k_; }

 private:
  Meta meta_;
  Executor ex_;
  const fc_kernel* k_;
  unsigned char* arena_ = nullptr;
  uint64_t size_ = 0;
};

class Isolated final : public Backend {
 public:
  Isolated(std::vector<std::string> argv, double timeout_s, std::vector<std::string> env)
      : client_(std::move(argv), timeout_s, std::move(env)) {
    meta_ = client_.start();
  }
  Meta meta() const override { return meta_; }
  unsigned char* arena(uint64_t bytes) override { return client_.arena(bytes); }
  bool supports(const CallPlan& plan, std::string* fault) override { return client_.supports(plan, fault); }
  CallResult run(const CallPlan& plan) override { return client_.call(plan); }
  int restarts() const override { return client_.restarts(); }
  int faults() const override { return client_.faults(); }

 private:
  WorkerClient client_;
  Meta meta_;
};

}  // namespace

std::unique_ptr<Backend> in_process(const fc_kernel* k) { return std::make_unique<InProcess>(k); }

std::unique_ptr<Backend> isolated(std::vector<std::string> worker_argv, double timeout_s,
                                  std::vector<std::string> env) {
  return std::make_unique<Isolated>(std::move(worker_argv), timeout_s, std::move(env));
}

}  // namespace fc::plugin
