// NvmeTier against RamTier (bit-identical state after the same calls), and
// its behaviour on bad input: full device, I/O errors, failed commits,
// corrupt or truncated files, missing paths. Small sizes that are not
// multiples of the block or the sub-group size; MemEnv for most cases, the
// real file system (TEST_TMPDIR) where links and O_DIRECT matter.
#include "server/storage/nvme_tier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env/fault_env.h"
#include "common/env/mem_env.h"
#include "common/thread_pool.h"
#include "gtest/gtest.h"
#include "server/storage/ram_tier.h"
#include "server/storage/tier_test_util.h"

namespace zeroshard {
namespace storage {
namespace {

constexpr uint64_t kN = 3 * 6144 + 1234;  // 3.2 sub-groups, odd tail

NvmeOptions SmallOptions(Env* env, const std::string& path, ThreadPool* pool) {
  NvmeOptions o;
  o.path = path;
  o.env = env;
  o.pool = pool;
  o.block_size = 4096;
  o.sub_group_size = 6144;  // 2 × 6144 × ... = 3 blocks of fp16, 6 of fp32
  o.buffer_count = 3;
  o.queue_depth = 4;
  o.intra_op_parallelism = 2;
  o.read_cache_bytes = 3 * 4096;
  return o;
}

absl::Status Init(StorageTier* t) {
  const std::vector<float> p = RandomFloats(t->layout().size, 7);
  return InPieces(t->layout().size, 777, [&](uint64_t b, uint64_t len) {
    return t->WriteMaster(b, p.data() + b, len);
  });
}

// Gradients (written, then accumulated in other pieces) and one step.
absl::Status FeedAndStep(StorageTier* t, int step) {
  const uint64_t n = t->layout().size;
  const std::vector<float> g1 = RandomFloats(n, 100 + step);
  const std::vector<float> g2 = RandomFloats(n, 200 + step);
  absl::Status s = t->ZeroGrad();
  if (s.ok()) {
    s = InPieces(n, 1000 + 333 * step, [&](uint64_t b, uint64_t len) {
      return t->WriteGrad(b, g1.data() + b, len);
    });
  }
  if (s.ok()) {
    s = InPieces(n, 4099, [&](uint64_t b, uint64_t len) {
      return t->AddGrad(b, g2.data() + b, len);
    });
  }
  if (s.ok()) s = t->Step(TwoGroupHypers(step));
  return s;
}

std::unique_ptr<RamTier> Reference(int steps) {
  auto ram = RamTier::Create(TwoGroupLayout(kN), nullptr);
  EXPECT_TRUE(ram.ok());
  EXPECT_TRUE(Init(ram->get()).ok());
  for (int s = 1; s <= steps; ++s) EXPECT_TRUE(FeedAndStep(ram->get(), s).ok());
  return std::move(*ram);
}

TierState StateOf(StorageTier* t) {
  TierState s;
  absl::Status st = ReadState(t, &s);
  EXPECT_TRUE(st.ok()) << st;
  return s;
}

std::string TmpDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return JoinPath(t != nullptr ? t : "/tmp", name);
}

struct ParityCase {
  bool posix;
  GradLocation grads;
};

class ParityTest : public ::testing::TestWithParam<ParityCase> {};

TEST_P(ParityTest, BitIdenticalToRamTierAndPersistent) {
  MemEnv mem;
  Env* env = GetParam().posix ? DefaultEnv() : &mem;
  const std::string path =
      GetParam().posix
          ? TmpDir(absl::StrCat("parity", static_cast<int>(GetParam().grads)))
          : "/tier";
  ThreadPool pool(2);
  NvmeOptions o = SmallOptions(env, path, &pool);
  o.grads = GetParam().grads;
  auto ram = RamTier::Create(TwoGroupLayout(kN), &pool);
  ASSERT_TRUE(ram.ok());
  auto nvme = NvmeTier::Create(o, TwoGroupLayout(kN));
  ASSERT_TRUE(nvme.ok()) << nvme.status();
  ASSERT_TRUE(Init(ram->get()).ok());
  ASSERT_TRUE(Init(nvme->get()).ok());
  EXPECT_TRUE(StateOf(ram->get()) == StateOf(nvme->get()));
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(FeedAndStep(ram->get(), step).ok());
    absl::Status s = FeedAndStep(nvme->get(), step);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(StateOf(ram->get()) == StateOf(nvme->get())) << "step " << step;
  }
  TierStats st = (*nvme)->Stats();
  EXPECT_EQ(st.steps, 3u);
  EXPECT_GT(st.bytes_read, 0u);
  EXPECT_GT(st.bytes_written, 0u);
  EXPECT_GT(st.last_step_bytes, 0u);
  if (GetParam().posix) {
    std::printf("posix tier: O_DIRECT %s\n", st.direct_io ? "yes" : "no");
  }
  // Reopen: p, m, v, serve and the step count survive; gradients restart
  // at zero (not durable).
  TierState want = StateOf(ram->get());
  nvme->reset();
  auto again = NvmeTier::Open(o);
  ASSERT_TRUE(again.ok()) << again.status();
  TierState got = StateOf(again->get());
  std::fill(want.g.begin(), want.g.end(), 0.0f);
  EXPECT_TRUE(got == want);
  EXPECT_TRUE((*again)->Verify().ok());
}

INSTANTIATE_TEST_SUITE_P(
    Tiers, ParityTest,
    ::testing::Values(ParityCase{false, GradLocation::kDisk},
                      ParityCase{false, GradLocation::kRam},
                      ParityCase{true, GradLocation::kDisk}));

TEST(NvmeTierTest, BuffersDoNotGrowWithModelSize) {
  uint64_t peak[2];
  for (int i = 0; i < 2; ++i) {
    MemEnv env;
    NvmeOptions o = SmallOptions(&env, "/t", nullptr);
    const uint64_t n = i == 0 ? kN : 8 * kN;
    auto t = NvmeTier::Create(o, TwoGroupLayout(n));
    ASSERT_TRUE(t.ok());
    std::vector<uint16_t> serve(n);
    ASSERT_TRUE((*t)->Step(TwoGroupHypers(1)).ok());
    ASSERT_TRUE((*t)->ReadServing(0, n, serve.data(), nullptr).ok());
    peak[i] = (*t)->Stats().peak_bytes_allocated;
  }
  // buffer_count sub-group buffers of 18 bytes/element, the cache and one
  // scratch chunk: independent of the number of elements.
  const uint64_t bound = 3 * 6144 * 18 + 3 * 4096 + 4096;
  std::printf("peak tier allocation %llu bytes for %llu and %llu elements\n",
              static_cast<unsigned long long>(peak[1]),
              static_cast<unsigned long long>(kN),
              static_cast<unsigned long long>(8 * kN));
  EXPECT_EQ(peak[0], peak[1]);
  EXPECT_LE(peak[1], bound);
}

// A step that fails (ENOSPC while writing, EIO while reading, a failed
// manifest rename) leaves the previous step's state readable, also after a
// reopen, and a retry then matches the RAM tier.
class FailedStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = NvmeTier::Create(SmallOptions(&env_, "/t", nullptr),
                              TwoGroupLayout(kN));
    ASSERT_TRUE(t.ok());
    tier_ = std::move(*t);
    ASSERT_TRUE(Init(tier_.get()).ok());
    ASSERT_TRUE(FeedAndStep(tier_.get(), 1).ok());
    before_ = StateOf(tier_.get());
  }
  void ExpectRecovers() {
    TierState now = StateOf(tier_.get());
    now.g = before_.g;  // FeedAndStep rewrote the gradients
    EXPECT_TRUE(now == before_);
    tier_.reset();
    env_.ClearFaults();
    auto t = NvmeTier::Open(SmallOptions(&env_, "/t", nullptr));
    ASSERT_TRUE(t.ok()) << t.status();
    tier_ = std::move(*t);
    TierState reopened = StateOf(tier_.get());
    reopened.g = before_.g;
    EXPECT_TRUE(reopened == before_);
    ASSERT_TRUE(FeedAndStep(tier_.get(), 2).ok());
    EXPECT_TRUE(StateOf(tier_.get()) == StateOf(Reference(2).get()));
  }
  MemEnv mem_;
  FaultEnv env_{&mem_};
  std::unique_ptr<NvmeTier> tier_;
  TierState before_;
};

