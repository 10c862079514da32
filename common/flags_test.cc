#include "common/flags.h"

#include "gtest/gtest.h"

namespace zeroshard {
namespace {

struct Args {
  std::vector<std::string> s;
  std::vector<char*> argv;
  explicit Args(std::vector<std::string> a) : s(std::move(a)) {
    for (auto& x : s) argv.push_back(x.data());
  }
  int argc() const { return static_cast<int>(argv.size()); }
};

TEST(FlagsTest, ParsesAllFormsAndPositionals) {
  std::string addr = "127.0.0.1:0";
  int64_t steps = 10;
  uint32_t shards = 1;
  double lr = 0.1;
  bool verbose = false, tls = true;
  FlagSet f("prog", "prog [flags]");
  f.String("addr", &addr, "address");
  f.Int64("steps", &steps, "steps");
  f.Uint32("shards", &shards, "shards");
  f.Double("lr", &lr, "lr");
  f.Bool("verbose", &verbose, "v");
  f.Bool("tls", &tls, "t");
  Args a({"prog", "train", "--addr=x:1", "--steps", "-5", "-shards=3",
          "--lr=1e-3", "--verbose", "--notls", "file", "--", "--literal"});
  auto pos = f.Parse(a.argc(), a.argv.data());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(*pos, (std::vector<std::string>{"train", "file", "--literal"}));
  EXPECT_EQ(addr, "x:1");
  EXPECT_EQ(steps, -5);
  EXPECT_EQ(shards, 3u);
  EXPECT_DOUBLE_EQ(lr, 1e-3);
  EXPECT_TRUE(verbose);
  EXPECT_FALSE(tls);
  EXPECT_TRUE(f.WasSet("addr"));
  EXPECT_FALSE(f.help_requested());
}

TEST(FlagsTest, DashesInNamesReadAsUnderscores) {
  std::string model_file;
  int64_t seq_len = 0;
  bool save_all = true, dry_run = false;
  FlagSet f("prog", "prog [flags]");
  f.String("model_file", &model_file, "m");
  f.Int64("seq_len", &seq_len, "t");
  f.Bool("save_all", &save_all, "s");
  f.Bool("dry_run", &dry_run, "d");
  Args a({"prog", "--model-file=x.bin", "--seq-len", "64", "--no-save-all",
          "--dry_run"});
  auto pos = f.Parse(a.argc(), a.argv.data());
  ASSERT_TRUE(pos.ok()) << pos.status();
  EXPECT_EQ(model_file, "x.bin");
  EXPECT_EQ(seq_len, 64);
  EXPECT_FALSE(save_all);
  EXPECT_TRUE(dry_run);
  Args b({"prog", "--model-fil=1"});
  auto bad = f.Parse(b.argc(), b.argv.data());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown flag --model-fil"),
            std::string::npos);
  // A near miss names the flag meant; a far one does not guess.
  EXPECT_NE(bad.status().message().find("(did you mean --model_file?)"),
            std::string::npos)
      << bad.status();
  Args c({"prog", "--sqe_len=3"});
  auto swapped = f.Parse(c.argc(), c.argv.data());
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("(did you mean --seq_len?)"),
            std::string::npos)
      << swapped.status();
  Args d({"prog", "--learning_rate=3"});
  auto far = f.Parse(d.argc(), d.argv.data());
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().message(), "unknown flag --learning_rate");
}

TEST(FlagsTest, RejectsBadFlagsNamingThem) {
  struct Case {
    std::vector<std::string> argv;
    const char* needle;
  };
  const Case cases[] = {
      {{"p", "--bogus=1"}, "unknown flag --bogus"},
      {{"p", "--n=abc"}, "--n: 'abc' is not an integer"},
      {{"p", "--u=-1"}, "--u: '-1' is not a non-negative integer"},
      {{"p", "--b=maybe"}, "--b: 'maybe' is not true or false"},
      {{"p", "--n"}, "--n needs a value"},
      {{"p", "--nproc-per-node=2"},
       "unknown flag --nproc-per-node (torchrun's: here --n)"},
  };
  for (const Case& c : cases) {
    int64_t n = 0;
    uint32_t u = 0;
    bool b = false;
    FlagSet f("p", "p");
    f.Int64("n", &n, "");
    f.Uint32("u", &u, "");
    f.Bool("b", &b, "");
    f.Foreign("nproc_per_node", "torchrun's: here --n");
    Args a(c.argv);
    auto pos = f.Parse(a.argc(), a.argv.data());
    ASSERT_FALSE(pos.ok()) << c.needle;
    EXPECT_NE(pos.status().message().find(c.needle), std::string::npos)
        << pos.status();
    EXPECT_EQ(n, 0);
  }
}

TEST(FlagsTest, HelpListsFlagsWithDefaults) {
  int64_t n = 42;
  FlagSet f("p", "p [flags]");
  f.Int64("count", &n, "how many");
  Args a({"p", "--help"});
  ASSERT_TRUE(f.Parse(a.argc(), a.argv.data()).ok());
  EXPECT_TRUE(f.help_requested());
  const std::string u = f.Usage();
  EXPECT_NE(u.find("--count (default 42)"), std::string::npos) << u;
  EXPECT_NE(u.find("how many"), std::string::npos);
}

}  // namespace
}  // namespace zeroshard
