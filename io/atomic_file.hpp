// Writing a result file so that a reader never sees half of it: the bytes go to a temporary file in
// the target's folder, are flushed and fsync'd, and the temporary is renamed over the target (rename
// is atomic within one file system). An interrupted or failed write leaves the previous file intact
// and no temporary behind. Every output flashcheck writes (tensor files, reports, regression cases)
// goes through here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fc::io {

// Writes `bytes` to `path` atomically. Refuses (FileError, Fault::Io) a target that exists and is
// not a regular file (a FIFO, a device, a directory), a target that is the same file as one of
// `inputs` (output == input would destroy the input before it is read in full), and any failed
// write, flush, fsync or rename; on failure the temporary file is removed.
void write_file_atomic(const std::string& path, std::string_view bytes, const std::vector<std::string>& inputs = {});

// The checks of write_file_atomic alone, for a command to run before its (possibly long) work, so
// that a bad output path is refused up front rather than after minutes of computation.
void check_output_path(const std::string& path, const std::vector<std::string>& inputs = {});

}  // namespace fc::io
