// The C++ side of gpt2_reference.py (the PyTorch GPT-2 used by the parity
// test and the benchmark): writes its input directory, runs it with Debian's
// /usr/bin/python3, reads its outputs. Test and benchmark support only.
//
// Files are read and written through common/env (DefaultEnv()).
//
// Errors: every function returns a Status naming the file or command that
// failed (FAILED_PRECONDITION when python3 or torch is missing).
// Thread-compatible: no shared state.
#ifndef ZEROSHARD_WORKER_GPT2_REFERENCE_IO_H_
#define ZEROSHARD_WORKER_GPT2_REFERENCE_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "common/env/files.h"
#include "worker/gpt2/config.h"

namespace zeroshard::gpt2 {

// What gpt2_reference.py runs (see its docstring).
struct ReferenceRun {
  Config config;
  int B = 0, T = 0;
  int steps = 0;  // AdamW steps; 0: one forward/backward, no update
  int threads = 1;
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  std::vector<float> params;  // initial, memory order
  std::vector<int> tokens;    // [max(steps,1)][2][B][T] inputs, targets
};

// Random parameters for tests: matrices N(0, 0.08^2), LayerNorm weights
// 1 + N(0, 0.1^2), biases and LayerNorm shifts N(0, 0.05^2); padded wte rows
// too. Deterministic in seed.
std::vector<float> RandomParams(const ParamLayout& layout, uint64_t seed);
// n tokens uniform in [0, vocab).
std::vector<int> RandomTokens(size_t n, int vocab, uint64_t seed);

// A fresh directory under $TEST_TMPDIR (or /tmp).
absl::StatusOr<std::string> MakeTempDir(const std::string& prefix);

// Finds a runfile by its workspace path ("worker/gpt2/gpt2_reference.py")
// under bazel test, bazel run, or next to argv0's runfiles.
absl::StatusOr<std::string> FindRunfile(const std::string& rel,
                                        const char* argv0);

// Writes config.txt, params.bin and tokens.bin into `dir`.
absl::Status WriteReferenceInputs(const std::string& dir,
                                  const ReferenceRun& run);

// Runs /usr/bin/python3 script args... with the extra environment entries
// `env` ("NAME=VALUE") and returns its output (stdout and stderr); an error
// with the output when it exits non-zero or runs past 10 minutes.
absl::StatusOr<std::string> RunPython(const std::string& script,
                                      const std::vector<std::string>& args,
                                      const std::vector<std::string>& env = {});

// Reads `n` raw values of T from `path` (exactly n: a shorter or longer
// file is DATA_LOSS naming it; a missing one NOT_FOUND).
template <typename T>
absl::StatusOr<std::vector<T>> ReadValues(const std::string& path, size_t n,
                                          Env* env = DefaultEnv()) {
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(env, path);
  if (!f.ok()) return f.status();
  if (f->size() != n * sizeof(T)) {
    return absl::DataLossError(
        absl::StrFormat("%s: %d bytes, %d values of %d bytes expected", path,
                        f->size(), n, sizeof(T)));
  }
  std::vector<T> v(n);
  if (absl::Status s = f->Read(0, v.data(), n * sizeof(T)); !s.ok()) return s;
  return v;
}

inline absl::StatusOr<std::vector<float>> ReadFloats(const std::string& path,
                                                     size_t n) {
  return ReadValues<float>(path, n);
}

// max_i |a_i - b_i| / max_i |b_i| (the parity metric; max |a_i - b_i| when b
// is all zero). a and b must have the same size.
double MaxRelDiff(absl::Span<const float> a, absl::Span<const float> b);

// max_i |a_i - b_i| / max_i |b_i - init_i| over n elements: a's distance from
// the reference b relative to b's total update from init (the AdamW-steps
// metric; max |a_i - b_i| when b did not move).
double UpdateRel(const float* a, const float* b, const float* init, size_t n);

}  // namespace zeroshard::gpt2

#endif  // ZEROSHARD_WORKER_GPT2_REFERENCE_IO_H_
