// The whole-file helpers (env.h, files.h) and the Env calls they rest on,
// run against the real PosixEnv (in $TEST_TMPDIR) and MemEnv alike; the
// failure cases through FaultEnv: a failed write leaves the old file, and
// every error names the path.
#include "common/env/env.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env/fault_env.h"
#include "common/env/files.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"

namespace zeroshard {
namespace {

using absl::StatusCode;

bool Names(const absl::Status& s, const std::string& path) {
  return s.message().find(path) != absl::string_view::npos;
}

// A fresh, empty directory under $TEST_TMPDIR.
std::string PosixTempDir() {
  std::string t =
      absl::StrCat(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp",
                   "/env_test_XXXXXX");
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  return t;
}

// Runs each test on PosixEnv and on MemEnv; dir_ is an empty directory.
class EnvTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      env_ = DefaultEnv();
      dir_ = PosixTempDir();
    } else {
      env_ = &mem_;
      dir_ = "/t";
      ASSERT_TRUE(mem_.CreateDir(dir_).ok());
    }
  }
  std::string Path(const std::string& name) const {
    return JoinPath(dir_, name);
  }
  std::vector<std::string> List() {
    absl::StatusOr<std::vector<std::string>> names = env_->ListDir(dir_);
    EXPECT_TRUE(names.ok()) << names.status();
    std::sort(names->begin(), names->end());
    return *names;
  }
  MemEnv mem_;
  Env* env_ = nullptr;
  std::string dir_;
};

INSTANTIATE_TEST_SUITE_P(PosixAndMem, EnvTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Posix" : "Mem";
                         });

TEST_P(EnvTest, WriteFileAtomicThenReadSmallFile) {
  const std::string p = Path("small");
  ASSERT_TRUE(WriteFileAtomic(env_, p, "old contents").ok());
  ASSERT_TRUE(WriteFileAtomic(env_, p, "new").ok());
  absl::StatusOr<std::string> s = ReadSmallFile(env_, p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "new");
  EXPECT_EQ(List(), std::vector<std::string>{"small"});  // no .tmp left

  const std::string big(10000, 'x');
  ASSERT_TRUE(WriteFileAtomic(env_, p, big).ok());
  EXPECT_EQ(*ReadSmallFile(env_, p), big);
  const absl::StatusOr<std::string> over = ReadSmallFile(env_, p, 9999);
  EXPECT_EQ(over.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Names(over.status(), p)) << over.status();
  EXPECT_EQ(ReadSmallFile(env_, p, 10000).value(), big);  // exactly the bound

  const absl::StatusOr<std::string> missing = ReadSmallFile(env_, Path("no"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Names(missing.status(), Path("no"))) << missing.status();
}

TEST_P(EnvTest, ReadFileFromReadsWhatIsThereUpToTheBound) {
  const std::string p = Path("log");
  absl::StatusOr<AppendableFile> f = AppendableFile::Open(env_, p);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Append("one\ntwo\n").ok());
  EXPECT_EQ(ReadFileFrom(env_, p, 4, 100).value(), "two\n");
  EXPECT_EQ(ReadFileFrom(env_, p, 4, 2).value(), "tw");
  EXPECT_EQ(ReadFileFrom(env_, p, 8, 100).value(), "");
  EXPECT_EQ(ReadFileFrom(env_, p, 50, 100).value(), "");
  ASSERT_TRUE(f->Append("three\n").ok());  // grown since: read to the end
  EXPECT_EQ(ReadFileFrom(env_, p, 4, 100).value(), "two\nthree\n");
  const absl::Status missing = ReadFileFrom(env_, Path("no"), 0, 1).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Names(missing, Path("no"))) << missing;
}

TEST_P(EnvTest, ReadOnlyFileReadsAtOffsetsAndNamesThePath) {
  const std::string p = Path("ro");
  ASSERT_TRUE(WriteFileAtomic(env_, p, "0123456789").ok());
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(env_, p);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 10u);
  EXPECT_EQ(f->path(), p);
  char buf[4];
  ASSERT_TRUE(f->Read(3, buf, 4).ok());
  EXPECT_EQ(std::string(buf, 4), "3456");
  const absl::Status past = f->Read(8, buf, 4);
  EXPECT_EQ(past.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Names(past, p)) << past;

  const absl::Status missing = ReadOnlyFile::Open(env_, Path("no")).status();
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Names(missing, Path("no"))) << missing;
  ASSERT_TRUE(env_->CreateDir(Path("d")).ok());
  const absl::Status dir = ReadOnlyFile::Open(env_, Path("d")).status();
  EXPECT_EQ(dir.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dir.message().find("is a directory"), std::string::npos) << dir;
  EXPECT_TRUE(Names(dir, Path("d"))) << dir;
}