TEST_F(FailedStepTest, DeviceFullWhileWriting) {
  // Room for the new generation's allocation and a few chunks only.
  uint64_t alloc = 0;
  for (int k = 0; k < kStateArrays; ++k) {
    alloc += 4096 + PaddedBytes(kN, ElementBytes(ArrayKind(k)));
  }
  ASSERT_TRUE(tier_->ZeroGrad().ok());
  env_.SetWriteBudget(static_cast<int64_t>(alloc + 5 * 4096));
  absl::Status s = tier_->Step(TwoGroupHypers(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "/t/")) << s;
  ExpectRecovers();
}

TEST_F(FailedStepTest, DeviceFullWhenAllocating) {
  env_.SetWriteBudget(100);
  absl::Status s = tier_->Step(TwoGroupHypers(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  ExpectRecovers();
}

TEST_F(FailedStepTest, ReadError) {
  env_.FailReads("/t/m.", 1);
  absl::Status s = tier_->Step(TwoGroupHypers(2));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "/t/m.")) << s;
  ExpectRecovers();
}

TEST_F(FailedStepTest, ManifestRenameFails) {
  env_.FailRenames(true);
  absl::Status s = tier_->Step(TwoGroupHypers(2));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(absl::StrContains(s.message(), "MANIFEST")) << s;
  ExpectRecovers();
}

