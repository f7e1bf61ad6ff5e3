// io/atomic_file: a result file is the previous one or the whole new one, never part of it, and no
// temporary is left behind — on success, on a failed write (file-size limit standing in for a full
// disk), on an exception, and on SIGTERM in the middle of the write. Non-regular targets and
// output == input are refused without opening them (a FIFO would block forever). The dangerous cases
// run in a forked child under alarm(), so a hang or crash fails the test instead of ending the run.
#include "tests/catch.hpp"
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/atomic_file.hpp"
#include "io/errors.hpp"

namespace fs = std::filesystem;
using fc::io::write_file_atomic;

namespace {

struct Scratch {
  fs::path dir;
  Scratch() {
    dir = fs::temp_directory_path() / ("fc_atomic_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string at(const std::string& name) const { return (dir / name).string(); }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Hidden temporaries of target `name` in `dir` (".name.XXXXXX").
int temporaries(const fs::path& dir, const std::string& name) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("." + name + ".", 0) == 0) ++n;
  return n;
}

// Runs `body` in a child process with a 10 s alarm; returns the raw wait status.
template <class F>
int in_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(10);
    body();
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Exit code of a child that catches FileError(Io) as 3 and anything else as 4.
template <class F>
int exit_code_of(F write) {
  const int status = in_child([&] {
    try {
      write();
    } catch (const fc::io::FileError& e) {
      ::_exit(e.fault == fc::io::FileFault::Io ? 3 : 4);
    } catch (...) {
      ::_exit(4);
    }
  });
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("write_file_atomic writes, replaces, and leaves no temporary", "[cpu]") {
  Scratch s;
  const std::string path = s.at("out.bin");
  write_file_atomic(path, "first");
  CHECK(slurp(path) == "first");
  write_file_atomic(path, std::string(100000, 'x'));
  CHECK(slurp(path) == std::string(100000, 'x'));
  CHECK(temporaries(s.dir, "out.bin") == 0);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK((st.st_mode & 0777) == (0666 & ~mask));  // a result file's usual mode, not mkstemp's 0600
}

TEST_CASE("write_file_atomic refuses a FIFO, a directory, a missing folder and output == input", "[cpu]") {
  Scratch s;
  const std::string fifo = s.at("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(exit_code_of([&] { write_file_atomic(fifo, "x"); }) == 3);  // 128 + SIGALRM if it blocked
  CHECK(fs::is_fifo(fifo));
  CHECK(exit_code_of([&] { write_file_atomic(s.dir.string(), "x"); }) == 3);
  CHECK(fs::is_directory(s.dir));
  CHECK(exit_code_of([&] { write_file_atomic(s.at("no/such/folder/x"), "x"); }) == 3);

  const std::string in = s.at("in.safetensors");
  write_file_atomic(in, "input bytes");
  REQUIRE(::link(in.c_str(), s.at("hardlink").c_str()) == 0);
  for (const std::string& out : {in, s.dir.string() + "/./in.safetensors", s.at("hardlink")}) {
    CAPTURE(out);
    CHECK(exit_code_of([&] { write_file_atomic(out, "clobbered", {in}); }) == 3);
  }
  CHECK(slurp(in) == "input bytes");
  CHECK(temporaries(s.dir, "in.safetensors") == 0);
}

TEST_CASE("write_file_atomic keeps the previous file when the write fails or throws", "[cpu]") {
  Scratch s;
  const std::string path = s.at("result.json");
  write_file_atomic(path, "previous");
  // A file-size limit makes write() fail with EFBIG, as a full disk makes it fail with ENOSPC.
  CHECK(exit_code_of([&] {
          ::signal(SIGXFSZ, SIG_IGN);
          struct rlimit lim {
            65536, 65536
          };
          ::setrlimit(RLIMIT_FSIZE, &lim);
          write_file_atomic(path, std::string(1 << 20, 'y'));
        }) == 3);
  CHECK(slurp(path) == "previous");
  CHECK(temporaries(s.dir, "result.json") == 0);
  // With SIGXFSZ at its default the limit kills the process: the handler still removes the temporary.
  const int status = in_child([&] {
    struct rlimit lim {
      65536, 65536
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    write_file_atomic(path, std::string(1 << 20, 'y'));
  });
  CHECK(WIFSIGNALED(status));
  CHECK(slurp(path) == "previous");
  CHECK(temporaries(s.dir, "result.json") == 0);
  // An exception from the producer abandons the write.
  CHECK_THROWS_AS(write_file_atomic(path,
                                    [](const fc::io::ChunkSink& sink) {
                                      sink("half of it");
                                      throw std::runtime_error("producer failed");
                                    }),
                  std::runtime_error);
  CHECK(slurp(path) == "previous");
  CHECK(temporaries(s.dir, "result.json") == 0);
}

TEST_CASE("write_file_atomic leaves the previous file and no temporary on SIGTERM mid-write", "[cpu]") {
  Scratch s;
  const std::string path = s.at("cases.safetensors");
  write_file_atomic(path, "previous");
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    CAPTURE(sig);
    const int status = in_child([&] {
      ::signal(sig, SIG_DFL);  // as in a plain program: the test framework's own handler is not ours to chain to
      write_file_atomic(path, [&](const fc::io::ChunkSink& sink) {
        sink(std::string(1 << 16, 'a'));  // a first chunk is on disk in the temporary...
        ::raise(sig);                     // ...when the signal arrives
        sink(std::string(1 << 16, 'b'));
      });
    });
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);  // the signal still ends the process, with its own status
    CHECK(slurp(path) == "previous");
    CHECK(temporaries(s.dir, "cases.safetensors") == 0);
  }
}
