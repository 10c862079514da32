#include "worker/train/monitor_writers.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/crc32c.h"
#include "common/env/fault_env.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"
#include "worker/config/ds_config.h"

namespace zeroshard::train {
namespace {

std::string TempDir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(t != nullptr ? t : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

engine::StepStats Step(int64_t step, double loss, double lr, double scale) {
  engine::StepStats s;
  s.step = step;
  s.global_loss = loss;
  s.lr = lr;
  s.loss_scale = scale;
  return s;
}

TEST(MonitorConfigTest, DeepSpeedKeysAndDefaults) {
  std::vector<std::string> warnings;
  auto c = config::ParseDeepSpeedConfig(
      R"({"train_batch_size": 4,
          "tensorboard": {"enabled": true, "output_path": "out/tb/",
                          "job_name": "bert"},
          "csv_monitor": {"enabled": true},
          "wandb": {"enabled": true, "team": "t", "group": null,
                    "project": "p"},
          "comet": {"enabled": false, "project": "x"},
          "optimizer": {"type": "AdamW"}})",
      1, &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->monitor.tensorboard.enabled);
  EXPECT_EQ(c->monitor.tensorboard.Dir(), "out/tb/bert");
  EXPECT_EQ(c->monitor.csv_monitor.Dir(), "DeepSpeedJobName");
  EXPECT_TRUE(c->monitor.wandb);
  EXPECT_FALSE(c->monitor.comet);
  ASSERT_EQ(warnings.size(), 1u) << warnings[0];
  EXPECT_EQ(warnings[0].rfind("wandb: not available offline", 0), 0u)
      << warnings[0];
}

TEST(MonitorConfigTest, ErrorsNameTheKey) {
  std::vector<std::string> warnings;
  auto c = config::ParseDeepSpeedConfig(
      R"({"train_batch_size": 4, "tensorboard": {"enabled": 1}})", 1,
      &warnings);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tensorboard.enabled"),
            absl::string_view::npos)
      << c.status();
  // A near-miss of a known key is an error with the suggestion; a key
  // far from any is a warning.
  c = config::ParseDeepSpeedConfig(
      R"({"train_batch_size": 4, "csv_monitor": {"enabld": true}})", 1,
      &warnings);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("did you mean"), absl::string_view::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("enabled"), absl::string_view::npos)
      << c.status();
  c = config::ParseDeepSpeedConfig(
      R"({"train_batch_size": 4, "csv_monitor": {"flush_secs": 5}})", 1,
      &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(warnings.back(), "unknown key csv_monitor.flush_secs ignored");
}

TEST(MonitorWritersTest, StepEventsAreDeepSpeedsTagsAtGlobalSamples) {
  auto e = StepEvents(Step(3, 2.5, 1e-3, 1024), /*fp16=*/true, 32);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].tag, "Train/Samples/train_loss");
  EXPECT_EQ(e[0].value, 2.5);
  EXPECT_EQ(e[0].step, 96);
  EXPECT_EQ(e[1].tag, "Train/Samples/loss_scale");
  EXPECT_EQ(e[1].value, 1024);
  EXPECT_EQ(e[2].tag, "Train/Samples/lr");
  EXPECT_EQ(StepEvents(Step(3, 2.5, 1e-3, 1), false, 32).size(), 2u);
}

TEST(MonitorWritersTest, TfRecordFraming) {
  const std::string data = "hello event";
  const std::string r = TfRecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(static_cast<unsigned char>(r[0]), data.size());
  for (int i = 1; i < 8; ++i) EXPECT_EQ(r[i], 0);
  EXPECT_EQ(r.substr(12, data.size()), data);
  // TensorFlow's mask over the CRC-32C (here the slow reference).
  const uint32_t crc = Crc32cScalar(data.data(), data.size());
  const uint32_t masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
  uint32_t got = 0;
  for (int i = 0; i < 4; ++i) {
    got |= uint32_t{static_cast<unsigned char>(r[12 + data.size() + i])}
           << (8 * i);
  }
  EXPECT_EQ(got, masked);
}