TEST(NvmeTierTest, CorruptChunkIsReportedWithItsFile) {
  MemEnv env;
  auto t =
      NvmeTier::Create(SmallOptions(&env, "/t", nullptr), TwoGroupLayout(kN));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(FeedAndStep(t->get(), 1).ok());
  const std::string file = absl::StrCat("/t/v.", (*t)->generation());
  ASSERT_TRUE(env.FlipByte(file, 4096 + 3 * 4096 + 17).ok());
  std::vector<float> m(kN), v(kN);
  absl::Status s = (*t)->ReadMoments(0, kN, m.data(), v.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(s.message(), file)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "checksum")) << s;
  s = (*t)->Step(TwoGroupHypers(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ((*t)->Stats().steps, 1u);  // nothing committed
  EXPECT_EQ((*t)->Verify().code(), absl::StatusCode::kDataLoss);
}

TEST(NvmeTierTest, TruncatedFileRefusesToOpen) {
  MemEnv env;
  NvmeOptions o = SmallOptions(&env, "/t", nullptr);
  uint64_t gen;
  {
    auto t = NvmeTier::Create(o, TwoGroupLayout(kN));
    ASSERT_TRUE(t.ok());
    gen = (*t)->generation();
  }
  const std::string file = absl::StrCat("/t/serve.", gen);
  ASSERT_TRUE(env.Truncate(file, 8192).ok());
  auto t = NvmeTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(t.status().message(), file)) << t.status();
  EXPECT_TRUE(absl::StrContains(t.status().message(), "truncated"));
  ASSERT_TRUE(env.RemoveFile(file).ok());
  t = NvmeTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss) << t.status();
}

TEST(NvmeTierTest, CorruptManifestRefusesToOpen) {
  MemEnv env;
  NvmeOptions o = SmallOptions(&env, "/t", nullptr);
  ASSERT_TRUE(NvmeTier::Create(o, TwoGroupLayout(kN)).ok());
  ASSERT_TRUE(env.FlipByte("/t/MANIFEST", 20).ok());
  auto t = NvmeTier::Open(o);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "/t/MANIFEST"));
}

