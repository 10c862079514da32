// The NVMe storage tier through real zeroshard-server processes: the same
// training run with --storage=ram and --storage=nvme must give bit-identical
// fp32 masters and bf16 serving copies, the tier's I/O must show in
// GetStats, and a bad, locked, reused or corrupt --nvme_path must stop the
// server at start with one line naming the path. On a real, small tmpfs
// (when the test may mount one): a model the disk cannot hold is refused
// naming the path, and a disk that fills up mid-run fails the step with a
// clear error and leaves the committed state as it was.
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/dtype.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "tests/testing.h"

namespace zeroshard {
namespace {

// Small I/O sizes so that the test model spans several sub-groups.
const std::vector<std::string> kNvmeFlags = {
    "--storage=nvme", "--aio_block_size=4096", "--sub_group_size=2048",
    "--buffer_count=3", "--read_cache_bytes=16384"};

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name, "-", getpid());
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::unique_ptr<LocalFleet> Fleet(uint32_t k, const std::string& dir,
                                  bool nvme) {
  std::vector<std::string> extra;
  if (nvme) {
    extra = kNvmeFlags;
    extra.push_back(absl::StrCat("--nvme_path=", dir));
  }
  return testing::StartFleet(k, extra, dir);
}

// Trains `steps` steps on `fleet` with gradients drawn from a fixed seed
// (every slot pushed by one client, in two halves) and returns the fp32
// masters and the bf16 serving copy.
void Train(LocalFleet& fleet, const v1::ModelSpec& spec, bool write_init,
           v1::DType wire, int steps, std::vector<float>* params,
           std::vector<uint16_t>* served) {
  auto client = testing::Connect(fleet);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->RegisterModel(spec).ok());
  const uint64_t total = client->plan().total();
  std::mt19937_64 rng(99);
  if (write_init) {
    std::vector<float> init = testing::RandomVector(rng, total, 0.02f);
    ASSERT_TRUE(client->WriteParameters(Range{0, total}, init.data()).ok());
  }
  for (int step = 0; step < steps; ++step) {
    for (uint32_t s = 0; s < spec.contributions_per_step(); ++s) {
      std::vector<float> g = testing::RandomVector(rng, total, 0.5f);
      std::vector<uint16_t> g16(total);
      ConvertFp32ToBf16(g.data(), g16.data(), total);
      const uint64_t half = total / 2 / spec.alignment() * spec.alignment();
      for (Range r : {Range{0, half}, Range{half, total}}) {
        PushId id{0, static_cast<uint64_t>(step), s,
                  absl::StrCat("s", step, "/", s, "/", r.begin)};
        const void* data = wire == v1::DTYPE_FP32
                               ? static_cast<const void*>(g.data() + r.begin)
                               : g16.data() + r.begin;
        ASSERT_TRUE(client->Push(r, wire, data, id).ok());
      }
    }
    auto norm = client->Prepare(0, step);
    ASSERT_TRUE(norm.ok()) << norm.status();
    const float clip = static_cast<float>(std::min(1.0, 1.0 / norm->norm()));
    const absl::Status committed =
        client->Commit(0, step, clip, 1e-3 * (step + 1), false);
    ASSERT_TRUE(committed.ok()) << committed;
  }
  params->resize(total);
  served->resize(total);
  ASSERT_TRUE(
      client->Gather(Range{0, total}, v1::DTYPE_FP32, params->data()).ok());
  ASSERT_TRUE(
      client->Gather(Range{0, total}, v1::DTYPE_BF16, served->data()).ok());
}

struct Case {
  uint32_t slots;
  v1::DType wire;
  bool seeded;  // seeded init instead of WriteParameters
};

