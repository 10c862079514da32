// The MLP through the ZeRO engine (stage 2, K = 2 real shard servers) against
// PyTorch (mlp_reference.py: torch.nn.Linear, tanh, cross-entropy,
// clip_grad_norm_, torch.optim.AdamW with weight decay on the weights only)
// on the same data: every tensor's update within 1e-5 of the reference's
// after 10 steps, for W = 1 and 2; and the model's own gradients (one
// micro-batch of a whole step's rows) within 1e-5 of torch's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "worker/engine/testing.h"
#include "worker/gpt2/reference_io.h"
#include "worker/mlp/mlp_testing.h"

namespace zeroshard::mlp {
namespace {

bool WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(f);
}

std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()),
         static_cast<std::streamsize>(4 * v.size()));
  return v;
}

// Per tensor: max |a - b| / max |ref|.
double WorstRel(const engine::ModelLayout& layout, const std::vector<float>& a,
                const std::vector<float>& b, const std::vector<float>& ref,
                const char* what) {
  double worst = 0;
  for (const TensorInfo& t : layout.tensors) {
    double diff = 0, scale = 0;
    for (uint64_t i = t.range.begin; i < t.range.end; ++i) {
      diff = std::max(diff, std::abs(double(a[i]) - b[i]));
      scale = std::max(scale, std::abs(double(ref[i])));
    }
    const double rel = scale > 0 ? diff / scale : diff;
    std::printf("  %-10s %s %.3g\n", t.desc.name.c_str(), what, rel);
    worst = std::max(worst, rel);
  }
  return worst;
}

class MlpReferenceTest : public ::testing::TestWithParam<int> {};

TEST_P(MlpReferenceTest, MatchesTorchAdamW) {
  const int world = GetParam();
  const MlpRun run = TestRun(2);
  const int gas = run.zero.gradient_accumulation_steps;
  const uint64_t rows =
      static_cast<uint64_t>(world) * gas * run.zero.micro_batch;
  auto fleet = engine::StartTestFleet(2, {});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  auto got = TrainMlp(run, world, fleet->get());
  ASSERT_TRUE(got.ok()) << got.status();

  // The reference's inputs: the same parameters and the steps' rows.
  auto layout = MlpLayout(run.config);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> init = MlpInitialParams(*layout, run.seed);
  const int D = run.config.inputs;
  std::vector<float> feats(run.steps * rows * D);
  std::vector<int> labels(run.steps * rows);
  for (uint64_t i = 0; i < labels.size(); ++i) {
    Sample(run.seed, run.config, i, feats.data() + i * D, &labels[i]);
  }
  auto dir = gpt2::MakeTempDir(absl::StrCat("mlp-ref-", world));
  ASSERT_TRUE(dir.ok()) << dir.status();
  const engine::ZeroOptions& z = run.zero;
  std::ofstream(*dir + "/config.txt")
      << "inputs " << D << "\nhidden " << absl::StrJoin(run.config.hidden, ",")
      << "\nclasses " << run.config.classes << "\nsteps " << run.steps
      << "\nrows " << rows << "\nlr " << z.lr_schedule.lr << "\nbeta1 "
      << z.beta1 << "\nbeta2 " << z.beta2 << "\neps " << z.eps
      << "\nweight_decay " << z.weight_decay << "\nmax_norm "
      << z.gradient_clipping << "\n";
  ASSERT_TRUE(WriteFile(*dir + "/params.bin", init.data(), 4 * init.size()));
  ASSERT_TRUE(
      WriteFile(*dir + "/features.bin", feats.data(), 4 * feats.size()));
  ASSERT_TRUE(
      WriteFile(*dir + "/labels.bin", labels.data(), 4 * labels.size()));
  auto script = gpt2::FindRunfile("worker/mlp/mlp_reference.py", nullptr);
  ASSERT_TRUE(script.ok()) << script.status();
  auto out = gpt2::RunPython(*script, {*dir}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  std::printf("%s", out->c_str());

  // The model alone: step 0's rows as one micro-batch.
  auto one = MlpModel(run.config, static_cast<int>(rows));
  ASSERT_TRUE(one.ok());
  std::vector<float> p = init, g(init.size(), 0.0f);
  engine::ModelContext ctx;
  ctx.params = absl::MakeSpan(p);
  ctx.grads = absl::MakeSpan(g);
  auto model = one->create(ctx);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(
      (*model)
          ->Forward({{}, {feats.data(), rows * D}, {labels.data(), rows}})
          .ok());
  ASSERT_TRUE((*model)->Backward(nullptr).ok());
  const std::vector<float> torch_grads = ReadFloats(*dir + "/grads0.bin");
  ASSERT_EQ(torch_grads.size(), g.size());
  std::printf("W=%d gradients of step 0 (rel. to the largest):\n", world);
  EXPECT_LE(WorstRel(*layout, g, torch_grads, torch_grads, "grad"), 1e-5);

  const std::vector<float> want = ReadFloats(*dir + "/final.bin");
  ASSERT_EQ(want.size(), got->params.size());
  std::vector<float> update(want.size());
  for (size_t i = 0; i < want.size(); ++i) update[i] = want[i] - init[i];
  std::printf("W=%d after %d steps (diff / largest update):\n", world,
              run.steps);
  const double worst = WorstRel(*layout, got->params, want, update, "update");
  std::printf("W=%d: worst diff/update %.3g\n", world, worst);
  EXPECT_LE(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Worlds, MlpReferenceTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace zeroshard::mlp