TEST(NvmeTierTest, InterruptedWriteMasterIsRefused) {
  MemEnv env;
  NvmeOptions o = SmallOptions(&env, "/t", nullptr);
  {
    auto t = NvmeTier::Create(o, TwoGroupLayout(kN));
    ASSERT_TRUE(t.ok());
    float x = 1;
    ASSERT_TRUE((*t)->WriteMaster(5, &x, 1).ok());
  }  // "crash" before Flush
  EXPECT_EQ(NvmeTier::Open(o).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(NvmeTierTest, BadPathsAndOptions) {
  MemEnv env;
  NvmeOptions o = SmallOptions(&env, "/missing/tier", nullptr);
  EXPECT_EQ(NvmeTier::Create(o, TwoGroupLayout(kN)).status().code(),
            absl::StatusCode::kNotFound);
  auto open = NvmeTier::Open(o);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(open.status().message(), "/missing/tier"));
  // Full device: refused up front by the free-space check.
  FaultEnv full(&env);
  full.SetWriteBudget(10000);
  auto t = NvmeTier::Create(SmallOptions(&full, "/full", nullptr),
                            TwoGroupLayout(kN));
  EXPECT_EQ(t.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(t.status().message(), "/full")) << t.status();
  // A path below a regular file (real file system).
  const std::string file = TmpDir("plain_file");
  FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  t = NvmeTier::Create(SmallOptions(DefaultEnv(), file + "/tier", nullptr),
                       TwoGroupLayout(kN));
  EXPECT_FALSE(t.ok());
  EXPECT_TRUE(absl::StrContains(t.status().message(), file)) << t.status();
  // Options.
  o = SmallOptions(&env, "/t", nullptr);
  o.sub_group_size = 1000;
  EXPECT_EQ(NvmeTier::Create(o, TwoGroupLayout(kN)).status().code(),
            absl::StatusCode::kInvalidArgument);
  o = SmallOptions(&env, "/t", nullptr);
  o.buffer_count = 2;
  EXPECT_EQ(NvmeTier::Create(o, TwoGroupLayout(kN)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NvmeTierTest, SnapshotHardLinksAndStaysUnchanged) {
  const std::string dir = TmpDir("snap_src"), snap = TmpDir("snap");
  NvmeOptions o = SmallOptions(DefaultEnv(), dir, nullptr);
  auto t = NvmeTier::Create(o, TwoGroupLayout(kN));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(Init(t->get()).ok());
  ASSERT_TRUE(FeedAndStep(t->get(), 1).ok());
  TierState at_snapshot = StateOf(t->get());
  ASSERT_TRUE((*t)->Snapshot(snap).ok());
  struct stat st;
  ASSERT_EQ(
      stat(JoinPath(snap, absl::StrCat("p.", (*t)->generation())).c_str(), &st),
      0);
  EXPECT_EQ(st.st_nlink, 2u);  // shared with the live tier, not copied
  EXPECT_EQ((*t)->Snapshot(snap).code(), absl::StatusCode::kAlreadyExists);
  // The live tier moves on: a parameter write (copy-on-write) and a step.
  float x = 42;
  ASSERT_TRUE((*t)->WriteMaster(3, &x, 1).ok());
  ASSERT_TRUE(FeedAndStep(t->get(), 2).ok());
  NvmeOptions so = o;
  so.path = snap;
  auto s = NvmeTier::Open(so);
  ASSERT_TRUE(s.ok()) << s.status();
  TierState got = StateOf(s->get());
  std::fill(at_snapshot.g.begin(), at_snapshot.g.end(), 0.0f);
  EXPECT_TRUE(got == at_snapshot);
}

TEST(NvmeTierTest, ServingReadsGoThroughTheCache) {
  MemEnv env;
  auto t =
      NvmeTier::Create(SmallOptions(&env, "/t", nullptr), TwoGroupLayout(kN));
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(Init(t->get()).ok());
  std::vector<uint16_t> a(100), b(100);
  ASSERT_TRUE((*t)->ReadServing(10, 100, a.data(), nullptr).ok());
  ASSERT_TRUE((*t)->ReadServing(10, 100, b.data(), nullptr).ok());
  EXPECT_EQ((*t)->Stats().cache_misses, 1u);
  EXPECT_EQ((*t)->Stats().cache_hits, 1u);
  ASSERT_TRUE(FeedAndStep(t->get(), 1).ok());
  uint64_t step = 0;
  ASSERT_TRUE((*t)->ReadServing(10, 100, b.data(), &step).ok());
  EXPECT_EQ(step, 1u);
  EXPECT_EQ((*t)->Stats().cache_misses, 2u);  // new generation
  EXPECT_NE(a, b);
}

// Gradient writers of neighbouring ranges (sharing chunks at their ends)
// run concurrently; one breaks off and its range is written again. Every
// element ends up with its last writer's value, every chunk's CRC holds
// (ReadGrad checks them), and RAM stays bounded per writer.
class GradWriterTest : public ::testing::TestWithParam<bool> {};

TEST_P(GradWriterTest, NeighbouringWritersLoseNothing) {
  MemEnv mem;
  const bool posix = GetParam();
  Env* env = posix ? DefaultEnv() : &mem;
  ThreadPool pool(2);
  NvmeOptions o =
      SmallOptions(env, posix ? TmpDir("grad_writers") : "/t", &pool);
  auto t = NvmeTier::Create(o, TwoGroupLayout(kN));
  ASSERT_TRUE(t.ok()) << t.status();
  NvmeTier* tier = t->get();
  // Stale values that every writer must replace.
  const std::vector<float> stale = RandomFloats(kN, 5);
  ASSERT_TRUE(tier->WriteGrad(0, stale.data(), kN).ok());
  const std::vector<float> want = RandomFloats(kN, 6);
  const std::vector<float> junk = RandomFloats(kN, 8);
  // Ranges of 1 element to several chunks (1024 elements per chunk).
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const uint64_t sizes[] = {1, 700, 1024, 2048, 3000, 5000, 333, 4096};
  for (uint64_t b = 0, i = 0; b < kN; ++i) {
    const uint64_t len = std::min<uint64_t>(sizes[i % 8], kN - b);
    ranges.push_back({b, len});
    b += len;
  }
  const uint64_t before = tier->Stats().bytes_allocated;
  std::vector<absl::Status> status(ranges.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranges.size(); ++r) {
    threads.emplace_back([&, r] {
      const auto [b, len] = ranges[r];
      if (r % 3 == 1) {  // a stream that breaks off halfway first
        auto w = tier->NewGradWriter(b, len);
        if (!w.ok()) return void(status[r] = w.status());
        status[r] = (*w)->Append(junk.data() + b, len / 2);
        if (!status[r].ok()) return;
      }
      auto w = tier->NewGradWriter(b, len);
      if (!w.ok()) return void(status[r] = w.status());
      absl::Status& s = status[r];
      const uint64_t piece = 97 + 300 * (r % 4);
      for (uint64_t e = 0; e < len && s.ok(); e += piece) {
        s = (*w)->Append(want.data() + b + e, std::min(piece, len - e));
      }
      if (s.ok()) s = (*w)->Finish();
    });
  }
  for (std::thread& th : threads) th.join();
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(tier->Stats().bytes_allocated, before);
  std::vector<float> got(kN);
  absl::Status s = tier->ReadGrad(0, kN, got.data());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(got == want);
  // Per writer: two stages of kGradWriterChunks chunks and one scratch
  // chunk, whatever the range's length.
  const uint64_t per_writer = (2 * NvmeTier::kGradWriterChunks + 1) * 4096;
  EXPECT_LE(tier->Stats().peak_bytes_allocated,
            before + ranges.size() * 2 * per_writer);

  // Misuse: past the end, short Finish; outside the tier.
  auto w = tier->NewGradWriter(10, 5);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Append(want.data(), 6).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*w)->Append(want.data(), 4).ok());
  EXPECT_EQ((*w)->Finish().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->NewGradWriter(kN - 1, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Envs, GradWriterTest, ::testing::Bool());

// A write error reaches the writer's caller; the stream's range can be
// written again once the device recovers.
TEST(NvmeTierTest, GradWriterReportsWriteErrors) {
  MemEnv mem;
  FaultEnv env(&mem);
  auto t =
      NvmeTier::Create(SmallOptions(&env, "/t", nullptr), TwoGroupLayout(kN));
  ASSERT_TRUE(t.ok());
  const std::vector<float> g = RandomFloats(kN, 9);
  env.SetWriteBudget(3 * 4096);
  absl::Status s;
  {
    auto w = (*t)->NewGradWriter(0, kN);
    ASSERT_TRUE(w.ok());
    s = (*w)->Append(g.data(), kN);
    if (s.ok()) s = (*w)->Finish();
  }
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  env.ClearFaults();
  auto w = (*t)->NewGradWriter(0, kN);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Append(g.data(), kN).ok());
  ASSERT_TRUE((*w)->Finish().ok());
  std::vector<float> got(kN);
  ASSERT_TRUE((*t)->ReadGrad(0, kN, got.data()).ok());
  EXPECT_TRUE(got == g);
}

}  // namespace
}  // namespace storage
}  // namespace zeroshard