void CompareRamAndNvme(const Case& c) {
  SCOPED_TRACE(::testing::Message()
               << "slots=" << c.slots << " wire=" << v1::DType_Name(c.wire));
  v1::ModelSpec spec = testing::SmallSpec("storage", 2, 3, c.slots);
  if (c.seeded) {
    spec.mutable_init()->set_seed(7);
    spec.mutable_init()->set_std(0.02);
  }
  std::vector<float> p_ram, p_nvme;
  std::vector<uint16_t> s_ram, s_nvme;
  const std::string tag = absl::StrCat(c.slots, "-", c.wire, "-", c.seeded);
  auto ram = Fleet(2, TmpDir("ram-" + tag), false);
  ASSERT_NE(ram, nullptr);
  Train(*ram, spec, !c.seeded, c.wire, 4, &p_ram, &s_ram);
  const std::string nvme_path = TmpDir("nvme-" + tag);
  auto nvme = Fleet(2, nvme_path, true);
  ASSERT_NE(nvme, nullptr);
  Train(*nvme, spec, !c.seeded, c.wire, 4, &p_nvme, &s_nvme);
  const int64_t diff = testing::FirstBitDifference(p_ram, p_nvme);
  ASSERT_EQ(diff, -1) << "element " << diff << ": " << p_ram[diff] << " vs "
                      << p_nvme[diff];
  ASSERT_EQ(s_ram, s_nvme);
  std::printf("digest: %s params crc32c %08x served crc32c %08x\n", tag.c_str(),
              Crc32c(p_ram.data(), p_ram.size() * 4),
              Crc32c(s_ram.data(), s_ram.size() * 2));

  auto stats = testing::Connect(*nvme)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const auto& s : *stats) {
    EXPECT_EQ(s.storage(), "nvme");
    EXPECT_EQ(s.optimizer_steps(), 4u);
    EXPECT_GT(s.storage_bytes_read(), 0u);
    EXPECT_GT(s.storage_bytes_written(), 0u);
    // Contributions beyond the first were summed on disk, not in RAM: one
    // file per further slot, the size of the owned range.
    for (uint32_t slot = 1; slot < c.slots; ++slot) {
      const std::string file = absl::StrCat(
          nvme_path, "/shard-", s.shard_index(), ".slots/slot-", slot, ".f32");
      struct stat st;
      ASSERT_EQ(stat(file.c_str(), &st), 0) << file;
      EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * s.owned_elements())
          << file;
    }
  }
  stats = testing::Connect(*ram)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  for (const auto& s : *stats) {
    EXPECT_EQ(s.storage(), "ram");
    EXPECT_EQ(s.storage_bytes_written(), 0u);
  }
  EXPECT_TRUE(nvme->Stop(std::chrono::milliseconds(5000)).ok());
  EXPECT_TRUE(ram->Stop(std::chrono::milliseconds(5000)).ok());
}

TEST(StorageTest, RamAndNvmeBitIdenticalOneSlotFp32) {
  CompareRamAndNvme({1, v1::DTYPE_FP32, false});
}

TEST(StorageTest, RamAndNvmeBitIdenticalTwoSlotsBf16Seeded) {
  CompareRamAndNvme({2, v1::DTYPE_BF16, true});
}

TEST(StorageTest, RamAndNvmeBitIdenticalThreeSlotsFp32) {
  CompareRamAndNvme({3, v1::DTYPE_FP32, false});
}

// Starts one server (shard 0 of 1) with `args` and returns its exit code
// (-1 if it did not exit by itself) and its output.
int RunServer(const std::vector<std::string>& args, const std::string& log,
              std::string* output) {
  auto binary = WorkspaceBinary("server/zeroshard-server");
  EXPECT_TRUE(binary.ok()) << binary.status();
  SpawnOptions options;
  options.argv = {*binary, "--port=0", "--insecure"};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.log_path = log;
  auto child = Subprocess::Spawn(options);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return -1;
  auto status = child->Wait(std::chrono::milliseconds(20000));
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  *output = text.str();
  if (!status.ok() || !WIFEXITED(*status)) return -1;
  return WEXITSTATUS(*status);
}

std::vector<std::string> NvmeArgs(const std::string& path) {
  std::vector<std::string> args = kNvmeFlags;
  args.push_back("--nvme_path=" + path);
  return args;
}

