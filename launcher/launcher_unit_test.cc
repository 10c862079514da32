// The launcher's pieces without processes: progress text and modes, log
// following, the metrics records round trip, the SVG and the report.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/env/mem_env.h"
#include "gtest/gtest.h"
#include "launcher/log_tail.h"
#include "launcher/progress.h"
#include "launcher/report.h"
#include "launcher/save_path.h"
#include "launcher/train_options.h"
#include "launcher/work_dir.h"
#include "worker/train/eval_loss.h"
#include "worker/train/run_metrics.h"

namespace zeroshard {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// --save: checked before the job, not when rank 0 writes at the end.
TEST(SavePathTest, RefusesAnInputAMissingDirectoryAndADirectory) {
  const std::string dir = TempDir() + "/save_path_test";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string data = dir + "/data.bin";
  { std::ofstream(data) << "tokens"; }
  EXPECT_TRUE(CheckSavePath("", {{"--data", data}}).ok());
  EXPECT_TRUE(CheckSavePath(dir + "/final.bin", {{"--data", data}}).ok());
  absl::Status s = CheckSavePath(dir + "/./data.bin", {{"--data", data}});
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "is the --data file")) << s;
  s = CheckSavePath(dir + "/no/final.bin", {});
  EXPECT_TRUE(absl::StrContains(s.message(), "(create it first)")) << s;
  s = CheckSavePath(dir, {});
  EXPECT_TRUE(absl::StrContains(s.message(), "is a directory")) << s;
  s = CheckSavePath(data + "/final.bin", {});
  EXPECT_TRUE(absl::StrContains(s.message(), "cannot write in directory")) << s;
  // In the work dir the launcher makes before the run: fine while it does
  // not exist yet, however spelled.
  EXPECT_TRUE(CheckSavePath(dir + "/run/final.bin", {}, dir + "/run/").ok());
  EXPECT_TRUE(CheckSavePath("./run7/final.bin", {}, "run7").ok());
  EXPECT_FALSE(CheckSavePath(dir + "/run/x/final.bin", {}, dir + "/run").ok());
  EXPECT_EQ(ReadAll(data), "tokens");
}

// The servers the launcher starts share the machine's cores; never fewer
// than zeroshard-server's own default of 2.
TEST(TrainOptionsTest, AutoServerThreadsShareTheCores) {
  EXPECT_EQ(AutoServerThreads(2, 16), 8u);
  EXPECT_EQ(AutoServerThreads(3, 16), 5u);
  EXPECT_EQ(AutoServerThreads(2, 2), 2u);
  EXPECT_EQ(AutoServerThreads(4, 0), 2u);  // cores unknown
  EXPECT_EQ(AutoServerThreads(0, 8), 8u);
}

TEST(ProgressTest, FormatsStepLossRateEtaAndServerStep) {
  ProgressPoint p{120, 2.43123, 14210, 52.4, 119};
  EXPECT_EQ(
      FormatProgress(p, 700),
      "step 120/700  loss 2.4312  14.2k tok/s  ETA 0:52  server step 119");
  p.eta_seconds = -1;
  p.server_step = -1;
  p.tokens_per_s = 950;
  EXPECT_EQ(FormatProgress(p, 700), "step 120/700  loss 2.4312  950 tok/s");
}

TEST(ProgressTest, PlainModePrintsEveryNStepsAndTheLast) {
  const std::string path = TempDir() + "/progress.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  Progress progress(f, /*live=*/false, 7, 3);
  for (int s = 1; s <= 7; ++s) {
    progress.Update(ProgressPoint{s, 1.0, 10, -1, -1});
    if (s == 4) progress.Print("[rank 1] hello");
  }
  progress.Finish();
  std::fclose(f);
  EXPECT_EQ(
      ReadAll(path),
      "step 3/7  loss 1.0000  10 tok/s\n[rank 1] hello\n"
      "step 6/7  loss 1.0000  10 tok/s\nstep 7/7  loss 1.0000  10 tok/s\n");
}