TEST(MonitorWritersTest, CsvLayoutIsDeepSpeeds) {
  const std::string dir = TempDir("csv_layout") + "/job";
  config::MonitorConfig c;
  c.csv_monitor.enabled = true;
  c.csv_monitor.output_path = TempDir("csv_layout");
  c.csv_monitor.job_name = "job";
  auto m = FileMonitors::Open(c, /*fp16=*/false, 8);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->OnStep(Step(1, 5.25, 0.001, 1)).ok());
  ASSERT_TRUE((*m)->OnStep(Step(2, 4.125, 0.002, 1)).ok());
  EXPECT_EQ(Slurp(dir + "/Train_Samples_train_loss.csv"),
            "step,train_loss\r\n8,5.25\r\n16,4.125\r\n");
  EXPECT_EQ(Slurp(dir + "/Train_Samples_lr.csv"),
            "step,lr\r\n8,0.001\r\n16,0.002\r\n");
  EXPECT_FALSE(std::filesystem::exists(dir + "/Train_Samples_loss_scale.csv"));
  // Values as Python's repr writes them (DeepSpeed's csv.writer).
  c.csv_monitor.job_name = "fp16";
  auto f = FileMonitors::Open(c, /*fp16=*/true, 8);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE((*f)->OnStep(Step(1, 0.1, 1e-05, 65536)).ok());
  const std::string fp16_dir = c.csv_monitor.output_path + "/fp16";
  EXPECT_EQ(Slurp(fp16_dir + "/Train_Samples_loss_scale.csv"),
            "step,loss_scale\r\n8,65536.0\r\n");
  EXPECT_EQ(Slurp(fp16_dir + "/Train_Samples_lr.csv"),
            "step,lr\r\n8,1e-05\r\n");
  EXPECT_EQ(Slurp(fp16_dir + "/Train_Samples_train_loss.csv"),
            "step,train_loss\r\n8,0.1\r\n");
}

TEST(MonitorWritersTest, EventFileStartsWithItsVersion) {
  const std::string dir = TempDir("tb_file");
  auto tb = TensorBoardWriter::Open(dir);
  ASSERT_TRUE(tb.ok()) << tb.status();
  EXPECT_NE((*tb)->path().find("/events.out.tfevents."), std::string::npos);
  ASSERT_TRUE((*tb)->Write({{"Train/Samples/lr", 0.5, 7}}, 1.0).ok());
  const std::string bytes = Slurp((*tb)->path());
  const std::string first = TfRecord(FileVersionEvent(0));
  ASSERT_GT(bytes.size(), first.size());
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_EQ(bytes.substr(
                bytes.size() -
                TfRecord(ScalarEvent(1.0, 7, "Train/Samples/lr", 0.5)).size()),
            TfRecord(ScalarEvent(1.0, 7, "Train/Samples/lr", 0.5)));
}

TEST(MonitorWritersTest, AFolderThatCannotBeMadeIsNamed) {
  const std::string file = TempDir("not_a_dir");
  { std::ofstream(file) << "x"; }
  config::MonitorConfig c;
  c.tensorboard.enabled = true;
  c.tensorboard.output_path = file;
  auto m = FileMonitors::Open(c, false, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("tensorboard: "),
            absl::string_view::npos);
  EXPECT_NE(m.status().message().find(file), absl::string_view::npos)
      << m.status();
}

TEST(MonitorWritersTest, AWriteErrorClosesTheMonitorsAndNamesThem) {
  MemEnv mem;
  FaultEnv env(&mem);
  config::MonitorConfig c;
  c.tensorboard.enabled = c.csv_monitor.enabled = true;
  c.tensorboard.output_path = "/runs/tb";
  c.csv_monitor.output_path = "/runs/csv";
  auto m = FileMonitors::Open(c, false, 2, &env);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_TRUE((*m)->OnStep(Step(1, 3.5, 0.25, 1)).ok());
  env.SetWriteBudget(0);  // the disk is full
  absl::Status s = (*m)->OnStep(Step(2, 3.0, 0.25, 1));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("tensorboard: "), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("/runs/tb/DeepSpeedJobName/events.out.tfevents."),
            absl::string_view::npos)
      << s;
  EXPECT_NE(s.message().find("; csv_monitor: "), absl::string_view::npos) << s;
  env.ClearFaults();
  // Both are closed: no more errors, no more rows.
  EXPECT_TRUE((*m)->OnStep(Step(3, 2.5, 0.25, 1)).ok());
  auto csv =
      ReadSmallFile(&mem, "/runs/csv/DeepSpeedJobName/Train_Samples_lr.csv");
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_EQ(*csv, "step,lr\r\n2,0.25\r\n");
}

}  // namespace
}  // namespace zeroshard::train
