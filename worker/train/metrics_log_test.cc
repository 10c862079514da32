#include "worker/train/metrics_log.h"

#include "common/env/env.h"
#include "common/env/fault_env.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"

namespace zeroshard::train {
namespace {

TEST(MetricsLogTest, AppendsLinesAndReplacesAnOldFile) {
  MemEnv env;
  ASSERT_TRUE(WriteFileAtomic(&env, "/m.jsonl", "an older, longer run\n").ok());
  auto log = MetricsLog::Create(&env, "/m.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE(log->Append(R"({"event":"start"})").ok());
  ASSERT_TRUE(log->Append(R"({"event":"step","step":1})").ok());
  ASSERT_TRUE(log->Sync().ok());
  auto text = ReadSmallFile(&env, "/m.jsonl");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"event\":\"start\"}\n{\"event\":\"step\",\"step\":1}\n");
}

TEST(MetricsLogTest, ErrorsNameThePath) {
  MemEnv mem;
  EXPECT_FALSE(MetricsLog::Create(&mem, "/no/such/dir/m.jsonl").ok());
  FaultEnv env(&mem);
  auto log = MetricsLog::Create(&env, "/m.jsonl");
  ASSERT_TRUE(log.ok()) << log.status();
  env.SetWriteBudget(4);
  absl::Status s = log->Append(R"({"event":"start"})");
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("/m.jsonl"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace zeroshard::train
