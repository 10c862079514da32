// The engine against PyTorch, across worker counts: stage 3 runs with
// W = 1, 2 and 4 ranks (K = 2 servers) train the same global batches — 4
// sequences a micro-batch round (B = 4/W per rank), gradient accumulation
// 2, from one token file through io::DataLoader — with clipping that
// engages and a WarmupCosineLR schedule, for 10 steps; torch trains the same
// global batches on one process (zero_reference.py: mean loss,
// clip_grad_norm_, torch.optim.AdamW with the same groups and the same
// per-step rates). Since every stage gives the same bits (stages_test.cc),
// this covers all of them.
//
// Mixed precision (worker/engine/precision.h), W = 1 and 2: fp16 with a
// dynamic loss scaler whose initial scale and window make the 10 steps
// overflow (absorbed by hysteresis, then halving the scale), run clean and
// grow the scale, each of which is asserted to happen; and bf16. Torch
// rounds each rank's gradient on its own as the engine does (ranks = W in
// zero_reference.py), and its DeepSpeed DynamicLossScaler gives each step's
// scale and skip, which the engine's StepStats must equal exactly.
//
// Metrics, printed for every W and tensor:
//   step loss: |ours - torch| / |torch|                      <= 1e-4
//   parameters: max |p - p_torch| / max |p_torch - p_init|   <= 1e-2
// (the key third of qkvb is printed only: its gradient is zero in exact
// arithmetic, so both sides update it by rounding noise; see
// worker/gpt2/parity_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/precision.h"
#include "worker/engine/testing.h"
#include "worker/gpt2/reference_io.h"
#include "worker/io/data_loader.h"

