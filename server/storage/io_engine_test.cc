// Env implementations (PosixEnv with O_DIRECT and io_uring, MemEnv,
// FaultEnv), the I/O engine and the manifest format.
#include "server/storage/io_engine.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "common/env/env.h"
#include "common/env/fault_env.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"
#include "server/storage/buffer.h"
#include "server/storage/manifest.h"

namespace zeroshard {
namespace storage {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// Writes 64 blocks through an engine, reads them back, compares.
void RoundTrip(Env* env, const std::string& path, int threads) {
  OpenOptions o;
  o.create = true;
  o.direct = true;
  auto f = env->OpenFile(path, o);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->Allocate(64 * 4096).ok());
  auto engine = IoEngine::Create(env, threads, 4);
  ASSERT_TRUE(engine.ok()) << engine.status();
  AlignedBuffer out(64 * 4096, nullptr), in(64 * 4096, nullptr);
  for (uint64_t i = 0; i < out.size(); ++i) out.data()[i] = char(i * 7 + 1);
  std::vector<IoRequest> w, r;
  for (uint64_t b = 0; b < 64; ++b) {
    w.push_back(
        {IoOp::kWrite, f->get(), b * 4096, out.data() + b * 4096, 4096, 0});
    r.push_back(
        {IoOp::kRead, f->get(), b * 4096, in.data() + b * 4096, 4096, 0});
  }
  IoBatch batch;
  (*engine)->Submit(w, &batch);
  ASSERT_TRUE(batch.Wait().ok());
  (*engine)->Submit(r, &batch);
  ASSERT_TRUE(batch.Wait().ok());
  EXPECT_EQ(std::memcmp(in.data(), out.data(), in.size()), 0);
  EXPECT_EQ((*engine)->bytes_read(), 64u * 4096);
  EXPECT_EQ((*engine)->bytes_written(), 64u * 4096);
  // Reading past the end is an error naming the file.
  r.assign(1, {IoOp::kRead, f->get(), 64 * 4096, in.data(), 4096, 0});
  (*engine)->Submit(r, &batch);
  absl::Status s = batch.Wait();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
}

TEST(EnvTest, PosixDirectIoThroughIoUring) {
  RoundTrip(DefaultEnv(), JoinPath(TmpDir(), "uring"), 2);
  auto f = DefaultEnv()->OpenFile(JoinPath(TmpDir(), "uring"), OpenOptions());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*(*f)->Size(), 64u * 4096);
}

TEST(EnvTest, MemEnvRoundTripAndAlignmentCheck) {
  MemEnv env;
  RoundTrip(&env, "/x", 1);
  OpenOptions o;
  o.direct = true;
  auto f = env.OpenFile("/x", o);
  ASSERT_TRUE(f.ok());
  char c[10];
  EXPECT_EQ((*f)->Read(1, c, 10).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(env.OpenFile("/nodir/x", {true}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(EnvTest, FaultEnvInjectsThroughQueuesAndFiles) {
  MemEnv mem;
  FaultEnv env(&mem);
  OpenOptions o;
  o.create = true;
  auto f = env.OpenFile("/f", o);
  ASSERT_TRUE(f.ok());
  env.SetWriteBudget(4096);
  AlignedBuffer b(8192, nullptr);
  EXPECT_TRUE((*f)->Write(0, b.data(), 4096).ok());
  absl::Status s = (*f)->Write(4096, b.data(), 4096);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(s.message(), "/f"));
  auto engine = IoEngine::Create(&env, 1, 2);
  ASSERT_TRUE(engine.ok());
  IoBatch batch;
  (*engine)->Submit({{IoOp::kWrite, f->get(), 0, b.data(), 4096, 0}}, &batch);
  EXPECT_EQ(batch.Wait().code(), absl::StatusCode::kResourceExhausted);
  env.ClearFaults();
  env.FailReads("/f", 1);
  (*engine)->Submit({{IoOp::kRead, f->get(), 0, b.data(), 4096, 0},
                     {IoOp::kRead, f->get(), 0, b.data() + 4096, 4096, 0}},
                    &batch);
  EXPECT_EQ(batch.Wait().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(batch.Wait().ok());  // the error was reported once
  env.FailSyncs(true);
  EXPECT_FALSE((*f)->Sync().ok());
}

TEST(EnvTest, AtomicSmallFiles) {
  MemEnv env;
  ASSERT_TRUE(WriteFileAtomic(&env, "/m", "a longer first version").ok());
  ASSERT_TRUE(WriteFileAtomic(&env, "/m", "second").ok());
  auto s = ReadSmallFile(&env, "/m");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "second");
  EXPECT_FALSE(env.FileExists("/m.tmp"));
}

TEST(ManifestTest, RoundTripAndCorruption) {
  Manifest m;
  m.layout.size = 12345;
  m.layout.serving = ServingType::kFp16;
  m.layout.groups = {{0, 100, 0}, {200, 12345, 1}};
  m.sub_group_size = 2048;
  m.block_size = 4096;
  m.generation = 7;
  m.steps = 5;
  m.crcs[kP] = {1, 2, 3};
  m.crcs[kServe] = {9};
  std::string bytes = EncodeManifest(m);
  auto back = DecodeManifest(bytes, "/d/MANIFEST");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(EncodeManifest(*back), bytes);
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string bad = bytes;
    bad[i] ^= 0x20;
    auto r = DecodeManifest(bad, "/d/MANIFEST");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << i;
  }
  EXPECT_FALSE(DecodeManifest(bytes.substr(0, 30), "/d/MANIFEST").ok());
}

}  // namespace
}  // namespace storage
}  // namespace zeroshard