TEST(ProgressTest, LiveModeRedrawsOneLine) {
  const std::string path = TempDir() + "/live.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  Progress progress(f, /*live=*/true, 2, 0);
  progress.Update(ProgressPoint{1, 1.0, 10, -1, -1});
  progress.Print("note");
  progress.Update(ProgressPoint{2, 0.5, 10, -1, -1});
  progress.Finish();
  std::fclose(f);
  EXPECT_EQ(ReadAll(path),
            "step 1/2  loss 1.0000  10 tok/s\r\033[Knote\n"
            "step 1/2  loss 1.0000  10 tok/s\r\033[Kstep 2/2  loss 0.5000  10 "
            "tok/s\n");
}

TEST(LogTailTest, FollowerReturnsCompleteLinesOnce) {
  const std::string path = TempDir() + "/follow.log";
  std::remove(path.c_str());
  LogFollower follower(path);
  EXPECT_TRUE(follower.ReadNewLines().empty());  // not there yet
  std::ofstream out(path);
  out << "one\ntw" << std::flush;
  EXPECT_EQ(follower.ReadNewLines(), std::vector<std::string>{"one"});
  out << "o\nthree\n" << std::flush;
  EXPECT_EQ(follower.ReadNewLines(),
            (std::vector<std::string>{"two", "three"}));
  EXPECT_TRUE(follower.ReadNewLines().empty());
  EXPECT_EQ(TailLines(path, 2), "    two\n    three\n");
  // The writer's last words without a newline: only once it has ended.
  out << "four\nfi" << std::flush;
  EXPECT_EQ(follower.ReadNewLines(), std::vector<std::string>{"four"});
  EXPECT_EQ(follower.ReadNewLines(true), std::vector<std::string>{"fi"});
  EXPECT_TRUE(follower.ReadNewLines(true).empty());
}

TEST(RunMetricsTest, RecordsReadBack) {
  engine::StepStats s;
  s.step = 3;
  s.global_loss = 2.5;
  s.loss = 2.25;
  s.lr = 1e-3;
  s.grad_norm = 0.75;
  s.tokens = 1024;
  s.step_seconds = 0.5;
  s.param_bytes = 100;
  s.grad_bytes = 20;
  s.all_gather.Add(1000, 1000);
  s.server_push.Add(40, 0);
  const std::string line = train::StepRecord(s);
  EXPECT_EQ(train::JsonEvent(line), "step");
  EXPECT_EQ(train::JsonNumber(line, "step"), 3);
  EXPECT_EQ(train::JsonNumber(line, "loss"), 2.5);
  EXPECT_EQ(train::JsonNumber(line, "rank_loss"), 2.25);
  EXPECT_EQ(train::JsonNumber(line, "tokens_per_s"), 2048);
  EXPECT_EQ(train::JsonNumber(line, "model_state_bytes"), 120);
  EXPECT_EQ(train::JsonNumber(line, "bytes_moved"), 1040);
  EXPECT_EQ(train::JsonNumber(line, "skipped"), 0);
  EXPECT_EQ(train::JsonNumber(line, "no_such_key"), std::nullopt);
  EXPECT_EQ(train::JsonEvent(train::EndRecord(1.5, 64)), "end");
  EXPECT_EQ(train::JsonNumber(train::EndRecord(1.5, 64), "eval_loss"), 1.5);
}

