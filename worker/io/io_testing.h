// Test helpers for worker/io: temporary paths, raw file contents, llm.c
// headers built by hand, and running the Python reference script.
#ifndef ZEROSHARD_WORKER_IO_IO_TESTING_H_
#define ZEROSHARD_WORKER_IO_IO_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "worker/io/data_loader.h"
#include "worker/io/llmc_header.h"

namespace zeroshard::io::testing {

// A fresh directory under TEST_TMPDIR (or /tmp); "" on failure.
std::string MakeTempDir(const std::string& prefix);

bool WriteBytes(const std::string& path, const std::string& bytes);
std::string ReadBytes(const std::string& path);

// A header with the given leading fields, the rest zero, as bytes.
std::string HeaderBytes(const std::vector<int32_t>& fields);

// The raw little-endian bytes of a vector.
template <typename T>
std::string AsBytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// n reproducible fp32 values (normal, sd 0.02) with special bit patterns
// mixed in: -0, +-Inf, NaNs with payloads (quiet and signalling),
// subnormals, the largest finite value, bf16 rounding ties.
std::vector<float> RandomParams(uint64_t n, uint64_t seed);

// Loader options over `files` (vocab_size as given).
DataLoaderOptions LoaderOptions(std::vector<std::string> files, int batch_size,
                                int seq_len, int rank, int world_size,
                                int vocab_size);

// Runs argv (argv[0] a path) with common/subprocess, waiting up to two
// minutes; returns its exit code (-1 if it could not run, was killed or
// timed out) and its stdout+stderr in *out.
int RunCommand(const std::vector<std::string>& argv, std::string* out);

// Path of a data file of this package ("worker/io/llmc_files.py") in the
// test's runfiles.
std::string RunfilePath(const std::string& rel);

// The Python with numpy (Debian's /usr/bin/python3).
inline constexpr char kPython[] = "/usr/bin/python3";

}  // namespace zeroshard::io::testing

#endif  // ZEROSHARD_WORKER_IO_IO_TESTING_H_