TEST_P(EnvTest, AtomicFileWriterShowsNothingUntilCommit) {
  const std::string p = Path("model.bin");
  ASSERT_TRUE(WriteFileAtomic(env_, p, "old").ok());
  {
    absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(env_, p);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->Append("half of").ok());
    EXPECT_EQ(*ReadSmallFile(env_, p), "old");
  }  // abandoned: the temporary file goes, the old file stays
  EXPECT_EQ(List(), std::vector<std::string>{"model.bin"});
  EXPECT_EQ(*ReadSmallFile(env_, p), "old");

  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(env_, p);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append("new ").ok());
  ASSERT_TRUE(w->Append(std::string("bytes\0!", 7)).ok());
  EXPECT_EQ(w->written(), 11u);
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(*ReadSmallFile(env_, p), std::string("new bytes\0!", 11));
  EXPECT_EQ(w->Commit().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w->Append("x").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(List(), std::vector<std::string>{"model.bin"});

  // Two writers of one path at once take distinct temporary files.
  auto a = AtomicFileWriter::Create(env_, p);
  auto b = AtomicFileWriter::Create(env_, p);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->Append("a").ok() && b->Append("b").ok());
  ASSERT_TRUE(a->Commit().ok() && b->Commit().ok());
  EXPECT_EQ(*ReadSmallFile(env_, p), "b");
}

TEST_P(EnvTest, AppendableFileAppendsAndTruncates) {
  const std::string p = Path("log.jsonl");
  {
    absl::StatusOr<AppendableFile> f = AppendableFile::Open(env_, p);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(f->Append("{\"a\":1}\n").ok());
    ASSERT_TRUE(f->Append("{\"b\":2}\n").ok());
    EXPECT_EQ(*ReadSmallFile(env_, p), "{\"a\":1}\n{\"b\":2}\n");  // no buffer
    ASSERT_TRUE(f->Sync().ok());
  }
  {
    absl::StatusOr<AppendableFile> f = AppendableFile::Open(env_, p);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->size(), 16u);
    ASSERT_TRUE(f->Append("c\n").ok());
  }
  EXPECT_EQ(*ReadSmallFile(env_, p), "{\"a\":1}\n{\"b\":2}\nc\n");
  absl::StatusOr<AppendableFile> f =
      AppendableFile::Open(env_, p, /*truncate=*/true);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Append("fresh\n").ok());
  EXPECT_EQ(*ReadSmallFile(env_, p), "fresh\n");
  const absl::Status bad = AppendableFile::Open(env_, Path("no/x")).status();
  EXPECT_EQ(bad.code(), StatusCode::kNotFound);
  EXPECT_TRUE(Names(bad, Path("no/x"))) << bad;
}

TEST_P(EnvTest, LockFileExcludesASecondLockUntilReleased) {
  const std::string p = Path("LOCK");
  absl::StatusOr<std::unique_ptr<FileLock>> first = env_->LockFile(p);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->path(), p);
  EXPECT_EQ(*ReadSmallFile(env_, p), absl::StrCat(getpid(), "\n"));
  const absl::Status second = env_->LockFile(p).status();
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.message().find(
                absl::StrCat(p, " is locked (held by pid ", getpid(), ")")),
            std::string::npos)
      << second;
  first->reset();
  EXPECT_TRUE(env_->LockFile(p).ok());
  EXPECT_EQ(env_->LockFile(Path("no/LOCK")).status().code(),
            StatusCode::kNotFound);
}

TEST_P(EnvTest, GlobMatchesLikeTheShell) {
  for (const char* name : {"a/train_1.bin", "a/train_0.bin", "a/val_0.bin",
                           "a/.train_2.bin", "b/train_9.bin"}) {
    ASSERT_TRUE(env_->CreateDir(Path(std::string(name, 1))).ok());
    ASSERT_TRUE(WriteFileAtomic(env_, Path(name), "x").ok());
  }
  EXPECT_EQ(
      Glob(env_, Path("a/train_*.bin")),
      (std::vector<std::string>{Path("a/train_0.bin"), Path("a/train_1.bin")}));
  EXPECT_EQ(
      Glob(env_, Path("?/train_[19].bin")),
      (std::vector<std::string>{Path("a/train_1.bin"), Path("b/train_9.bin")}));
  EXPECT_EQ(Glob(env_, Path("a/.train_*")),
            std::vector<std::string>{Path("a/.train_2.bin")});
  EXPECT_TRUE(Glob(env_, Path("a/test_*.bin")).empty());
  EXPECT_TRUE(Glob(env_, Path("c/*.bin")).empty());
  EXPECT_EQ(Glob(env_, Path("a/val_0.bin")),
            std::vector<std::string>{Path("a/val_0.bin")});
  EXPECT_TRUE(Glob(env_, Path("a/val_1.bin")).empty());
}