namespace zeroshard::engine {
namespace {

constexpr double kLossTolerance = 1e-4;
constexpr double kUpdateTolerance = 1e-2;

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  ASSERT_TRUE(f.good()) << path;
}

constexpr int kGlobalRows = 4;  // sequences per micro-batch round, all ranks

train::TrainSpec Spec(int world, const std::string& tokens) {
  train::TrainSpec spec = TinySpec(3, false, "reference_test");
  spec.zero.micro_batch = kGlobalRows / world;
  spec.steps = 10;
  spec.seed = 11;
  spec.data = {tokens};
  engine::LrSchedule& lr = spec.zero.lr_schedule;
  lr.type = engine::LrScheduleType::kWarmupCosineLR;
  lr.lr = 1e-2;
  lr.warmup_num_steps = 3;
  lr.warmup_type = engine::WarmupType::kLinear;
  lr.total_num_steps = spec.steps;
  lr.cos_min_ratio = 0.1;
  return spec;
}

// Mixed precision: the dynamic loss scaler's initial scale and window. A
// contribution's largest |gradient| element is about 0.1-0.4 here, so
// 2^20 times it overflows fp16: the first overflow is absorbed by the
// hysteresis of 2, the next ones halve the scale until the gradients fit;
// after kScaleWindow clean steps the scale doubles and overflows again.
// The largest scaled gradient of a step stays at least 3% away from fp16's
// limit (measured with torch for W = 1 and 2), far beyond the differences
// between our gradients and torch's.
constexpr double kInitialScale = 1 << 20;
constexpr int64_t kScaleWindow = 2;

train::TrainSpec MixedSpec(int world, const std::string& tokens,
                           engine::Precision precision) {
  train::TrainSpec spec = Spec(world, tokens);
  spec.zero.precision = precision;
  engine::LossScalerOptions& ls = spec.zero.loss_scaler;  // bf16: ignored
  ls.dynamic = true;
  ls.initial_scale = kInitialScale;
  ls.scale_window = kScaleWindow;
  ls.hysteresis = 2;
  ls.min_scale = 1;
  return spec;
}

struct Torch {
  std::vector<float> init, losses, params;
  std::vector<double> scales;    // the loss scale of each step
  std::vector<uint8_t> skipped;  // 1 where the step was skipped
};

// zero_reference.py on the global batches of `spec` (read with W = 1), in
// spec.zero.precision, each micro-batch's rows in `ranks` groups rounded on
// their own (the engine's per-rank gradients when ranks = W).
void RunTorch(const train::TrainSpec& spec, int ranks, Torch* out) {
  auto layout = gpt2::ParamLayout::Create(spec.config);
  ASSERT_TRUE(layout.ok());
  out->init = train::SeededGpt2Init(*layout, spec.seed, spec.init_std);
  const int gas = spec.zero.gradient_accumulation_steps;
  const int bt = kGlobalRows * spec.zero.seq_len;
  io::DataLoaderOptions lo;
  lo.files = spec.data;
  lo.batch_size = kGlobalRows;
  lo.seq_len = spec.zero.seq_len;
  lo.vocab_size = spec.config.vocab_size;
  auto loader = io::DataLoader::Open(lo);
  ASSERT_TRUE(loader.ok()) << loader.status();
  std::vector<int> tokens(2 * bt * gas * spec.steps);
  std::vector<double> lrs;
  for (int s = 0; s < spec.steps; ++s) {
    lrs.push_back(engine::UpdateLearningRate(spec.zero.lr_schedule, s));
    for (int m = 0; m < gas; ++m) {
      int* at = tokens.data() + 2 * bt * (s * gas + m);
      ASSERT_TRUE(loader->Next(at, at + bt).ok());
    }
  }
  auto dir = gpt2::MakeTempDir("zero_reference");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const gpt2::Config& c = spec.config;
  std::string cfg = absl::StrFormat(
      "max_seq_len %d\nvocab_size %d\npadded_vocab_size %d\nnum_layers %d\n"
      "num_heads %d\nchannels %d\nB %d\nT %d\nsteps %d\nmicro %d\n"
      "threads 2\nprecision %s\nranks %d\ndelayed_from %d\n",
      c.max_seq_len, c.vocab_size, c.padded_vocab_size, c.num_layers,
      c.num_heads, c.channels, kGlobalRows, spec.zero.seq_len, spec.steps, gas,
      engine::PrecisionName(spec.zero.precision), ranks,
      static_cast<int>(spec.zero.delayed_update_from));
  const engine::LossScalerOptions& ls = spec.zero.loss_scaler;
  cfg += absl::StrFormat(
      "scale_window %d\nhysteresis %d\nconsecutive_hysteresis %d\n",
      ls.scale_window, ls.hysteresis, ls.consecutive_hysteresis ? 1 : 0);
  for (const auto& [k, v] : std::vector<std::pair<const char*, double>>{
           {"loss_scale", ls.dynamic ? 0.0 : ls.static_scale},
           {"initial_scale", ls.initial_scale},
           {"min_scale", ls.min_scale},
           {"lr", spec.zero.lr_schedule.lr},
           {"beta1", spec.zero.beta1},
           {"beta2", spec.zero.beta2},
           {"eps", spec.zero.eps},
           {"weight_decay", spec.zero.weight_decay},
           {"max_norm", spec.zero.gradient_clipping}}) {
    cfg += absl::StrFormat("%s %a\n", k, v);
  }
  WriteFile(*dir + "/config.txt", cfg.data(), cfg.size());
  WriteFile(*dir + "/params.bin", out->init.data(), 4 * out->init.size());
  WriteFile(*dir + "/tokens.bin", tokens.data(), 4 * tokens.size());
  WriteFile(*dir + "/lrs.bin", lrs.data(), 8 * lrs.size());
  auto script = gpt2::FindRunfile("worker/engine/zero_reference.py", nullptr);
  ASSERT_TRUE(script.ok()) << script.status();
  auto model = gpt2::FindRunfile("worker/gpt2/gpt2_reference.py", nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string model_dir = model->substr(0, model->rfind('/'));
  auto run = gpt2::RunPython(*script, {model_dir, *dir});
  ASSERT_TRUE(run.ok()) << run.status();
  std::printf("%s", run->c_str());
  const size_t steps = static_cast<size_t>(spec.steps);
  auto losses = gpt2::ReadValues<float>(*dir + "/losses.bin", steps);
  auto params =
      gpt2::ReadValues<float>(*dir + "/params_out.bin", out->init.size());
  auto scales = gpt2::ReadValues<double>(*dir + "/scales.bin", steps);
  auto skipped = gpt2::ReadValues<uint8_t>(*dir + "/skipped.bin", steps);
  ASSERT_TRUE(losses.ok()) << losses.status();
  ASSERT_TRUE(params.ok()) << params.status();
  ASSERT_TRUE(scales.ok()) << scales.status();
  ASSERT_TRUE(skipped.ok()) << skipped.status();
  out->losses = *std::move(losses);
  out->params = *std::move(params);
  out->scales = *std::move(scales);
  out->skipped = *std::move(skipped);
}

// Our run with `world` ranks against torch's.
void Compare(const train::TrainSpec& spec, int world, const Torch& torch) {
  auto ours = RunInProcess(spec, world, 2);
  ASSERT_TRUE(ours.ok()) << ours.status();
  const int gas = spec.zero.gradient_accumulation_steps;
  int clipped = 0;
  for (int s = 0; s < spec.steps; ++s) {
    double sum = 0;  // the global batch's mean loss
    for (int r = 0; r < world; ++r) {
      for (float l : (*ours)[r].micro_losses[s]) sum += l;
    }
    const double loss = sum / (world * gas);
    const double want = torch.losses[s];
    const double rel = std::fabs(loss - want) / std::fabs(want);
    const StepStats& st = (*ours)[0].stats[s];
    std::printf(
        "W=%d step %d loss %.7f torch %.7f rel %.2e norm %.6f clip %.4f "
        "lr %.3e scale %g%s\n",
        world, s, loss, want, rel, st.grad_norm, st.clip_coef, st.lr,
        st.loss_scale, st.skipped ? " skipped" : "");
    EXPECT_LE(rel, kLossTolerance) << "W=" << world << " step " << s;
    EXPECT_NEAR(st.global_loss, loss, 1e-6 * std::fabs(loss));
    EXPECT_EQ(st.loss_scale, torch.scales[s]) << "W=" << world << " step " << s;
    EXPECT_EQ(st.skipped, torch.skipped[s] != 0)
        << "W=" << world << " step " << s;
    if (s + 1 < spec.steps) {
      EXPECT_EQ(st.next_loss_scale, torch.scales[s + 1])
          << "W=" << world << " step " << s;
    }
    for (int r = 1; r < world; ++r) {  // every rank keeps the same scaler
      const StepStats& other = (*ours)[r].stats[s];
      EXPECT_EQ(other.loss_scale, st.loss_scale) << "rank " << r;
      EXPECT_EQ(other.next_loss_scale, st.next_loss_scale) << "rank " << r;
      EXPECT_EQ(other.skipped, st.skipped) << "rank " << r;
    }
    clipped += !st.skipped && st.clip_coef < 1.0f;
  }
  EXPECT_GT(clipped, 0) << "clipping never engaged";

  auto layout = gpt2::ParamLayout::Create(spec.config);
  ASSERT_TRUE(layout.ok());
  const std::vector<float>& p = (*ours)[0].params;
  const float* want = torch.params.data();
  const float* init = torch.init.data();
  double worst = 0;
  const uint64_t C = static_cast<uint64_t>(spec.config.channels);
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
      const double rel = gpt2::UpdateRel(p.data() + r.begin, want + r.begin,
                                         init + r.begin, r.size());
      const bool key_bias =
          name.size() > 3 && name.substr(name.size() - 3) == "[k]";
      std::printf("  W=%d %-16s diff/update %.2e%s\n", world, name.c_str(), rel,
                  key_bias ? " (not checked: zero gradient)" : "");
      if (key_bias) continue;
      EXPECT_LE(rel, kUpdateTolerance) << "W=" << world << " " << name;
      worst = std::max(worst, rel);
    }
  }
  std::printf("W=%d: worst diff/update after %d steps: %.2e\n", world,
              spec.steps, worst);
}

