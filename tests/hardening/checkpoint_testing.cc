#include "tests/hardening/checkpoint_testing.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard::testing {

std::string FreshDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr
                              ? absl::StrCat(tmp, "/", name)
                              : absl::StrCat("/tmp/", name, "-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<CkptJob> StartCkptJob(const std::string& name, uint32_t k,
                                      std::vector<std::string> extra,
                                      const std::string& binary) {
  auto job = std::make_unique<CkptJob>();
  job->root = FreshDir(name);
  job->ckpt = job->root + "/ckpt";
  job->flags = std::move(extra);
  job->flags.push_back("--checkpoint_dir=" + job->ckpt);
  FleetOptions o;
  if (binary.empty()) {
    auto b = WorkspaceBinary("server/zeroshard-server");
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) return nullptr;
    o.server_binary = *b;
  } else {
    o.server_binary = binary;
  }
  o.num_shards = k;
  o.work_dir = job->root;
  o.extra_args = job->flags;
  auto fleet = LocalFleet::Start(o);
  EXPECT_TRUE(fleet.ok()) << fleet.status();
  if (!fleet.ok()) return nullptr;
  job->fleet = std::move(*fleet);
  job->client = Connect(*job->fleet);
  if (job->client == nullptr) return nullptr;
  return job;
}

void RegisterAndInit(CkptJob& job, const v1::ModelSpec& spec) {
  ASSERT_TRUE(job.client->RegisterModel(spec).ok());
  job.total = job.client->plan().total();
  std::mt19937_64 rng(1234);
  std::vector<float> init = RandomVector(rng, job.total, 0.02f);
  ASSERT_TRUE(
      job.client->WriteParameters(Range{0, job.total}, init.data()).ok());
}

void TrainStep(CkptJob& job, uint64_t step, uint64_t epoch) {
  std::mt19937_64 rng(77 + step);
  std::vector<float> g = RandomVector(rng, job.total, 0.5f);
  PushId id{epoch, step, 0, absl::StrCat("g", step, "e", epoch)};
  absl::Status pushed =
      job.client->Push(Range{0, job.total}, v1::DTYPE_FP32, g.data(), id);
  ASSERT_TRUE(pushed.ok()) << pushed;
  auto norm = job.client->Prepare(epoch, step);
  ASSERT_TRUE(norm.ok()) << norm.status();
  v1::TrainerState state;
  state.set_step(step + 1);
  state.set_data_offset(1000 * (step + 1));
  absl::Status c = job.client->Commit(epoch, step, 1.0f, 1e-2, false, &state);
  ASSERT_TRUE(c.ok()) << c;
}

void CheckpointStep(CkptJob& job, uint64_t step) {
  auto shards = job.client->Checkpoint(step, nullptr, absl::StrCat("s", step));
  ASSERT_TRUE(shards.ok()) << shards.status();
}

std::vector<float> GatherAll(CkptJob& job, uint64_t* step) {
  std::vector<float> p(job.total);
  absl::Status s =
      job.client->Gather(Range{0, job.total}, v1::DTYPE_FP32, p.data(), step);
  EXPECT_TRUE(s.ok()) << s;
  return p;
}

std::unique_ptr<v1::ShardService::Stub> RawStub(CkptJob& job, uint32_t k) {
  return v1::ShardService::NewStub(grpc::CreateChannel(
      job.fleet->addresses()[k], grpc::InsecureChannelCredentials()));
}

grpc::Status RawRestore(CkptJob& job, uint32_t k, uint64_t step, uint64_t epoch,
                        v1::RestoreResponse* resp) {
  v1::RestoreRequest req;
  req.set_job_id(job.client->spec().job_id());
  req.set_step(step);
  req.set_epoch(epoch);
  v1::RestoreResponse ignored;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return RawStub(job, k)->Restore(&ctx, req, resp != nullptr ? resp : &ignored);
}

std::string StepDir(const CkptJob& job, uint64_t step) {
  return absl::StrFormat("%s/step-%010d", job.ckpt, step);
}

std::string ShardPath(const CkptJob& job, uint64_t step, uint32_t k,
                      uint32_t num) {
  return absl::StrFormat("%s/shard-%05d-of-%05d.ckpt", StepDir(job, step), k,
                         num);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
}

uint64_t PayloadStart(const std::string& b) {
  uint32_t len = 0;
  if (b.size() >= 12) std::memcpy(&len, b.data() + 8, 4);
  return 16 + uint64_t{len};
}

std::string FindLine(const std::string& log, const std::string& text) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(text) != absl::string_view::npos) return std::string(line);
  }
  return "";
}

}  // namespace zeroshard::testing