TEST(StorageTest, BadNvmePathExitsTwo) {
  const std::string dir = TmpDir("bad");
  std::string out;
  const std::string missing = dir + "/missing";
  EXPECT_EQ(RunServer(NvmeArgs(missing), dir + "/1.log", &out), 2);
  EXPECT_NE(out.find(missing + " does not exist"), std::string::npos) << out;
  const std::string file = dir + "/file";
  std::ofstream(file) << "x";
  EXPECT_EQ(RunServer(NvmeArgs(file), dir + "/2.log", &out), 2);
  EXPECT_NE(out.find(file + " is not a directory"), std::string::npos) << out;
  if (geteuid() != 0) {  // root writes anywhere
    const std::string ro = dir + "/ro";
    mkdir(ro.c_str(), 0555);
    EXPECT_EQ(RunServer(NvmeArgs(ro), dir + "/3.log", &out), 2);
    EXPECT_NE(out.find(ro + " is not writable"), std::string::npos) << out;
  }
  EXPECT_EQ(RunServer({"--storage=nvme"}, dir + "/4.log", &out), 2);
  EXPECT_NE(out.find("needs --nvme_path"), std::string::npos) << out;
  EXPECT_EQ(RunServer({"--storage=disk"}, dir + "/5.log", &out), 2);
  EXPECT_EQ(RunServer({"--nvme_path=" + dir}, dir + "/6.log", &out), 2);
  std::vector<std::string> args = NvmeArgs(dir);
  args.push_back("--buffer_count=2");
  EXPECT_EQ(RunServer(args, dir + "/7.log", &out), 2);
  EXPECT_NE(out.find("buffer_count"), std::string::npos) << out;
}

// Flips one byte in the middle of `path`.
void Corrupt(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  ASSERT_GT(size, 0);
  f.seekg(size / 2);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(size / 2);
  f.write(&c, 1);
}

TEST(StorageTest, LockedReusedAndCorruptStateExitOne) {
  const std::string dir = TmpDir("state");
  const std::string state = dir + "/shard-0";
  std::string out;
  {
    auto fleet = Fleet(1, dir, true);
    ASSERT_NE(fleet, nullptr);
    EXPECT_EQ(RunServer(NvmeArgs(dir), dir + "/locked.log", &out), 1);
    EXPECT_NE(out.find(state + "/LOCK is locked"), std::string::npos) << out;
    std::vector<float> p;
    std::vector<uint16_t> s;
    Train(*fleet, testing::SmallSpec("state", 1), true, v1::DTYPE_FP32, 1, &p,
          &s);
    EXPECT_TRUE(fleet->Stop(std::chrono::milliseconds(5000)).ok());
  }
  // A previous run's state is refused, not silently reused.
  EXPECT_EQ(RunServer(NvmeArgs(dir), dir + "/reused.log", &out), 1);
  EXPECT_NE(out.find(state + " holds the state of a previous run"),
            std::string::npos)
      << out;
  // A corrupt state file is named.
  std::string p_file;
  for (int g = 0; g < 16 && p_file.empty(); ++g) {
    const std::string name = absl::StrCat(state, "/p.", g);
    if (access(name.c_str(), F_OK) == 0) p_file = name;
  }
  ASSERT_FALSE(p_file.empty());
  Corrupt(p_file);
  EXPECT_EQ(RunServer(NvmeArgs(dir), dir + "/corrupt.log", &out), 1);
  EXPECT_NE(out.find(p_file), std::string::npos) << out;
  Corrupt(state + "/MANIFEST");
  EXPECT_EQ(RunServer(NvmeArgs(dir), dir + "/manifest.log", &out), 1);
  EXPECT_NE(out.find(state + "/MANIFEST"), std::string::npos) << out;
}

// A server with --checkpoint_dir killed before its first checkpoint: its
// NVMe state is all there is of the job, so its restart refuses that state
// naming both directories and removes nothing (it used to delete it for a
// checkpoint that did not exist); once a checkpoint exists, a restart
// discards the state for it, and says so.
TEST(StorageTest, KilledBeforeTheFirstCheckpointKeepsItsState) {
  const std::string dir = TmpDir("killed");
  const std::string ckpt = dir + "/ckpt";
  const std::string state = dir + "/shard-0";
  std::vector<std::string> args = NvmeArgs(dir);
  args.push_back("--checkpoint_dir=" + ckpt);
  std::vector<float> p;
  std::vector<uint16_t> s;
  {
    auto fleet = testing::StartFleet(1, args, dir);
    ASSERT_NE(fleet, nullptr);
    Train(*fleet, testing::SmallSpec("killed", 1), true, v1::DTYPE_FP32, 2, &p,
          &s);
    fleet->server(0).Signal(SIGKILL);
    ASSERT_TRUE(fleet->server(0).Wait(std::chrono::seconds(20)).ok());
  }
  std::string out;
  EXPECT_EQ(RunServer(args, dir + "/restart.log", &out), 1);
  EXPECT_NE(out.find(state + " holds the state of a previous run"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("--checkpoint_dir " + ckpt + " holds no checkpoint"),
            std::string::npos)
      << out;
  EXPECT_EQ(access((state + "/MANIFEST").c_str(), F_OK), 0) << "removed";
  {
    // Moved away, the shard starts afresh; a checkpoint, then a kill.
    ASSERT_EQ(std::system(("rm -rf '" + state + "'").c_str()), 0);
    auto fleet = testing::StartFleet(1, args, dir);
    ASSERT_NE(fleet, nullptr);
    Train(*fleet, testing::SmallSpec("killed", 1), true, v1::DTYPE_FP32, 2, &p,
          &s);
    auto client = testing::Connect(*fleet);
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->AttachToRegistered().ok());
    ASSERT_TRUE(client->Checkpoint(2, nullptr).ok());
    ASSERT_TRUE(fleet->Restart(0).ok());
    std::ifstream in(dir + "/server-0.restart-1.log");
    std::stringstream log;
    log << in.rdbuf();
    EXPECT_NE(log.str().find("discarded the previous state in " + state +
                             " (the newest checkpoint or shutdown snapshot "
                             "in " +
                             ckpt + " is restored instead)"),
              std::string::npos)
        << log.str();
    EXPECT_TRUE(fleet->Stop(std::chrono::milliseconds(5000)).ok());
  }
}

