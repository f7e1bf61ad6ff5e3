#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "io/errors.hpp"

namespace fc::io {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FileError(Fault::Io, path, what);
}

std::string errno_text() { return std::strerror(errno); }

// The file behind `path`, when it exists: device and inode identify it across links and spellings.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace

void check_output_path(const std::string& path, const std::vector<std::string>& inputs) {
  if (path.empty()) fail(path, "empty output path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, "the output exists and is not a regular file (refusing to write to it)");
  for (const std::string& in : inputs)
    if (!in.empty() && same_file(path, in)) fail(path, "the output is the same file as the input " + quoted(in));
}

void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs) {
  check_output_path(path, inputs);
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string tmp = (dir / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail(path, "cannot create a temporary file beside it: " + errno_text());
  auto abandon = [&](const std::string& what) {
    const std::string why = what + ": " + errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, why);
  };
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) abandon("write failed");
    done += size_t(n);
  }
  // mkstemp creates the file 0600; a result file gets the usual 0644 less the umask.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) abandon("cannot set the file's mode");
  if (::fsync(fd) != 0) abandon("fsync failed");
  if (::close(fd) != 0) {
    const std::string why = "close failed: " + errno_text();
    ::unlink(tmp.c_str());
    fail(path, why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = "cannot rename the temporary file over it: " + errno_text();
    ::unlink(tmp.c_str());
    fail(path, why);
  }
  // The rename itself is durable once the folder's entry is on disk.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace fc::io