TEST(ReferenceTest, Stage3MatchesTorchForOneTwoAndFourWorkers) {
  auto tokens = WriteTestTokens("reference_tokens", 4096, 64, 11);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  Torch torch;
  RunTorch(Spec(1, *tokens), 1, &torch);
  ASSERT_FALSE(HasFatalFailure());
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("W=" + std::to_string(world));
    Compare(Spec(world, *tokens), world, torch);
  }
}

// ZeRO-Offload's one-step delayed update (ZeroOptions::delayed_update_from
// = 3) on stage 2 with W = 1, 2 and 4 (and bf16, fp16 with W = 2) against torch
// training with the same
// delay (zero_reference.py delayed_from: step s >= 3 computes its gradients
// on the weights before step s-1's update). The delay must show: torch with
// and without it give step losses further apart than the tolerance.
TEST(ReferenceTest, DelayedUpdateMatchesTorch) {
  auto tokens = WriteTestTokens("reference_tokens_delayed", 4096, 64, 11);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  constexpr int kFrom = 3;
  const auto spec = [&](int world) {
    train::TrainSpec s = Spec(world, *tokens);
    s.zero.stage = 2;
    s.zero.delayed_update_from = kFrom;
    return s;
  };
  Torch plain, delayed;
  RunTorch(Spec(1, *tokens), 1, &plain);
  ASSERT_FALSE(HasFatalFailure());
  RunTorch(spec(1), 1, &delayed);
  ASSERT_FALSE(HasFatalFailure());
  double apart = 0;
  for (int s = 0; s < kFrom; ++s) {
    EXPECT_EQ(plain.losses[s], delayed.losses[s]) << "step " << s;
  }
  for (size_t s = kFrom; s < plain.losses.size(); ++s) {
    const double a = plain.losses[s], b = delayed.losses[s];
    apart = std::max(apart, std::fabs(a - b) / std::fabs(a));
  }
  std::printf("torch, delayed against not: largest step-loss difference %.2e\n",
              apart);
  EXPECT_GT(apart, 10 * kLossTolerance);
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("delayed W=" + std::to_string(world));
    Compare(spec(world), world, delayed);
  }
  // Mixed precision, W = 2: the parameters fetched behind the step are
  // rounded once complete, as without the delay; fp16's dynamic scaler
  // skips steps after the delay began (asserted), each skip committed
  // behind the next step like an update.
  for (engine::Precision precision :
       {engine::Precision::kBf16, engine::Precision::kFp16}) {
    SCOPED_TRACE(std::string("delayed W=2 ") +
                 engine::PrecisionName(precision));
    train::TrainSpec mixed = MixedSpec(2, *tokens, precision);
    mixed.zero.stage = 2;
    mixed.zero.delayed_update_from = kFrom;
    Torch mixed_torch;
    RunTorch(mixed, 2, &mixed_torch);
    ASSERT_FALSE(HasFatalFailure());
    if (precision == engine::Precision::kFp16) {
      int skipped_after = 0;
      for (size_t s = kFrom; s < mixed_torch.skipped.size(); ++s) {
        skipped_after += mixed_torch.skipped[s];
      }
      EXPECT_GT(skipped_after, 0) << "no step skipped after the delay began";
    }
    Compare(mixed, 2, mixed_torch);
  }
}