// A tmpfs of `bytes` at `dir`, unmounted when it goes away.
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, uint64_t bytes) : dir_(dir) {
    mkdir(dir.c_str(), 0755);
    mounted_ = mount("tmpfs", dir.c_str(), "tmpfs", 0,
                     absl::StrCat("size=", bytes).c_str()) == 0;
  }
  ~Tmpfs() {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }

 private:
  std::string dir_;
  bool mounted_ = false;
};

TEST(StorageTest, FullDiskRefusesTheModelOrFailsTheStepCleanly) {
  const std::string dir = TmpDir("full");
  Tmpfs disk(dir + "/disk", 4 << 20);
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN)";
  }
  const std::string path = dir + "/disk";
  auto fleet = Fleet(1, path, true);
  ASSERT_NE(fleet, nullptr);
  auto client = testing::Connect(*fleet);
  ASSERT_NE(client, nullptr);
  // ~460k elements need ~15 MiB: refused, naming the path.
  absl::Status big = client->RegisterModel(testing::SmallSpec("full", 1, 20));
  EXPECT_EQ(big.code(), absl::StatusCode::kResourceExhausted) << big;
  EXPECT_NE(big.message().find(path), std::string::npos) << big;
  EXPECT_NE(big.message().find("bytes free"), std::string::npos) << big;

  // A model that fits trains a step; then the disk fills up.
  const v1::ModelSpec spec = testing::SmallSpec("full", 1);
  std::vector<float> before;
  std::vector<uint16_t> served;
  Train(*fleet, spec, true, v1::DTYPE_FP32, 1, &before, &served);
  ASSERT_FALSE(HasFatalFailure());
  {
    std::ofstream filler(path + "/filler", std::ios::binary);
    const std::string block(1 << 16, 'x');
    while (filler.write(block.data(), block.size()) && filler.flush()) {
    }
  }
  ASSERT_TRUE(client->RegisterModel(spec).ok());
  const uint64_t total = client->plan().total();
  std::vector<float> g(total, 0.25f);
  absl::Status step = client->Push(Range{0, total}, v1::DTYPE_FP32, g.data(),
                                   PushId{0, 1, 0, "full/1"});
  if (step.ok()) {
    auto norm = client->Prepare(0, 1);
    step = norm.status();
    if (step.ok()) step = client->Commit(0, 1, 1.0f, 1e-3, false);
  }
  std::printf("step on a full disk: %s\n", step.ToString().c_str());
  EXPECT_EQ(step.code(), absl::StatusCode::kResourceExhausted) << step;
  EXPECT_NE(step.message().find("No space left"), std::string::npos) << step;
  // The committed state is the one before: step 1, the same bits.
  std::vector<float> after(total);
  uint64_t at = 0;
  ASSERT_TRUE(
      client->Gather(Range{0, total}, v1::DTYPE_FP32, after.data(), &at).ok());
  EXPECT_EQ(at, 1u);
  EXPECT_EQ(std::memcmp(after.data(), before.data(), 4 * total), 0);
  unlink((path + "/filler").c_str());
}

}  // namespace
}  // namespace zeroshard
