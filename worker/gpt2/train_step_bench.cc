// GPT-2 training step (zero grads, forward, backward) on the CPU: zeroshard's
// model (model.h, CpuKernels) against PyTorch eager (train_step_bench.py,
// Debian's python3-torch) on the same config, weights, tokens and thread
// count, in one run. Each side warms up, then times --iters steps; the
// figures are medians (torch: the faster of its default environment and
// OMP_WAIT_POLICY=PASSIVE). Correctness is checked in the same run: the loss
// and every gradient must match torch's within 1e-4 (relative to the largest).
//
//   bazel run -c opt //worker/gpt2:train_step_bench -- --threads=2
//
// Default config (GPT-2 small's shape, scaled to 2 cores): L=4 C=256 NH=4
// (head size 64 as in GPT-2), T=256, B=4, byte vocabulary V=Vp=256, so that
// the transformer blocks, not a 50257-wide LM head, dominate the step.
//
// Last line: RESULT cpu_step_vs_torch=<ratio> zeroshard_tok_s=<f>
// torch_tok_s=<f> (ratio > 1: zeroshard faster).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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
          vocab = 256, threads = 2, iters = 10, warmup = 3;
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
  flags.Int64("iters", &iters, "timed steps per side");
  flags.Int64("warmup", &warmup, "untimed steps per side first");
  flags.Bool("checkpoint", &checkpoint, "activation checkpointing (ours)");
  flags.ParseOrExit(argc, argv);

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
  std::vector<double> secs;
  float loss = 0;
  for (int i = 0; i < warmup + iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    m.ZeroGrad();
    auto l = m.Forward(in, tgt);
    absl::Status s = l.ok() ? m.Backward() : l.status();
    if (!s.ok()) {
      std::printf("error: %s\n", s.ToString().c_str());
      return 1;
    }
    loss = *l;
    const std::chrono::duration<double> dt =
        std::chrono::steady_clock::now() - t0;
    if (i >= warmup) secs.push_back(dt.count());
  }
  std::sort(secs.begin(), secs.end());
  const double ours = bt / secs[secs.size() / 2];
  std::printf("zeroshard: best_tok_s=%.1f median_tok_s=%.1f loss=%.7f\n",
              bt / secs[0], ours, loss);

  // Torch's OpenMP threads spin between parallel regions by default, which
  // on a shared (or 2-core) machine can cost it several times its speed; it
  // is measured both ways and its faster median counts.
  auto dir = MakeTempDir("train_step_bench");
  if (!dir.ok()) {
    std::printf("error: %s\n", dir.status().ToString().c_str());
    return 1;
  }
  TorchFigures torch;
  for (const char* env : {"", "OMP_WAIT_POLICY=PASSIVE"}) {
    auto f = RunTorch(
        run, static_cast<int>(iters), static_cast<int>(warmup), argv[0],
        *env ? std::vector<std::string>{env} : std::vector<std::string>{},
        *dir);
    if (!f.ok()) {
      std::printf("torch: failed: %s\n", f.status().ToString().c_str());
      return 1;
    }
    std::printf("torch (%s): best_tok_s=%.1f median_tok_s=%.1f loss=%.7f\n",
                *env ? env : "default environment", f->best, f->median,
                f->loss);
    if (f->median > torch.median) torch = *f;
  }
  const double torch_tok_s = torch.median, torch_loss = torch.loss;

  auto grads = ReadFloats(*dir + "/grads.bin", layout->num_params());
  const double loss_rel = std::fabs(loss - torch_loss) / std::fabs(torch_loss);
  const double grad_rel = grads.ok() ? MaxRelDiff(m.grads(), *grads) : 1.0;
  const bool ok = loss_rel <= 1e-4 && grad_rel <= 1e-4;
  std::printf("check: loss rel %.2e, gradients max rel %.2e: %s\n", loss_rel,
              grad_rel, ok ? "OK" : "MISMATCH");
  std::printf(
      "RESULT cpu_step_vs_torch=%.3f zeroshard_tok_s=%.1f "
      "torch_tok_s=%.1f\n",
      ours / torch_tok_s, ours, torch_tok_s);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard::gpt2

int main(int argc, char** argv) { return zeroshard::gpt2::Main(argc, argv); }
