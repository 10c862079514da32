// ZeRO-3 against stage 0 (DDP) on the same model, batch and worker count,
// and overlap_comm on against off: W = 2 ranks as threads of this process
// (in-process collectives), K = 2 real shard servers (LocalFleet), a GPT-2
// of L=4, C=128, B=4, T=64. The overlap pairs run twice: with in-process
// collectives as they are (a memcpy: nothing to hide, and on a machine
// with few cores the progress threads compete with compute), and over
// emulated links (InProcessHub::SetLink: 400 MB/s, 50 us per message,
// waited for without a CPU), slow enough that a step's gradient traffic
// takes about as long as backward, as between machines with a larger
// model; overlap then hides it behind backward.
//
// The ten variants (DDP and ZeRO-3, overlap on and off, in-process and
// over the links; stage 2 on and off in-process) run alternately, --rounds
// times each (common/bench/ bench.h), so that load from other processes hits
// them alike. One run trains --steps steps; its figure is the median of its
// steps after the first (a warm-up); a variant's step time is the median over
// its runs. ZeRO-3 is compared with DDP best against best: for each stage the
// faster of overlap on and off (printed), over the same collectives.
// Model-state bytes are rank 0's (step_stats.h). Correctness in the same run:
// every run of every variant must end with the bits of stage 0.
//
//   bazel run -c opt //worker/engine:zero_bench -- [--rounds=5] [--steps=12]
//
// RESULT zero3_vs_ddp_step=<best stage 3 / best stage 0 step time>
//        zero3_vs_ddp_model_state_bytes=<stage 3 / stage 0 bytes held>
//        zero3_overlap_vs_no_overlap_step=<on / off>
//        ddp_overlap_vs_no_overlap_step=...
//        ddp_overlap_vs_no_overlap_step_link=...
//        zero3_overlap_vs_no_overlap_step_link=...
//        correct=<1: every run had stage 0's bits>
//        zero3_vs_ddp_step_link=<the same as the first, over the links>
//        best_ddp_overlap=<1: overlap on was DDP's faster configuration>
//        best_zero3_overlap=... rounds=<runs per variant>
//        zero2_vs_ddp_step=<best stage 2 / best stage 0, in-process>
//        zero2_overlap_vs_no_overlap_step=...
//
// Before the RESULT line: where rank 0's step time went, per variant and
// phase (StepStats::Phases: forward, backward, reduce-scatter wait, push,
// norm exchange, server step, gather, all-gather wait, the rest).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/bench/bench.h"
#include "common/flags.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

constexpr int kWorld = 2;

constexpr double kLinkBytesPerSecond = 400e6;
constexpr absl::Duration kLinkLatency = absl::Microseconds(50);

struct Variant {
  const char* name;
  int stage;
  bool overlap;
  bool link = false;  // over the emulated links
};

// The phases of step_stats.h StepStats::Phases, in the order printed.
constexpr int kPhases = 9;
constexpr const char* kPhaseNames[kPhases] = {"fwd",    "bwd",     "rs_wait",
                                              "push",   "sync",    "srv_step",
                                              "gather", "ag_wait", "other"};

std::vector<double> PhasesOf(const StepStats& s) {
  const StepStats::Phases& p = s.phases;
  return {p.forward,
          p.backward,
          p.reduce_wait,
          p.push,
          p.sync,
          p.server_step,
          p.gather,
          p.all_gather_wait,
          s.step_seconds - p.sum()};
}

// What every run of one variant showed besides its time.
struct Record {
  double state_bytes = 0;
  double sent_bytes = 0;
  int runs = 0;
  int same_bits = 0;  // runs that ended with stage 0's bits
  // phases[i]: each run's median (over its timed steps) of phase i.
  std::vector<double> phases[kPhases];
};

train::TrainSpec BenchSpec(const Variant& v, int steps) {
  train::TrainSpec s;
  s.config.max_seq_len = 64;
  s.config.vocab_size = 512;
  s.config.padded_vocab_size = 512;
  s.config.num_layers = 4;
  s.config.num_heads = 4;
  s.config.channels = 128;
  s.zero.stage = v.stage;
  s.zero.overlap_comm = v.overlap;
  s.zero.micro_batch = 4;
  s.zero.seq_len = 64;
  s.zero.gradient_clipping = 1.0;
  s.zero.lr_schedule.lr = 1e-3;
  s.zero.reduce_bucket_size = 1 << 17;
  s.zero.job_id = std::string("zero_bench_") + v.name;
  s.steps = steps;
  return s;
}

