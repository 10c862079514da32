// Issue 23, item 2: checkpoint files must not escape --checkpoint_dir.
// Against a real zeroshard-server:
//   - a finalize request whose CheckpointShard.file is
//     "../../outside/evil.ckpt" (a valid shard file outside the directory)
//     or "/etc/passwd" is refused, no MANIFEST names it, and a Restore of
//     that step loads nothing;
//   - a MANIFEST forged on disk naming such files, a missing shard file, a
//     shard file that is a symlink or a directory, and a step directory
//     that is a symlink are all refused by Restore with one and the same
//     error (digits aside), which names none of the other paths;
//   - the gathered model is the same before and after every refusal.
#include <sys/stat.h>
#include <unistd.h>

#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/env/env.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/checkpoint/checkpoint_files.h"
#include "tests/hardening/checkpoint_testing.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

// A valid shard file of `step` for the whole model of `job`, every
// element `value`, written under `outside`/step-S/ by the checkpoint
// library itself; returns its CheckpointShard (file relative to that dir).
v1::CheckpointShard WriteForeignShard(CkptJob& job, const std::string& outside,
                                      uint64_t step, float value) {
  v1::ShardCheckpointHeader h;
  h.set_step(step);
  h.set_optimizer_steps(step);
  *h.mutable_spec() = job.client->spec();
  h.set_shard_index(0);
  h.set_offset(0);
  h.set_length(job.total);
  h.set_block_bytes(checkpoint::kDefaultBlockBytes);
  auto shard = checkpoint::WriteShardFile(
      DefaultEnv(), outside, h, [&](int, uint64_t, uint64_t n, float* out) {
        std::fill(out, out + n, value);
        return absl::OkStatus();
      });
  EXPECT_TRUE(shard.ok()) << shard.status();
  return shard.ok() ? *shard : v1::CheckpointShard();
}

// Writes root/ckpt/step-S/MANIFEST: the manifest of `like` at `step`
// with shard 0's file `file` (framed as the server frames it).
void ForgeManifest(CkptJob& job, const v1::CheckpointManifest& like,
                   uint64_t step, const std::string& file,
                   const v1::CheckpointShard* shard = nullptr) {
  v1::CheckpointManifest m = like;
  m.set_step(step);
  if (shard != nullptr) *m.mutable_shards(0) = *shard;
  m.mutable_shards(0)->set_file(file);
  const std::string body = m.SerializeAsString();
  std::string framed = "ZSMANI1\n";
  const uint32_t len = body.size();
  framed.append(reinterpret_cast<const char*>(&len), 4);
  framed += body;
  const uint32_t crc = Crc32c(body.data(), body.size());
  framed.append(reinterpret_cast<const char*>(&crc), 4);
  mkdir(StepDir(job, step).c_str(), 0700);
  WriteAll(StepDir(job, step) + "/MANIFEST", framed);
}

std::string Digitless(const std::string& s) {
  return std::regex_replace(s, std::regex("[0-9]+"), "N");
}

class CheckpointEscapeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = StartCkptJob("escape", 1);
    ASSERT_NE(job_, nullptr);
    RegisterAndInit(*job_, SmallSpec("escape", 1));
    ASSERT_FALSE(HasFatalFailure());
    TrainStep(*job_, 0);
    ASSERT_FALSE(HasFatalFailure());
    CheckpointStep(*job_, 1);
    ASSERT_FALSE(HasFatalFailure());
    TrainStep(*job_, 1);
    ASSERT_FALSE(HasFatalFailure());
    outside_ = job_->root + "/outside";
    before_ = GatherAll(*job_, &step_before_);
    ASSERT_EQ(step_before_, 2u);
  }

  // The model and its step are as in SetUp.
  void ExpectUnchanged() {
    uint64_t step = 0;
    std::vector<float> now = GatherAll(*job_, &step);
    EXPECT_EQ(step, step_before_);
    EXPECT_EQ(FirstBitDifference(now, before_), -1);
  }

  std::unique_ptr<CkptJob> job_;
  std::string outside_;
  std::vector<float> before_;
  uint64_t step_before_ = 0;
};

