// Issue 23, item 4: the SIGTERM shutdown snapshot must never write into a
// checkpoint's files. Real processes: a zeroshard-server with
// --checkpoint_dir trains a tiny GPT-2 one step and checkpoints it (step
// 1); `zeroshard-ctl import` writes other weights at the same step; SIGTERM
// (the server snapshots its state) and a restart; Restore of checkpoint 1
// must give what was checkpointed at 1, and its shard file must be the
// bytes written at the checkpoint.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "common/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/hardening/checkpoint_testing.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

// GPT-2 with maxT=8 V=Vp=64 L=1 NH=2 C=16, in zeroshard's memory order
// (worker/gpt2/config.h); with one layer llm.c's file order is the same.
constexpr int kT = 8, kV = 64, kC = 16;

v1::ModelSpec Gpt2Spec() {
  v1::ModelSpec spec;
  spec.set_job_id("snapimport");
  spec.set_num_servers(1);
  spec.set_alignment(64);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  *spec.add_param_groups() = DefaultParamGroup(0.1);
  *spec.add_param_groups() = DefaultParamGroup(0.0);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"wte", {kV, kC}},
      {"wpe", {kT, kC}},
      {"h.0.ln1w", {kC}},
      {"h.0.ln1b", {kC}},
      {"h.0.qkvw", {3 * kC, kC}},
      {"h.0.qkvb", {3 * kC}},
      {"h.0.attprojw", {kC, kC}},
      {"h.0.attprojb", {kC}},
      {"h.0.ln2w", {kC}},
      {"h.0.ln2b", {kC}},
      {"h.0.fcw", {4 * kC, kC}},
      {"h.0.fcb", {4 * kC}},
      {"h.0.fcprojw", {kC, 4 * kC}},
      {"h.0.fcprojb", {kC}},
      {"lnfw", {kC}},
      {"lnfb", {kC}},
  };
  for (const auto& [name, shape] : tensors) {
    v1::TensorSpec* t = spec.add_tensors();
    t->set_name(name);
    for (int64_t d : shape) t->add_shape(d);
    t->set_param_group(shape.size() == 2 ? 0 : 1);
  }
  return spec;
}

// An llm.c model file (version 3, fp32) holding `params`.
void WriteModelFile(const std::string& path, const std::vector<float>& params) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240326;
  header[1] = 3;
  header[2] = kT;
  header[3] = kV;
  header[4] = 1;
  header[5] = 2;
  header[6] = kC;
  header[7] = kV;
  std::string bytes(reinterpret_cast<const char*>(header.data()), 1024);
  bytes.append(reinterpret_cast<const char*>(params.data()), params.size() * 4);
  WriteAll(path, bytes);
}

TEST(SnapshotImport, CheckpointOneRestoresWhatWasCheckpointedAtOne) {
  auto job = StartCkptJob("snapimport", 1);
  ASSERT_NE(job, nullptr);
  RegisterAndInit(*job, Gpt2Spec());
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  TrainStep(*job, 0);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  CheckpointStep(*job, 1);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  const std::vector<float> at1 = GatherAll(*job);
  const std::string file1 = ShardPath(*job, 1, 0, 1);
  const std::string bytes1 = ReadAll(file1);

  // zeroshard-ctl import of other weights (same step).
  std::vector<float> imported(job->total);
  for (uint64_t i = 0; i < imported.size(); ++i) imported[i] = 0.25f + i % 7;
  const std::string model = job->root + "/imported.bin";
  WriteModelFile(model, imported);
  auto ctl = WorkspaceBinary("ctl/zeroshard-ctl");
  ASSERT_TRUE(ctl.ok()) << ctl.status();
  SpawnOptions o;
  o.argv = {*ctl, "import",
            absl::StrCat("--servers=", job->fleet->addresses()[0]),
            absl::StrCat("--model=", model)};
  o.log_path = job->root + "/ctl-import.log";
  auto import = Subprocess::Spawn(o);
  ASSERT_TRUE(import.ok()) << import.status();
  auto status = import->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(*status, 0) << DescribeWaitStatus(*status) << ": "
                        << ReadAll(o.log_path);
  uint64_t step = 0;
  ASSERT_EQ(FirstBitDifference(GatherAll(*job, &step), imported), -1);
  ASSERT_EQ(step, 1u);

  // SIGTERM (the server keeps step 1 with the imported weights in its
  // shutdown snapshot), restart.
  absl::Status restarted =
      job->fleet->Restart(0, std::chrono::milliseconds(60000));
  ASSERT_TRUE(restarted.ok()) << restarted;
  EXPECT_TRUE(ReadAll(file1) == bytes1)
      << "the shutdown snapshot rewrote " << file1;

  // Checkpoint 1 is what was checkpointed at 1.
  v1::RestoreResponse resp;
  grpc::Status r = RawRestore(*job, 0, 1, 1, &resp);
  ASSERT_TRUE(r.ok()) << r.error_message();
  EXPECT_EQ(resp.step(), 1u);
  const std::vector<float> restored = GatherAll(*job, &step);
  EXPECT_EQ(FirstBitDifference(restored, at1), -1)
      << "restoring checkpoint 1 gave "
      << (FirstBitDifference(restored, imported) == -1 ? "the imported weights"
                                                       : "other weights");
}

}  // namespace
}  // namespace zeroshard::testing
