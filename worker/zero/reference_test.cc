// The engine against PyTorch: a stage 3 run (W=2 ranks, K=2 servers,
// gradient accumulation, clipping that engages) and torch training the same
// global batches on one process (zero_reference.py: mean loss,
// clip_grad_norm_, torch.optim.AdamW with the same groups). Since every
// stage gives the same bits (stages_test.cc), this covers all of them.
//
// Metrics, printed for every tensor:
//   step loss: |ours - torch| / |torch|                      <= 1e-4
//   parameters: max |p - p_torch| / max |p_torch - p_init|   <= 1e-2
// (the key third of qkvb is printed only: its gradient is zero in exact
// arithmetic, so both sides update it by rounding noise; see
// worker/gpt2/parity_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "worker/gpt2/reference_io.h"
#include "worker/zero/testing.h"

namespace zeroshard::zero {
namespace {

constexpr double kLossTolerance = 1e-4;
constexpr double kUpdateTolerance = 1e-2;

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  ASSERT_TRUE(f.good()) << path;
}

double UpdateRel(const float* a, const float* b, const float* init, size_t n) {
  double diff = 0, update = 0;
  for (size_t i = 0; i < n; ++i) {
    diff = std::max(diff, std::fabs(double{a[i]} - double{b[i]}));
    update = std::max(update, std::fabs(double{b[i]} - double{init[i]}));
  }
  return update > 0 ? diff / update : diff;
}

TEST(ReferenceTest, Stage3MatchesTorch) {
  constexpr int kWorld = 2;
  TrainSpec spec = TinySpec(3, false, "reference_test");
  spec.steps = 6;
  spec.seed = 11;
  auto ours = RunInProcess(spec, kWorld, 2);
  ASSERT_TRUE(ours.ok()) << ours.status();

  auto layout = gpt2::ParamLayout::Create(spec.config);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> init =
      SeededGpt2Init(*layout, spec.seed, spec.init_std);
  const int gas = spec.zero.gradient_accumulation_steps;
  const int micro = kWorld * gas;
  std::vector<int> tokens;
  for (int s = 0; s < spec.steps; ++s) {
    for (int r = 0; r < kWorld; ++r) {
      for (int m = 0; m < gas; ++m) {
        const std::vector<int> t = SyntheticTokens(spec, s, r, m);
        tokens.insert(tokens.end(), t.begin(), t.end());
      }
    }
  }
  auto dir = gpt2::MakeTempDir("zero_reference");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const gpt2::Config& c = spec.config;
  std::string cfg = absl::StrFormat(
      "max_seq_len %d\nvocab_size %d\npadded_vocab_size %d\nnum_layers %d\n"
      "num_heads %d\nchannels %d\nB %d\nT %d\nsteps %d\nmicro %d\n"
      "threads 2\n",
      c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
      c.num_heads, c.channels, spec.zero.micro_batch, spec.zero.seq_len,
      spec.steps, micro);
  for (const auto& [k, v] : std::vector<std::pair<const char*, double>>{
           {"lr", spec.zero.lr},
           {"beta1", spec.zero.beta1},
           {"beta2", spec.zero.beta2},
           {"eps", spec.zero.eps},
           {"weight_decay", spec.zero.weight_decay},
           {"max_norm", spec.zero.gradient_clipping}}) {
    cfg += absl::StrFormat("%s %a\n", k, v);
  }
  WriteFile(*dir + "/config.txt", cfg.data(), cfg.size());
  WriteFile(*dir + "/params.bin", init.data(), 4 * init.size());
  WriteFile(*dir + "/tokens.bin", tokens.data(), 4 * tokens.size());
  auto script = gpt2::FindRunfile("worker/zero/zero_reference.py", nullptr);
  ASSERT_TRUE(script.ok()) << script.status();
  auto model = gpt2::FindRunfile("worker/gpt2/gpt2_reference.py", nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string model_dir = model->substr(0, model->rfind('/'));
  auto out = gpt2::RunPython(*script, {model_dir, *dir});
  ASSERT_TRUE(out.ok()) << out.status();
  std::printf("%s", out->c_str());
  auto losses = gpt2::ReadFloats(*dir + "/losses.bin", spec.steps);
  ASSERT_TRUE(losses.ok()) << losses.status();
  auto params = gpt2::ReadFloats(*dir + "/params_out.bin", init.size());
  ASSERT_TRUE(params.ok()) << params.status();

  int clipped = 0;
  for (int s = 0; s < spec.steps; ++s) {
    double sum = 0;  // the global batch's mean loss
    for (int r = 0; r < kWorld; ++r) {
      for (float l : (*ours)[r].micro_losses[s]) sum += l;
    }
    const double loss = sum / micro;
    const double rel = std::fabs(loss - (*losses)[s]) / std::fabs((*losses)[s]);
    const StepStats& st = (*ours)[0].stats[s];
    std::printf("step %d loss %.7f torch %.7f rel %.2e norm %.6f clip %.4f\n",
                s, loss, (*losses)[s], rel, st.grad_norm, st.clip_coef);
    EXPECT_LE(rel, kLossTolerance) << "step " << s;
    clipped += st.clip_coef < 1.0f;
  }
  EXPECT_GT(clipped, 0) << "clipping never engaged";

  const std::vector<float>& p = (*ours)[0].params;
  double worst = 0;
  const uint64_t C = static_cast<uint64_t>(c.channels);
  for (const gpt2::ParamTensor& t : layout->tensors()) {
    std::vector<std::pair<std::string, Range>> parts;
    if (t.kind == gpt2::ParamKind::kQkvb) {
      parts = {{t.name + "[q]", {t.offset, t.offset + C}},
               {t.name + "[v]", {t.offset + 2 * C, t.offset + 3 * C}},
               {t.name + "[k]", {t.offset + C, t.offset + 2 * C}}};
    } else {
      parts = {{t.name, {t.offset, t.offset + t.numel}}};
    }
    for (const auto& [name, r] : parts) {
      const double rel = UpdateRel(p.data() + r.begin, params->data() + r.begin,
                                   init.data() + r.begin, r.size());
      const bool key_bias =
          name.size() > 3 && name.substr(name.size() - 3) == "[k]";
      std::printf("  %-16s diff/update %.2e%s\n", name.c_str(), rel,
                  key_bias ? " (not checked: zero gradient)" : "");
      if (key_bias) continue;
      EXPECT_LE(rel, kUpdateTolerance) << name;
      worst = std::max(worst, rel);
    }
  }
  std::printf("worst diff/update after %d steps: %.2e\n", spec.steps, worst);
}

}  // namespace
}  // namespace zeroshard::zero
