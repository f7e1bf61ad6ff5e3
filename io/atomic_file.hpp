// Writing a result file so that a reader never sees half of it: the bytes go to a temporary file in
// the target's folder (".NAME.XXXXXX", created with O_EXCL and mode 0666 less the umask), every
// write is checked, the file is fsync'd, and the temporary is renamed over the target (rename is
// atomic within one file system). A failed write (full disk, file-size limit, I/O error) leaves the
// previous file intact and no temporary behind; so does SIGINT, SIGTERM, SIGHUP or SIGXFSZ during the
// write (a handler removes the temporaries in flight, then the signal takes its default course).
// Only SIGKILL or a power cut can leave a hidden ".NAME.XXXXXX" beside an intact target. Every output
// flashcheck writes (tensor files, reports, regression cases, fuzz failures) goes through here.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace fc::io {

// Writes `bytes` to `path` atomically. Refuses (FileError, FileFault::Io) a target that exists and is
// not a regular file (a FIFO would block, a device or directory is not a result file), a target
// that is the same file as one of `inputs` (output == input, by device and inode, so links and other
// spellings count), and any failed write, fsync, close or rename; on failure the temporary is removed.
// A target that is a symbolic link is replaced by the new file (the link's destination is untouched).
void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs = {});

// The same for output produced in pieces (large files need not be held in memory twice): `produce`
// calls `sink` with consecutive chunks. An exception from `produce` abandons the write and propagates.
using ChunkSink = std::function<void(std::string_view)>;
void write_file_atomic(const std::string& path, const std::function<void(const ChunkSink& sink)>& produce,
                       const std::vector<std::string>& inputs = {});

// The checks of write_file_atomic alone, for a command to run before its (possibly long) work, so
// that a bad output path is refused up front rather than after minutes of computation. Also refuses
// a target whose folder does not exist.
void check_output_path(const std::string& path, const std::vector<std::string>& inputs = {});

}  // namespace fc::io