TEST_F(CheckpointEscapeTest, FinalizeRefusesFileNamesOutsideTheStepDirectory) {
  // Phase 1 of step 2, as the job would do it.
  v1::CheckpointRequest req;
  req.set_job_id("escape");
  req.set_step(2);
  v1::CheckpointResponse phase1;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(RawStub(*job_, 0)->Checkpoint(&ctx, req, &phase1).ok());
  }
  // A valid shard file of step 2 outside --checkpoint_dir, all 7s.
  v1::CheckpointShard evil = WriteForeignShard(*job_, outside_, 2, 7.0f);
  ASSERT_EQ(rename((outside_ + "/step-0000000002/" + evil.file()).c_str(),
                   (outside_ + "/evil.ckpt").c_str()),
            0);
  for (const std::string& file :
       {std::string("/etc/passwd"),
        std::string("shard-00000-of-00001.ckpt/../../../outside/evil.ckpt"),
        std::string("../../outside/evil.ckpt")}) {
    SCOPED_TRACE(file);
    v1::CheckpointRequest fin = req;
    fin.set_finalize(true);
    *fin.add_shards() = evil;
    fin.mutable_shards(0)->set_file(file);
    grpc::ClientContext ctx;
    v1::CheckpointResponse resp;
    grpc::Status s = RawStub(*job_, 0)->Checkpoint(&ctx, fin, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << s.error_message();
    EXPECT_NE(s.error_message().find("CheckpointShard.file"), std::string::npos)
        << s.error_message();
    EXPECT_EQ(s.error_message().find("outside"), std::string::npos);
    EXPECT_EQ(s.error_message().find("passwd"), std::string::npos);
  }
  // No MANIFEST names it; a Restore of step 2 loads nothing.
  EXPECT_FALSE(DefaultEnv()->FileExists(StepDir(*job_, 2) + "/MANIFEST"));
  grpc::Status r = RawRestore(*job_, 0, 2, 1);
  EXPECT_FALSE(r.ok()) << "restored step 2 from the file outside";
  ExpectUnchanged();
  // The legitimate finalize still works.
  v1::CheckpointRequest fin = req;
  fin.set_finalize(true);
  *fin.add_shards() = phase1.shard();
  grpc::ClientContext ctx;
  v1::CheckpointResponse resp;
  grpc::Status s = RawStub(*job_, 0)->Checkpoint(&ctx, fin, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(CheckpointEscapeTest, RestoreGivesOneErrorForEveryBadFile) {
  v1::CheckpointManifest like;
  {
    const std::string bytes = ReadAll(StepDir(*job_, 1) + "/MANIFEST");
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + 8, 4);
    ASSERT_TRUE(like.ParseFromString(bytes.substr(12, len)));
  }
  const std::string own = like.shards(0).file();  // shard-00000-of-00001.ckpt
  // Step 3: a name escaping to a valid shard file of step 3 outside.
  v1::CheckpointShard evil3 = WriteForeignShard(*job_, outside_, 3, 7.0f);
  ForgeManifest(*job_, like, 3, "../../outside/step-0000000003/" + own, &evil3);
  // Step 4: /etc/passwd.
  ForgeManifest(*job_, like, 4, "/etc/passwd");
  // Step 5: the server's own name, file missing.
  ForgeManifest(*job_, like, 5, own);
  // Step 6: the own name is a symlink to a valid shard file of step 6.
  v1::CheckpointShard evil6 = WriteForeignShard(*job_, outside_, 6, 7.0f);
  ForgeManifest(*job_, like, 6, own, &evil6);
  ASSERT_EQ(symlink((outside_ + "/step-0000000006/" + own).c_str(),
                    (StepDir(*job_, 6) + "/" + own).c_str()),
            0);
  // Step 7: the own name is a directory.
  ForgeManifest(*job_, like, 7, own);
  mkdir((StepDir(*job_, 7) + "/" + own).c_str(), 0700);
  // Step 8: the step directory is a symlink to a complete checkpoint of
  // step 8 outside.
  v1::CheckpointShard evil8 = WriteForeignShard(*job_, outside_, 8, 7.0f);
  {
    v1::CheckpointManifest m = like;
    m.set_step(8);
    *m.mutable_shards(0) = evil8;
    ASSERT_TRUE(checkpoint::WriteManifest(DefaultEnv(), outside_, m).ok());
  }
  ASSERT_EQ(symlink((outside_ + "/step-0000000008").c_str(),
                    StepDir(*job_, 8).c_str()),
            0);

  std::string first;
  for (uint64_t step = 3; step <= 8; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    grpc::Status s = RawRestore(*job_, 0, step, 1);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DATA_LOSS)
        << s.error_code() << " " << s.error_message();
    const std::string msg = Digitless(s.error_message());
    if (first.empty()) first = msg;
    EXPECT_EQ(msg, first);
    for (const char* leak : {"outside", "passwd", "No such file", "symbolic",
                             "directory, not", job_->root.c_str()}) {
      EXPECT_EQ(s.error_message().find(leak), std::string::npos)
          << leak << " in: " << s.error_message();
    }
    ExpectUnchanged();
  }
  // "Newest" skips all of them and restores step 1.
  v1::RestoreResponse resp;
  grpc::Status s = RawRestore(*job_, 0, 0, 1, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.step(), 1u);
}

}  // namespace
}  // namespace zeroshard::testing
