#include "worker/gpt2/reference_io.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env/env.h"
#include "common/status_macros.h"
#include "common/subprocess.h"

namespace zeroshard::gpt2 {
namespace {

constexpr char kPython[] = "/usr/bin/python3";

absl::Status WriteBytes(const std::string& path, const void* data,
                        size_t bytes) {
  return WriteFileAtomic(
      DefaultEnv(), path,
      absl::string_view(static_cast<const char*>(data), bytes));
}

// Runs argv with extra environment `env`; returns its exit status and its
// output (stdout and stderr, through a temporary file) in *out.
absl::StatusOr<int> Run(std::vector<std::string> argv,
                        std::vector<std::string> env, std::string* out) {
  ZS_ASSIGN_OR_RETURN(const std::string dir, MakeTempDir("python"));
  SpawnOptions opts;
  opts.argv = std::move(argv);
  opts.env = std::move(env);
  opts.log_path = dir + "/output.txt";
  ZS_ASSIGN_OR_RETURN(Subprocess child, Subprocess::Spawn(opts));
  ZS_ASSIGN_OR_RETURN(const int status, child.Wait(std::chrono::minutes(10)));
  ZS_ASSIGN_OR_RETURN(*out, ReadSmallFile(DefaultEnv(), opts.log_path));
  return status;
}

}  // namespace

std::vector<float> RandomParams(const ParamLayout& layout, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(layout.num_params());
  for (const ParamTensor& t : layout.tensors()) {
    const bool norm_weight = t.kind == ParamKind::kLn1w ||
                             t.kind == ParamKind::kLn2w ||
                             t.kind == ParamKind::kLnfw;
    const float scale = IsMatrix(t.kind) ? 0.08f : norm_weight ? 0.1f : 0.05f;
    for (uint64_t i = 0; i < t.numel; ++i) {
      p[t.offset + i] = (norm_weight ? 1.0f : 0.0f) + scale * normal(rng);
    }
  }
  return p;
}

std::vector<int> RandomTokens(size_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int> tokens(n);
  for (int& t : tokens) t = static_cast<int>(rng() % vocab);
  return tokens;
}

absl::StatusOr<std::string> MakeTempDir(const std::string& prefix) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string templ =
      absl::StrCat(t != nullptr ? t : "/tmp", "/", prefix, "_XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed for " + templ);
  }
  return templ;
}

absl::StatusOr<std::string> FindRunfile(const std::string& rel,
                                        const char* argv0) {
  std::vector<std::string> candidates;
  for (const char* env : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* d = std::getenv(env)) {
      candidates.push_back(absl::StrCat(d, "/zeroshard/", rel));
    }
  }
  candidates.push_back(rel);  // cwd = runfiles workspace root
  if (argv0 != nullptr) {
    candidates.push_back(absl::StrCat(argv0, ".runfiles/zeroshard/", rel));
  }
  if (const char* d = std::getenv("BUILD_WORKSPACE_DIRECTORY")) {
    candidates.push_back(absl::StrCat(d, "/", rel));
  }
  for (const std::string& c : candidates) {
    if (access(c.c_str(), R_OK) == 0) return c;
  }
  return absl::NotFoundError(rel + " not found in the runfiles");
}

absl::Status WriteReferenceInputs(const std::string& dir,
                                  const ReferenceRun& r) {
  const Config& c = r.config;
  std::string cfg = absl::StrFormat(
      "max_seq_len %d\nvocab_size %d\npadded_vocab_size %d\nnum_layers %d\n"
      "num_heads %d\nchannels %d\nB %d\nT %d\nsteps %d\nthreads %d\n",
      c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
      c.num_heads, c.channels, r.B, r.T, r.steps, r.threads);
  const std::pair<const char*, float> hyper[] = {
      {"lr", r.lr},
      {"beta1", r.beta1},
      {"beta2", r.beta2},
      {"eps", r.eps},
      {"weight_decay", r.weight_decay}};
  for (const auto& [key, value] : hyper) {
    absl::StrAppendFormat(&cfg, "%s %a\n", key, static_cast<double>(value));
  }
  if (absl::Status s = WriteBytes(dir + "/config.txt", cfg.data(), cfg.size());
      !s.ok()) {
    return s;
  }
  if (absl::Status s = WriteBytes(dir + "/params.bin", r.params.data(),
                                  r.params.size() * sizeof(float));
      !s.ok()) {
    return s;
  }
  return WriteBytes(dir + "/tokens.bin", r.tokens.data(),
                    r.tokens.size() * sizeof(int));
}

absl::StatusOr<std::string> RunPython(const std::string& script,
                                      const std::vector<std::string>& args,
                                      const std::vector<std::string>& env) {
  std::string out;
  ZS_ASSIGN_OR_RETURN(int status,
                      Run({kPython, "-c", "import torch"}, {}, &out));
  if (status != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        kPython,
        " cannot import torch (install Debian package python3-torch): ",
        DescribeWaitStatus(status), "\n", out));
  }
  std::vector<std::string> argv = {kPython, script};
  argv.insert(argv.end(), args.begin(), args.end());
  ZS_ASSIGN_OR_RETURN(status, Run(argv, env, &out));
  if (status != 0) {
    return absl::InternalError(absl::StrCat(
        script, " failed (", DescribeWaitStatus(status), "):\n", out));
  }
  return out;
}

double MaxRelDiff(absl::Span<const float> a, absl::Span<const float> b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    scale = std::max(scale, std::fabs(double{b[i]}));
  }
  return scale > 0 ? diff / scale : diff;
}

double UpdateRel(const float* a, const float* b, const float* init, size_t n) {
  double diff = 0, update = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    update = std::max(update, std::fabs(double{b[i]} - double{init[i]}));
  }
  return update > 0 ? diff / update : diff;
}

}  // namespace zeroshard::gpt2
