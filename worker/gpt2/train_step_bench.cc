// GPT-2 training step (zero grads, forward, backward) on the CPU: zeroshard's
// model (model.h, CpuKernels) against PyTorch eager (train_step_bench.py,
// Debian's python3-torch) on the same config, weights, tokens and thread
// count, in one run. Three variants run alternately, --rounds times each
// (common/bench/bench.h): ours, torch in its default environment and torch
// with OMP_WAIT_POLICY=PASSIVE; a run warms up (--warmup steps), then times
// --iters steps, and its figure is their median; a variant's figure is the
// median over its runs, and torch's is the faster of its two environments.
// Correctness is checked in the same run: the loss of every torch run and
// every gradient must match ours within 1e-4 (relative to the largest).
//
//   bazel run -c opt //worker/gpt2:train_step_bench -- --threads=2 --rounds=3
//
// Default config (GPT-2 small's shape, scaled to 2 cores): L=4 C=256 NH=4
// (head size 64 as in GPT-2), T=256, B=4, byte vocabulary V=Vp=256, so that
// the transformer blocks, not a 50257-wide LM head, dominate the step.
//
// Last line: RESULT cpu_step_vs_torch=<ratio> zeroshard_tok_s=<f>
// torch_tok_s=<f> correct=0|1 (ratio > 1: zeroshard faster).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/bench/bench.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/model.h"
#include "worker/gpt2/reference_io.h"