// One training run of `v` (servers started for it when its stage needs
// them); returns the median of its steps after the first. The first run of
// all sets `reference` (stage 0's final bits); every run is compared with
// it.
absl::StatusOr<double> RunOnce(const Variant& v, int steps,
                               std::vector<float>* reference, Record* rec) {
  InProcessHooks hooks;
  if (v.link) {
    hooks.link_bytes_per_second = kLinkBytesPerSecond;
    hooks.link_latency = kLinkLatency;
  }
  std::unique_ptr<LocalFleet> fleet;  // stage 0 needs no servers
  if (v.stage > 0) {
    auto started = StartTestFleet(2, {});
    if (!started.ok()) return started.status();
    fleet = std::move(*started);
  }
  auto run = RunInProcessWith(BenchSpec(v, steps), kWorld, fleet.get(), hooks);
  if (!run.ok()) return run.status();
  const train::TrainResult& r0 = (*run)[0];
  std::vector<double> times;
  std::vector<double> phases[kPhases];
  for (size_t s = 1; s < r0.stats.size(); ++s) {
    times.push_back(r0.stats[s].step_seconds);
    const std::vector<double> p = PhasesOf(r0.stats[s]);
    for (int i = 0; i < kPhases; ++i) phases[i].push_back(p[i]);
  }
  for (int i = 0; i < kPhases; ++i) {
    rec->phases[i].push_back(bench::Median(phases[i]));
  }
  rec->state_bytes = static_cast<double>(r0.stats.back().model_state_bytes());
  rec->sent_bytes =
      static_cast<double>(r0.stats.back().collective_bytes_sent());
  if (reference->empty()) *reference = r0.params;
  ++rec->runs;
  if (FirstDifference(r0.params, *reference) == -1) ++rec->same_bits;
  return bench::Median(times);
}

// The faster of `a` and `b` (medians).
const char* Faster(const bench::Results& r, const char* a, const char* b) {
  return r.Median(a) <= r.Median(b) ? a : b;
}