// JSON has no NaN or Infinity: an fp16 overflow step's values are null,
// which the reader takes as absent.
TEST(RunMetricsTest, NonFiniteValuesAreNull) {
  engine::StepStats s;
  s.step = 1;
  s.global_loss = std::numeric_limits<double>::quiet_NaN();
  s.loss = -std::numeric_limits<double>::quiet_NaN();
  s.grad_norm = std::numeric_limits<double>::infinity();
  s.clip_coef = -std::numeric_limits<double>::infinity();
  s.skipped = true;
  const std::string line = train::StepRecord(s);
  for (const char* key : {"loss", "rank_loss", "grad_norm", "clip_coef"}) {
    EXPECT_TRUE(absl::StrContains(line, absl::StrCat("\"", key, "\":null,")))
        << key << " in " << line;
    EXPECT_EQ(train::JsonNumber(line, key), std::nullopt) << key;
  }
  EXPECT_FALSE(absl::StrContains(line, "nan")) << line;
  EXPECT_FALSE(absl::StrContains(line, "inf")) << line;
  EXPECT_EQ(train::JsonNumber(line, "skipped"), 1);
  EXPECT_EQ(train::EndRecord(std::nan(""), 8),
            "{\"event\":\"end\",\"eval_loss\":null,\"eval_tokens\":8}");
  EXPECT_EQ(train::JsonDouble(0.1, 3), "0.1");
  EXPECT_EQ(train::JsonFixed(2.0 / 3, 2), "0.67");
  EXPECT_EQ(train::JsonFixed(-std::numeric_limits<double>::infinity(), 0),
            "null");
}

TEST(ReportTest, MergedMetricsHoldNullForNonFiniteAndMissingValues) {
  const std::string dir = TempDir() + "/report_null";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  for (int r = 0; r < 2; ++r) {
    std::ofstream out(absl::StrCat(dir, "/metrics-rank", r, ".jsonl"));
    train::RunInfo info;
    info.rank = r;
    info.world = 2;
    info.params = 1000;
    out << train::StartRecord(info) << "\n";
    for (int step = 1; step <= 2 - r; ++step) {  // rank 1 misses step 2
      engine::StepStats s;
      s.step = step;
      s.global_loss = 3;
      s.grad_norm = step == 1 ? std::numeric_limits<double>::infinity() : 1;
      s.loss_scale = 65536;
      out << train::StepRecord(s) << "\n";
    }
  }
  ASSERT_TRUE(WriteRunReport(dir, 2).ok());
  const std::string jsonl = ReadAll(dir + "/metrics.jsonl");
  EXPECT_TRUE(
      absl::StrContains(jsonl,
                        "{\"step\":1,\"loss\":3,\"lr\":0,\"grad_norm\":null,"
                        "\"loss_scale\":65536,"))
      << jsonl;
  EXPECT_TRUE(absl::StrContains(jsonl,
                                "\"model_state_bytes_per_worker\":[0,"
                                "null],\"bytes_moved_per_worker\":[0,"
                                "null]}\n"))
      << jsonl;
  EXPECT_FALSE(absl::StrContains(jsonl, "nan")) << jsonl;
  EXPECT_FALSE(absl::StrContains(jsonl, "inf")) << jsonl;
}

