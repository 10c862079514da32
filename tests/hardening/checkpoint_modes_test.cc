// Issue 23, item 9 (modes of written files): what a zeroshard-server
// writes — checkpoint directories and files, MANIFESTs, shutdown
// snapshots, the NVMe tier's directory, array files, manifest and lock —
// is 0600 (files) and 0700 (directories) even when the server runs with a
// umask of 0000 (set by a shell wrapper around the real binary).
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/hardening/checkpoint_testing.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

// Every entry under `dir` (and `dir` itself) with a mode other than 0600
// for files and 0700 for directories, as "path 0644"; counts in *files.
std::vector<std::string> WrongModes(const std::string& dir, int* files) {
  std::vector<std::string> wrong;
  auto check = [&](const std::filesystem::path& p) {
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) return;
    const unsigned mode = st.st_mode & 07777;
    const unsigned want = S_ISDIR(st.st_mode) ? 0700 : 0600;
    if (!S_ISDIR(st.st_mode)) ++*files;
    if (mode != want) {
      wrong.push_back(absl::StrFormat("%s %04o", p.string(), mode));
    }
  };
  check(dir);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    check(e.path());
  }
  return wrong;
}

TEST(CheckpointModes, FilesAre0600AndDirectories0700UnderUmask0000) {
  const std::string root = FreshDir("modes-bin");
  auto server = WorkspaceBinary("server/zeroshard-server");
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string wrapper = root + "/umask0000-server";
  WriteAll(wrapper, absl::StrCat("#!/bin/sh\numask 0000\nexec '", *server,
                                 "' \"$@\"\n"));
  ASSERT_EQ(chmod(wrapper.c_str(), 0755), 0);
  const std::string nvme = root + "/nvme";
  ASSERT_EQ(mkdir(nvme.c_str(), 0755), 0);  // the operator's directory
  auto job = StartCkptJob(
      "modes", 1,
      {"--storage=nvme", "--aio_block_size=4096", "--sub_group_size=2048",
       "--buffer_count=3", "--read_cache_bytes=16384",
       absl::StrCat("--nvme_path=", nvme)},
      wrapper);
  ASSERT_NE(job, nullptr);
  RegisterAndInit(*job, SmallSpec("modes", 1));
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  TrainStep(*job, 0);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  CheckpointStep(*job, 1);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  TrainStep(*job, 1);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  // SIGTERM: the server writes its shutdown snapshot of step 2.
  ASSERT_TRUE(job->fleet->Stop(std::chrono::seconds(60)).ok());
  ASSERT_TRUE(std::filesystem::exists(job->ckpt + "/step-0000000002"));

  int files = 0;
  std::vector<std::string> wrong = WrongModes(job->ckpt, &files);
  EXPECT_GE(files, 4) << "MANIFEST, shard files, snapshot";
  int nvme_files = 0;
  for (const std::string& w : WrongModes(nvme + "/shard-0", &nvme_files)) {
    wrong.push_back(w);
  }
  EXPECT_GE(nvme_files, 4);
  EXPECT_TRUE(wrong.empty()) << absl::StrJoin(wrong, "\n");
}

}  // namespace
}  // namespace zeroshard::testing