int Main(int argc, char** argv) {
  int64_t rounds = 5, steps = 12;
  FlagSet flags("zero_bench",
                "zero_bench [flags]\n\nZeRO-3 vs DDP and overlap_comm on vs "
                "off: step time (medians of alternated runs) and model-state "
                "bytes.");
  flags.Int64("rounds", &rounds, "runs of every variant, alternated");
  flags.Int64("steps", &steps, "steps per run (the first is a warm-up)");
  std::string only;
  flags.String("only", &only,
               "comma-separated variant names: run just these (a quick "
               "look; the RESULT line then has their step times only)");
  flags.ParseOrExit(argc, argv);
  if (rounds < 1 || steps < 2) {
    ExitWithError(flags.program(), "--rounds must be >= 1 and --steps >= 2");
  }
  std::vector<Variant> variants = {{"ddp", 0, true},
                                   {"ddp_no_overlap", 0, false},
                                   {"zero3", 3, true},
                                   {"zero3_no_overlap", 3, false},
                                   {"ddp_link", 0, true, true},
                                   {"ddp_link_no_overlap", 0, false, true},
                                   {"zero3_link", 3, true, true},
                                   {"zero3_link_no_overlap", 3, false, true},
                                   {"zero2", 2, true},
                                   {"zero2_no_overlap", 2, false}};
  if (!only.empty()) {
    const std::vector<std::string> names = absl::StrSplit(only, ',');
    std::vector<Variant> kept;
    for (const std::string& name : names) {
      auto it = std::find_if(variants.begin(), variants.end(),
                             [&](const Variant& v) { return name == v.name; });
      if (it == variants.end()) {
        ExitWithError(flags.program(),
                      absl::StrCat("--only: no variant named '", name, "'"));
      }
      kept.push_back(*it);
    }
    variants = kept;
  }
  std::vector<Record> records(variants.size());
  std::vector<float> reference;
  std::vector<bench::Variant> runs;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Variant& v = variants[i];
    Record* rec = &records[i];
    runs.push_back({v.name,
                    [&v, rec, &reference, steps](const bench::RunInfo&) {
                      return RunOnce(v, static_cast<int>(steps), &reference,
                                     rec);
                    },
                    /*reference=*/i == 0});
  }
  std::printf(
      "zero_bench: W=%d, GPT-2 L=4 C=128 B=4 T=64, %lld steps per run, %lld "
      "runs of each variant alternated; step time = median over runs of "
      "each run's median step (its first step excluded)\n",
      kWorld, static_cast<long long>(steps), static_cast<long long>(rounds));
  std::fflush(stdout);
  auto results = bench::RunAlternating(
      runs, bench::Schedule{/*warmup_rounds=*/0, static_cast<int>(rounds)});
  if (!results.ok()) {
    std::fprintf(stderr, "zero_bench: %s\n",
                 results.status().ToString().c_str());
    return 1;
  }
  const bench::Results& r = *results;
  std::printf("%s", r.Table().c_str());
  std::printf("%-24s %14s %16s %s\n", "variant", "state (bytes)",
              "coll. sent (B)", "runs with ddp's bits");
  bool ok = true;
  for (size_t i = 0; i < variants.size(); ++i) {
    const Record& rec = records[i];
    ok &= rec.same_bits == rec.runs;
    std::printf("%-24s %14.0f %16.0f %d of %d\n", variants[i].name,
                rec.state_bytes, rec.sent_bytes, rec.same_bits, rec.runs);
  }
  std::printf("check: every run of every variant gives stage 0's bits: %s\n",
              ok ? "yes" : "NO");
  std::printf(
      "where rank 0's step time goes (ms, median over runs of each run's "
      "median step; waits are blocked time, step_stats.h Phases):\n%-24s",
      "variant");
  for (const char* name : kPhaseNames) std::printf(" %8s", name);
  std::printf(" %8s\n", "step");
  for (size_t i = 0; i < variants.size(); ++i) {
    std::printf("%-24s", variants[i].name);
    for (int p = 0; p < kPhases; ++p) {
      std::printf(" %8.2f", 1e3 * bench::Median(records[i].phases[p]));
    }
    std::printf(" %8.2f\n", 1e3 * r.Median(variants[i].name));
  }

  if (!only.empty()) {  // a quick look: the step times alone
    bench::ResultLine line;
    for (const Variant& v : variants) {
      line.Add(absl::StrCat(v.name, "_ms"), 1e3 * r.Median(v.name));
    }
    line.AddInt("correct", ok ? 1 : 0).AddInt("rounds", rounds);
    line.Print();
    return ok ? 0 : 1;
  }
  const char* best_ddp = Faster(r, "ddp", "ddp_no_overlap");
  const char* best_zero3 = Faster(r, "zero3", "zero3_no_overlap");
  const char* best_zero2 = Faster(r, "zero2", "zero2_no_overlap");
  const char* best_ddp_link = Faster(r, "ddp_link", "ddp_link_no_overlap");
  const char* best_zero3_link =
      Faster(r, "zero3_link", "zero3_link_no_overlap");
  auto on_vs_off = [&](const char* on, const char* off) {
    return bench::Ratio(r.Median(on), r.Median(off));
  };
  std::printf(
      "best: in-process %s (%.2f ms) vs %s (%.2f ms); over the emulated "
      "links %s (%.2f ms) vs %s (%.2f ms)\n",
      best_zero3, 1e3 * r.Median(best_zero3), best_ddp,
      1e3 * r.Median(best_ddp), best_zero3_link,
      1e3 * r.Median(best_zero3_link), best_ddp_link,
      1e3 * r.Median(best_ddp_link));
  std::printf(
      "overlap on vs off (step time): ddp %.3f, zero3 %.3f; over the "
      "emulated links: ddp %.3f, zero3 %.3f\n",
      on_vs_off("ddp", "ddp_no_overlap"),
      on_vs_off("zero3", "zero3_no_overlap"),
      on_vs_off("ddp_link", "ddp_link_no_overlap"),
      on_vs_off("zero3_link", "zero3_link_no_overlap"));
  const double ddp_bytes = records[0].state_bytes;
  const double zero3_bytes = records[2].state_bytes;
  bench::ResultLine line;
  line.Add("zero3_vs_ddp_step", on_vs_off(best_zero3, best_ddp))
      .Add("zero3_vs_ddp_model_state_bytes",
           bench::Ratio(zero3_bytes, ddp_bytes))
      .Add("zero3_overlap_vs_no_overlap_step",
           on_vs_off("zero3", "zero3_no_overlap"))
      .Add("ddp_overlap_vs_no_overlap_step", on_vs_off("ddp", "ddp_no_overlap"))
      .Add("ddp_overlap_vs_no_overlap_step_link",
           on_vs_off("ddp_link", "ddp_link_no_overlap"))
      .Add("zero3_overlap_vs_no_overlap_step_link",
           on_vs_off("zero3_link", "zero3_link_no_overlap"))
      .AddInt("correct", ok ? 1 : 0)
      .Add("zero3_vs_ddp_step_link", on_vs_off(best_zero3_link, best_ddp_link))
      .AddInt("best_ddp_overlap", std::string(best_ddp) == "ddp" ? 1 : 0)
      .AddInt("best_zero3_overlap", std::string(best_zero3) == "zero3" ? 1 : 0)
      .AddInt("rounds", rounds)
      .Add("zero2_vs_ddp_step", on_vs_off(best_zero2, best_ddp))
      .Add("zero2_overlap_vs_no_overlap_step",
           on_vs_off("zero2", "zero2_no_overlap"));
  line.Print();
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard::engine

int main(int argc, char** argv) { return zeroshard::engine::Main(argc, argv); }