namespace zeroshard::gpt2 {
namespace {

struct TorchFigures {
  double best = 0, median = 0, loss = 0;
};

// Runs train_step_bench.py on `run` with environment `env`; its gradients
// are left in dir/grads.bin.
absl::StatusOr<TorchFigures> RunTorch(const ReferenceRun& run, int iters,
                                      int warmup, const char* argv0,
                                      const std::vector<std::string>& env,
                                      const std::string& dir) {
  ZS_ASSIGN_OR_RETURN(std::string script,
                      FindRunfile("worker/gpt2/train_step_bench.py", argv0));
  ZS_RETURN_IF_ERROR(WriteReferenceInputs(dir, run));
  ZS_ASSIGN_OR_RETURN(
      std::string out,
      RunPython(script, {dir, std::to_string(iters), std::to_string(warmup)},
                env));
  TorchFigures f;
  const size_t at = std::min(out.size(), out.find("TORCH"));
  if (std::sscanf(out.c_str() + at,
                  "TORCH best_tok_s=%lf median_tok_s=%lf loss=%lf", &f.best,
                  &f.median, &f.loss) != 3) {
    return absl::InternalError("unexpected output of the torch side:\n" + out);
  }
  return f;
}

int Main(int argc, char** argv) {
  int64_t layers = 4, channels = 256, heads = 4, seq = 256, batch = 4,
          vocab = 256, threads = 2, iters = 10, warmup = 3, rounds = 3;
  bool checkpoint = false;
  FlagSet flags("train_step_bench",
                "train_step_bench [flags]\n\nGPT-2 CPU training step vs "
                "PyTorch eager.");
  flags.Int64("layers", &layers, "L");
  flags.Int64("channels", &channels, "C");
  flags.Int64("heads", &heads, "NH");
  flags.Int64("seq", &seq, "T (also max_seq_len)");
  flags.Int64("batch", &batch, "B");
  flags.Int64("vocab", &vocab, "V (Vp: rounded up to a multiple of 64)");
  flags.Int64("threads", &threads, "threads on both sides");
  flags.Int64("iters", &iters, "timed steps per run");
  flags.Int64("warmup", &warmup, "untimed steps first in every run");
  flags.Int64("rounds", &rounds, "runs of every variant, alternated");
  flags.Bool("checkpoint", &checkpoint, "activation checkpointing (ours)");
  flags.ParseOrExit(argc, argv);
  if (iters < 1 || warmup < 0 || rounds < 1) {
    ExitWithError(flags.program(),
                  "--iters and --rounds must be >= 1, --warmup >= 0");
  }

  Config c;
  c.max_seq_len = static_cast<int>(seq);
  c.vocab_size = static_cast<int>(vocab);
  c.padded_vocab_size = static_cast<int>((vocab + 63) / 64 * 64);
  c.num_layers = static_cast<int>(layers);
  c.num_heads = static_cast<int>(heads);
  c.channels = static_cast<int>(channels);
  const int B = static_cast<int>(batch), T = static_cast<int>(seq);
  auto layout = ParamLayout::Create(c);
  if (!layout.ok()) {
    std::printf("error: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  std::printf("config: %s B=%d T=%d threads=%d params=%llu checkpoint=%d\n",
              DescribeConfig(c).c_str(), B, T, static_cast<int>(threads),
              static_cast<unsigned long long>(layout->num_params()),
              checkpoint);

  ReferenceRun run;
  run.config = c;
  run.B = B;
  run.T = T;
  run.threads = static_cast<int>(threads);
  run.params = RandomParams(*layout, 1);
  run.tokens = RandomTokens(2 * size_t{1} * B * T, c.vocab_size, 2);

  ModelOptions opts;
  opts.threads = static_cast<int>(threads);
  opts.checkpoint = checkpoint;
  auto model = Model::Create(c, B, T, opts);
  if (!model.ok()) {
    std::printf("error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  Model& m = **model;
  std::printf("zeroshard: kernels %s, activations %.1f MiB\n",
              m.kernels().Name(), m.activation_floats() * 4.0 / (1 << 20));
  std::copy(run.params.begin(), run.params.end(), m.params().begin());
  const size_t bt = size_t{1} * B * T;
  const absl::Span<const int> in(run.tokens.data(), bt),
      tgt(run.tokens.data() + bt, bt);
  float loss = 0;
  auto ours = [&](const bench::RunInfo&) -> absl::StatusOr<double> {
    std::vector<double> secs;
    for (int i = 0; i < warmup + iters; ++i) {
      const bench::Clock::time_point t0 = bench::Clock::now();
      m.ZeroGrad();
      ZS_ASSIGN_OR_RETURN(loss, m.Forward(in, tgt));
      ZS_RETURN_IF_ERROR(m.Backward());
      if (i >= warmup) secs.push_back(bench::SecondsSince(t0));
    }
    return bench::Median(secs);
  };

  // Torch's OpenMP threads spin between parallel regions by default, which
  // on a shared (or 2-core) machine can cost it several times its speed; it
  // is measured both ways and its faster median counts.
  auto dir = MakeTempDir("train_step_bench");
  if (!dir.ok()) {
    std::printf("error: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  double loss_rel = 0;  // worst over the torch runs
  auto torch = [&](const char* env) -> bench::RunFn {
    return [&, env](const bench::RunInfo&) -> absl::StatusOr<double> {
      ZS_ASSIGN_OR_RETURN(
          TorchFigures f,
          RunTorch(
              run, static_cast<int>(iters), static_cast<int>(warmup), argv[0],
              *env ? std::vector<std::string>{env} : std::vector<std::string>{},
              *dir));
      std::printf("torch (%s): best_tok_s=%.1f median_tok_s=%.1f loss=%.7f\n",
                  *env ? env : "default environment", f.best, f.median, f.loss);
      loss_rel =
          std::max(loss_rel, std::fabs(loss - f.loss) / std::fabs(f.loss));
      return bench::Ratio(static_cast<double>(bt), f.median);
    };
  };
  const double tokens = static_cast<double>(bt);
  auto results = bench::RunAlternating(
      {{"zeroshard", ours, /*reference=*/false, tokens},
       {"torch", torch(""), /*reference=*/false, tokens},
       {"torch_passive", torch("OMP_WAIT_POLICY=PASSIVE"),
        /*reference=*/false, tokens}},
      bench::Schedule{/*warmup_rounds=*/0, static_cast<int>(rounds)});
  if (!results.ok()) {
    std::printf("error: %s\n", results.status().ToString().c_str());
    return 1;
  }
  std::printf("%s", results->Table("tok/s").c_str());
  const double ours_tok_s = results->Get("zeroshard").rate();
  const double torch_tok_s = std::max(results->Get("torch").rate(),
                                      results->Get("torch_passive").rate());
  std::printf(
      "zeroshard: median_tok_s=%.1f loss=%.7f; torch: median_tok_s=%.1f\n",
      ours_tok_s, loss, torch_tok_s);

  auto grads = ReadFloats(*dir + "/grads.bin", layout->num_params());
  const double grad_rel = grads.ok() ? MaxRelDiff(m.grads(), *grads) : 1.0;
  const bool ok = loss_rel <= 1e-4 && grad_rel <= 1e-4;
  std::printf(
      "check: loss rel %.2e (worst torch run), gradients max rel %.2e (last "
      "torch run): %s\n",
      loss_rel, grad_rel, ok ? "OK" : "MISMATCH");
  bench::ResultLine()
      .Add("cpu_step_vs_torch", bench::Ratio(ours_tok_s, torch_tok_s))
      .Add("zeroshard_tok_s", ours_tok_s)
      .Add("torch_tok_s", torch_tok_s)
      .AddInt("correct", ok ? 1 : 0)
      .Print();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard::gpt2

int main(int argc, char** argv) { return zeroshard::gpt2::Main(argc, argv); }