// What the loss scaler did over torch's run of `t` (each step s but the
// last, by the scale of step s + 1).
struct ScalerEvents {
  int absorbed = 0;  // overflow, scale kept (hysteresis)
  int halved = 0;    // overflow, scale halved
  int clean = 0;     // no overflow
  int grown = 0;     // no overflow, scale doubled
};

ScalerEvents CountEvents(const Torch& t) {
  ScalerEvents e;
  for (size_t s = 0; s + 1 < t.scales.size(); ++s) {
    const double now = t.scales[s], next = t.scales[s + 1];
    if (t.skipped[s]) {
      e.absorbed += next == now;
      e.halved += next == now / 2;
    } else {
      ++e.clean;
      e.grown += next == now * 2;
    }
  }
  return e;
}

// MixedSpec(`precision`) with W = 1 and 2 against torch emulating each W;
// torch's runs in W order.
std::vector<Torch> CompareMixed(engine::Precision precision) {
  const std::string name =
      std::string("reference_tokens_") + engine::PrecisionName(precision);
  auto tokens = WriteTestTokens(name, 4096, 64, 11);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  std::vector<Torch> runs;
  if (!tokens.ok()) return runs;
  for (int world : {1, 2}) {
    SCOPED_TRACE(
        absl::StrFormat("%s W=%d", engine::PrecisionName(precision), world));
    const train::TrainSpec spec = MixedSpec(world, *tokens, precision);
    runs.emplace_back();
    RunTorch(spec, world, &runs.back());
    if (testing::Test::HasFatalFailure()) return runs;
    Compare(spec, world, runs.back());
  }
  return runs;
}

TEST(ReferenceTest, Fp16DynamicLossScalingMatchesTorch) {
  const std::vector<Torch> runs = CompareMixed(engine::Precision::kFp16);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(runs.size(), 2u);
  for (size_t w = 0; w < runs.size(); ++w) {
    const ScalerEvents e = CountEvents(runs[w]);
    std::printf(
        "W=%zu torch: overflows absorbed %d, halving %d; clean steps %d, "
        "growing %d\n",
        w + 1, e.absorbed, e.halved, e.clean, e.grown);
    EXPECT_GT(e.absorbed, 0) << "W=" << w + 1;
    EXPECT_GT(e.halved, 0) << "W=" << w + 1;
    EXPECT_GT(e.clean, 0) << "W=" << w + 1;
    EXPECT_GT(e.grown, 0) << "W=" << w + 1;
  }
}

TEST(ReferenceTest, Bf16MatchesTorch) {
  const std::vector<Torch> runs = CompareMixed(engine::Precision::kBf16);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(runs.size(), 2u);
  for (const Torch& t : runs) {  // bf16 never scales (DeepSpeed's LossScaler)
    for (size_t s = 0; s < t.scales.size(); ++s) {
      EXPECT_EQ(t.scales[s], 1.0) << "step " << s;
      EXPECT_EQ(t.skipped[s], 0) << "step " << s;
    }
  }
}

}  // namespace
}  // namespace zeroshard::engine