TEST(ReportTest, WritesMergedMetricsSvgAndSummary) {
  const std::string dir = TempDir() + "/report";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  for (int r = 0; r < 2; ++r) {
    std::ofstream out(absl::StrCat(dir, "/metrics-rank", r, ".jsonl"));
    train::RunInfo info;
    info.rank = r;
    info.world = 2;
    info.stage = 3;
    info.params = 1000;
    info.steps = 4;
    out << train::StartRecord(info) << "\n";
    for (int step = 1; step <= 4; ++step) {
      engine::StepStats s;
      s.step = step;
      s.global_loss = 5.0 / step;
      s.tokens = 100;
      s.step_seconds = 0.1;
      s.param_bytes = 2000;
      s.grad_bytes = 2000;
      s.device_bytes = 3 << 20;
      s.activation_bytes = 5 << 20;
      s.all_gather.Add(6000, 6000);
      out << train::StepRecord(s) << "\n";
    }
    if (r == 0) out << train::EndRecord(1.0, 64) << "\n";
  }
  auto summary = WriteRunReport(dir, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // 16Ψ = 16000 B for stage 0 vs 4000 B measured; 3Ψ·4 B = 12000 B.
  EXPECT_TRUE(absl::StrContains(*summary, "5.0000 → 1.2500")) << *summary;
  EXPECT_TRUE(absl::StrContains(*summary, "| tokens/s (all workers) | 1000 |"))
      << *summary;
  EXPECT_TRUE(absl::StrContains(
      *summary, "3.9 KiB, 3.9 KiB (stage-0 DDP: 15.6 KiB, 4.0x more)"))
      << *summary;
  EXPECT_TRUE(absl::StrContains(*summary,
                                "5.9 KiB (formula 3Ψ·4 B: 11.7 KiB; "
                                "2Ψ·4 B with units kept for "
                                "backward: 7.8 KiB)"))
      << *summary;
  EXPECT_TRUE(
      absl::StrContains(*summary, "eval loss of the final model | 1.0000"));
  EXPECT_TRUE(absl::StrContains(*summary,
                                "| on the device, rank 0 | parameters and "
                                "gradients 3.00 MiB, activations 5.00 MiB |"))
      << *summary;
  const std::string jsonl = ReadAll(dir + "/metrics.jsonl");
  EXPECT_TRUE(absl::StrContains(
      jsonl,
      "{\"step\":4,\"loss\":1.25,\"lr\":0,\"grad_norm\":0,"
      "\"loss_scale\":1,\"tokens_per_s\":1000.0,\"bytes_moved\":6000,"
      "\"model_state_bytes_per_worker\":[4000,4000],"
      "\"bytes_moved_per_worker\":[6000,6000]}"))
      << jsonl;
  const std::string svg = ReadAll(dir + "/loss.svg");
  EXPECT_TRUE(
      absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(absl::StrContains(svg, "<polyline"));
  EXPECT_TRUE(
      absl::StrContains(ReadAll(dir + "/report.md"), "![loss](loss.svg)"));
  EXPECT_FALSE(WriteRunReport(dir, 3).ok());  // no rank-2 file
}

// Rank 0's metrics file of a one-rank run with these step records.
void WriteAttempt(const std::string& dir, const std::vector<int>& steps,
                  int params = 1000) {
  std::ofstream out(dir + "/metrics-rank0.jsonl");
  train::RunInfo info;
  info.world = 1;
  info.stage = 2;
  info.params = params;
  info.steps = 4;
  out << train::StartRecord(info) << "\n";
  for (int step : steps) {
    engine::StepStats s;
    s.step = step;
    s.global_loss = 5.0 / step;
    s.tokens = 100;
    s.step_seconds = 0.1;
    out << train::StepRecord(s) << "\n";
  }
}

// Steps redone after a server restart (their records appear twice) count
// once in the run's steps, and the report says how many were redone.
TEST(ReportTest, RedoneStepsCountOnce) {
  const std::string dir = TempDir() + "/report_redone";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  WriteAttempt(dir, {1, 2, 3, 2, 3, 4});
  auto summary = WriteRunReport(dir, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(
      absl::StrContains(*summary, "1000 parameters, 4 steps (2 redone after"))
      << *summary;
}

// A job stopped at step 3 (checkpoint at 2) and continued in the same
// work dir: the report covers steps 1-4, step 3 redone. A fresh job
// (starting at step 1) drops the earlier job's records.
TEST(ReportTest, ContinuedJobKeepsTheEarlierAttemptsSteps) {
  const std::string dir = TempDir() + "/report_continued";
  ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  ASSERT_TRUE(KeepEarlierMetrics(dir, 0).ok());  // nothing there yet
  WriteAttempt(dir, {1, 2, 3});
  ASSERT_TRUE(WriteRunReport(dir, 1).ok());
  ASSERT_TRUE(KeepEarlierMetrics(dir, 0).ok());  // the launcher, on rerun
  EXPECT_FALSE(std::ifstream(dir + "/metrics-rank0.jsonl").good());
  WriteAttempt(dir, {3, 4});
  auto summary = WriteRunReport(dir, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(
      absl::StrContains(*summary, "1000 parameters, 4 steps (1 redone after"))
      << *summary;
  EXPECT_TRUE(absl::StrContains(*summary, "5.0000 → 1.2500")) << *summary;
  const std::string merged = ReadAll(dir + "/metrics.jsonl");
  EXPECT_EQ(CountOf(merged, "\"step\":"), 5) << merged;
  EXPECT_EQ(merged.find("{\"step\":1,"), 0u) << merged;

  // A third attempt continues both.
  ASSERT_TRUE(KeepEarlierMetrics(dir, 0).ok());
  WriteAttempt(dir, {4});
  summary = WriteRunReport(dir, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(absl::StrContains(*summary, "4 steps (2 redone after"))
      << *summary;

  // A new job in the same dir starts at step 1: the earlier ones are gone.
  ASSERT_TRUE(KeepEarlierMetrics(dir, 0).ok());
  WriteAttempt(dir, {1, 2});
  summary = WriteRunReport(dir, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(absl::StrContains(*summary, "1000 parameters, 2 steps |"))
      << *summary;
  EXPECT_FALSE(std::ifstream(EarlierMetricsPath(dir, 0)).good());

  // Nor does a continuation of a differently sized model take them.
  ASSERT_TRUE(KeepEarlierMetrics(dir, 0).ok());
  WriteAttempt(dir, {3, 4}, 2000);
  summary = WriteRunReport(dir, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(absl::StrContains(*summary, "2000 parameters, 2 steps |"))
      << *summary;
}

// What the launcher's restarts and reruns leave: a new job whose worker is
// restarted after an old job in the same dir, a rerun of a finished job
// (no step of its own), an attempt of another model in between, and a
// step whose record a killed worker never wrote.
TEST(ReportTest, RestartsAndRerunsReportTheJob) {
  const std::string dir = TempDir() + "/report_restarts";
  const auto fresh = [&] {
    ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()),
              0);
  };
  const auto summary_after = [&](std::vector<std::vector<int>> attempts,
                                 std::vector<int> params) {
    fresh();
    for (size_t i = 0; i < attempts.size(); ++i) {
      EXPECT_TRUE(KeepEarlierMetrics(dir, 0).ok());
      WriteAttempt(dir, attempts[i], params[i]);
    }
    auto summary = WriteRunReport(dir, 1);
    return summary.ok() ? *summary : summary.status().ToString();
  };
  // An old job, then a new one (from step 1) restarted after step 2.
  EXPECT_TRUE(absl::StrContains(
      summary_after({{1, 2, 3, 4}, {1, 2}, {3}}, {1000, 1000, 1000}),
      "1000 parameters, 3 steps |"));
  // A finished job run again: its rerun records no step.
  EXPECT_TRUE(absl::StrContains(summary_after({{1, 2, 3, 4}, {}}, {1000, 1000}),
                                "1000 parameters, 4 steps |"));
  // A rerun of another model size that failed, then the right one.
  EXPECT_TRUE(
      absl::StrContains(summary_after({{1, 2}, {}, {3, 4}}, {1000, 2000, 1000}),
                        "1000 parameters, 4 steps |"));
  // Step 3's record lost with its killed worker.
  EXPECT_TRUE(absl::StrContains(summary_after({{1, 2}, {4}}, {1000, 1000}),
                                "1000 parameters, 4 steps |"));
}

// A run stopped by a signal: the report says "stopped at step N of M",
// records the version, command line and configuration, and the SVG
// carries the eval points and the lr panel; metrics.jsonl has the eval
// loss on the evaluated steps only.
TEST(ReportTest, StoppedRunWithEvalsAndContext) {
  const std::string dir = TempDir() + "/report_stopped";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  for (int r = 0; r < 2; ++r) {
    std::ofstream out(absl::StrCat(dir, "/metrics-rank", r, ".jsonl"));
    train::RunInfo info;
    info.rank = r;
    info.world = 2;
    info.stage = 3;
    info.params = 1000;
    info.steps = 100;
    out << train::StartRecord(info) << "\n";
    for (int step = 1; step <= 7 - r; ++step) {  // rank 1 was one behind
      engine::StepStats s;
      s.step = step;
      s.global_loss = 5.0 / step;
      s.lr = 1e-3 * step;
      s.tokens = 100;
      s.step_seconds = 0.1;
      out << train::StepRecord(s) << "\n";
      if (r == 0 && step % 3 == 0) {
        train::EvalResult e;
        e.loss = 4.0 / step;
        e.tokens = 64;
        e.held_out = true;
        out << train::EvalRecord(step, e) << "\n";
      }
    }
    if (r == 1) out << "{\"event\":\"step\",\"step\":7,\"lo";  // cut short
  }
  RunContext c;
  c.version = "zeroshard 0.1.0 (revision abc)";
  c.command_line = "zeroshard train --steps=100";
  c.config_table = "| setting | value |\n|---|---|\n| steps | 100 |\n";
  c.planned_steps = 100;
  c.stopped_by = "SIGTERM";
  auto summary = WriteRunReport(dir, 2, c);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(
      absl::StrContains(*summary, "stopped at step 7 of 100 by SIGTERM"))
      << *summary;
  EXPECT_TRUE(absl::StrContains(
      *summary,
      "| eval loss (held-out, 64 tokens) | 1.3333 at step 3 → 0.6667 at step "
      "6 (2 evals) |"))
      << *summary;
  const std::string md = ReadAll(dir + "/report.md");
  for (const char* want : {"**Stopped at step 7 of 100** (SIGTERM)",
                           "| version | zeroshard 0.1.0 "
                           "(revision abc) |",
                           "| command | `zeroshard train --steps=100` |",
                           "## Configuration", "| steps | 100 |"}) {
    EXPECT_TRUE(absl::StrContains(md, want)) << want << " not in:\n" << md;
  }
  const std::string jsonl = ReadAll(dir + "/metrics.jsonl");
  EXPECT_EQ(std::count(jsonl.begin(), jsonl.end(), '\n'), 7);
  EXPECT_EQ(CountOf(jsonl, "\"eval_loss\""), 2) << jsonl;
  EXPECT_TRUE(absl::StrContains(jsonl, "\"eval_loss\":1.333333}\n{\"step\":4,"))
      << jsonl;
  EXPECT_TRUE(absl::StrContains(jsonl, "\"eval_loss\":0.6666667}")) << jsonl;
  const std::string svg = ReadAll(dir + "/loss.svg");
  EXPECT_EQ(CountOf(svg, "<circle class=\"eval\""), 2);
  EXPECT_TRUE(absl::StrContains(svg, "class=\"lr\"")) << svg;
  EXPECT_TRUE(absl::StrContains(svg, "stopped at step 7 of 100")) << svg;
}

TEST(ReportTest, SvgOfNoPointsIsStillAnSvg) {
  const std::string svg = LossCurveSvg({}, "empty");
  EXPECT_TRUE(absl::StrContains(svg, "</svg>"));
}

}  // namespace
}  // namespace zeroshard

namespace zeroshard {
namespace {

TEST(WorkDirTest, OneRunAtATime) {
  MemEnv env;
  ASSERT_TRUE(env.CreateDir("/run").ok());
  auto first = LockWorkDir(&env, "/run");
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = LockWorkDir(&env, "/run");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      second.status().message(),
      absl::StrCat("--work_dir /run is in use by another run (pid ", getpid(),
                   "): give another --work_dir, or wait for that run "
                   "to end"));
  first->reset();  // that run ends
  EXPECT_TRUE(LockWorkDir(&env, "/run").ok());
  auto missing = LockWorkDir(&env, "/nowhere");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(
      absl::StartsWith(missing.status().message(), "--work_dir /nowhere: "))
      << missing.status();
}

}  // namespace
}  // namespace zeroshard