TEST(PathTest, DirOf) {
  EXPECT_EQ(DirOf("a/b/c.bin"), "a/b");
  EXPECT_EQ(DirOf("c.bin"), ".");
  EXPECT_EQ(DirOf("/c.bin"), "/");
  EXPECT_EQ(DirOf("/a/c.bin"), "/a");
}

TEST_P(EnvTest, RemoveDirRemovesOnlyAnEmptyDirectory) {
  ASSERT_TRUE(env_->CreateDir(Path("d")).ok());
  ASSERT_TRUE(WriteFileAtomic(env_, Path("d/f"), "x").ok());
  EXPECT_EQ(env_->RemoveDir(Path("d")).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(env_->FileExists(Path("d/f")));
  ASSERT_TRUE(env_->RemoveFile(Path("d/f")).ok());
  EXPECT_TRUE(env_->RemoveDir(Path("d")).ok());
  EXPECT_FALSE(env_->ListDir(Path("d")).ok());
  EXPECT_EQ(env_->RemoveDir(Path("d")).code(), StatusCode::kNotFound);
}

TEST_P(EnvTest, MakeWritableDirMakesEveryLevelAndLeavesNoProbe) {
  const std::string dir = Path("x/y/z");
  ASSERT_TRUE(MakeWritableDir(env_, dir).ok());
  EXPECT_TRUE(env_->ListDir(dir)->empty());      // the probe file is gone
  EXPECT_TRUE(MakeWritableDir(env_, dir).ok());  // again: nothing to make
  EXPECT_TRUE(CheckCanCreateIn(env_, dir).ok());
  absl::Status s = CheckCanCreateIn(env_, Path("none"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("cannot create a file in it: "), std::string::npos)
      << s;
  ASSERT_TRUE(WriteFileAtomic(env_, Path("file"), "x").ok());
  s = MakeWritableDir(env_, Path("file/sub"));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create " + Path("file")),
            std::string::npos)
      << s;
}

TEST(PosixEnvTest, MakeWritableDirFollowsALinkAndRefusesProc) {
  Env* env = DefaultEnv();
  const std::string dir = PosixTempDir();
  ASSERT_TRUE(env->CreateDir(dir + "/real").ok());
  ASSERT_EQ(symlink((dir + "/real").c_str(), (dir + "/link").c_str()), 0);
  EXPECT_TRUE(MakeWritableDir(env, dir + "/link").ok());
  // Root passes any permission check; /proc takes no new files.
  absl::Status s = MakeWritableDir(env, "/proc");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot create a file in it"), std::string::npos)
      << s;
}

TEST(PosixEnvTest, ReadSmallFileReadsProcFilesToTheirEnd) {
  // /proc files report size 0; their contents come from reading to EOF.
  absl::StatusOr<std::string> stat =
      ReadSmallFile(DefaultEnv(), "/proc/self/stat");
  ASSERT_TRUE(stat.ok()) << stat.status();
  EXPECT_EQ(stat->find(absl::StrCat(getpid(), " (")), 0u) << *stat;
  EXPECT_EQ(stat->back(), '\n');
  absl::StatusOr<std::string> status =
      ReadSmallFile(DefaultEnv(), "/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_NE(status->find("VmRSS:"), std::string::npos);
}

TEST(PosixEnvTest, OpenFileInFollowsNoLinksAndOpensRegularFilesOnly) {
  Env* env = DefaultEnv();
  const std::string dir = PosixTempDir();
  const std::string sub = dir + "/sub";
  ASSERT_TRUE(env->CreateDir(sub).ok());
  ASSERT_TRUE(WriteFileAtomic(env, sub + "/f", "abc").ok());
  OpenOptions ro;
  ro.read_only = true;
  EXPECT_TRUE(env->OpenFileIn(sub, "f", ro).ok());
  ASSERT_EQ(symlink((sub + "/f").c_str(), (sub + "/link").c_str()), 0);
  ASSERT_EQ(symlink(sub.c_str(), (dir + "/dirlink").c_str()), 0);
  ASSERT_EQ(mkfifo((sub + "/fifo").c_str(), 0600), 0);
  ASSERT_TRUE(env->CreateDir(sub + "/d").ok());
  for (const char* name : {"link", "fifo", "d", "../sub/f", "", ".."}) {
    absl::StatusOr<std::unique_ptr<File>> f = env->OpenFileIn(sub, name, ro);
    EXPECT_EQ(f.status().code(), StatusCode::kFailedPrecondition)
        << name << ": " << f.status();
  }
  EXPECT_EQ(env->OpenFileIn(dir + "/dirlink", "f", ro).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(env->OpenFileIn(sub, "missing", ro).status().code(),
            StatusCode::kNotFound);
}

TEST(PosixEnvTest, CreatesFiles0600AndDirectories0700WhateverTheUmask) {
  Env* env = DefaultEnv();
  const std::string dir = PosixTempDir();
  const mode_t old = umask(0);
  ASSERT_TRUE(env->CreateDir(dir + "/d").ok());
  ASSERT_TRUE(WriteFileAtomic(env, dir + "/d/f", "x").ok());
  auto lock = env->LockFile(dir + "/d/LOCK");
  ASSERT_TRUE(lock.ok());
  umask(old);
  struct stat st;
  ASSERT_EQ(stat((dir + "/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  for (const char* f : {"/d/f", "/d/LOCK"}) {
    ASSERT_EQ(stat((dir + f).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << f;
  }
}

// ---- failures (FaultEnv over MemEnv): the old file stays, errors name it.

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mem_.CreateDir("/d").ok());
    ASSERT_TRUE(WriteFileAtomic(&env_, kPath, "old").ok());
  }
  void ExpectOldFileOnly() {
    EXPECT_EQ(*ReadSmallFile(&mem_, kPath), "old");
    EXPECT_EQ(*mem_.ListDir("/d"), std::vector<std::string>{"f"});
  }
  static constexpr char kPath[] = "/d/f";
  MemEnv mem_;
  FaultEnv env_{&mem_};
};

TEST_F(FaultTest, FullDeviceMidStreamLeavesTheOldFile) {
  env_.SetWriteBudget(6);
  {
    absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(&env_, kPath);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append("12345").ok());
    const absl::Status s = w->Append("67890");
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_TRUE(Names(s, kPath)) << s;  // the temporary file: kPath.tmp...
  }
  ExpectOldFileOnly();
  const absl::Status s = WriteFileAtomic(&env_, kPath, "much too long");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Names(s, kPath)) << s;
  ExpectOldFileOnly();
}

TEST_F(FaultTest, FailedSyncOrRenameLeavesTheOldFile) {
  env_.FailSyncs(true);
  absl::StatusOr<AtomicFileWriter> w = AtomicFileWriter::Create(&env_, kPath);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append("new").ok());
  absl::Status s = w->Commit();
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(s, kPath)) << s;
  ExpectOldFileOnly();
  env_.ClearFaults();

  env_.FailRenames(true);
  s = WriteFileAtomic(&env_, kPath, "new");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(s, kPath)) << s;
  ExpectOldFileOnly();
}

TEST_F(FaultTest, FailedReadsNameTheFile) {
  env_.FailReads("/d/f", 2);
  const absl::Status whole = ReadSmallFile(&env_, kPath).status();
  EXPECT_EQ(whole.code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(whole, kPath)) << whole;
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(&env_, kPath);
  ASSERT_TRUE(f.ok());
  char c;
  const absl::Status one = f->Read(0, &c, 1);
  EXPECT_EQ(one.code(), StatusCode::kInternal);
  EXPECT_TRUE(Names(one, kPath)) << one;
  EXPECT_TRUE(f->Read(0, &c, 1).ok());  // the two faults are spent
}

TEST_F(FaultTest, FullDeviceFailsAnAppend) {
  absl::StatusOr<AppendableFile> f = AppendableFile::Open(&env_, "/d/log");
  ASSERT_TRUE(f.ok());
  env_.SetWriteBudget(3);
  ASSERT_TRUE(f->Append("ab\n").ok());
  const absl::Status s = f->Append("cd\n");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(Names(s, "/d/log")) << s;
  EXPECT_EQ(*ReadSmallFile(&mem_, "/d/log"), "ab\n");
  EXPECT_EQ(f->size(), 3u);
}

}  // namespace
}  // namespace zeroshard
