// ZeRO-3 against stage 0 (DDP) on the same model, batch and worker count,
// and overlap_comm on against off: W = 2 ranks as threads of this process
// (in-process collectives), K = 2 real shard servers (LocalFleet), a GPT-2
// of L=4, C=128, B=4, T=64. The overlap pairs run twice: with in-process
// collectives as they are (a memcpy: nothing to hide, and on a machine
// with few cores the progress threads compete with compute), and over
// emulated links (InProcessHub::SetLink: 400 MB/s, 50 us per message,
// waited for without a CPU), slow enough that a step's gradient traffic
// takes about as long as backward, as between machines with a larger
// model; overlap then hides it behind backward. Step time is the
// median of the timed steps (the first step is a warm-up); model-state bytes
// are rank 0's (step_stats.h). Correctness in the same run: every variant must
// end with the bits of stage 0.
//
//   bazel run //worker/engine:zero_bench
//
// RESULT zero3_vs_ddp_step=<stage 3 / stage 0 step time>
//        zero3_vs_ddp_model_state_bytes=<stage 3 / stage 0 bytes held>
//        zero3_overlap_vs_no_overlap_step=<on / off>
//        ddp_overlap_vs_no_overlap_step=...
//        ddp_overlap_vs_no_overlap_step_link=...
//        zero3_overlap_vs_no_overlap_step_link=...
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

constexpr int kWorld = 2;
constexpr int kSteps = 12;

constexpr double kLinkBytesPerSecond = 400e6;
constexpr absl::Duration kLinkLatency = absl::Microseconds(50);

struct Variant {
  const char* name;
  int stage;
  bool overlap;
  bool link = false;  // over the emulated links
};

struct Measured {
  double step_seconds = 0;
  double state_bytes = 0;
  double sent_bytes = 0;
  bool same_bits = false;
};

train::TrainSpec BenchSpec(const Variant& v) {
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
  s.steps = kSteps;
  return s;
}

int Main() {
  const Variant variants[] = {{"ddp", 0, true},
                              {"ddp_no_overlap", 0, false},
                              {"zero3", 3, true},
                              {"zero3_no_overlap", 3, false},
                              {"ddp_link", 0, true, true},
                              {"ddp_link_no_overlap", 0, false, true},
                              {"zero3_link", 3, true, true},
                              {"zero3_link_no_overlap", 3, false, true}};
  std::vector<Measured> got;
  std::vector<float> reference;
  std::printf("%-24s %12s %14s %16s %s\n", "variant", "step (ms)",
              "state (bytes)", "coll. sent (B)", "bits == ddp");
  for (const Variant& v : variants) {
    InProcessHooks hooks;
    if (v.link) {
      hooks.link_bytes_per_second = kLinkBytesPerSecond;
      hooks.link_latency = kLinkLatency;
    }
    std::unique_ptr<LocalFleet> fleet;  // stage 0 needs no servers
    if (v.stage > 0) {
      auto started = StartTestFleet(2, {});
      if (!started.ok()) {
        std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
        return 1;
      }
      fleet = std::move(*started);
    }
    auto run = RunInProcessWith(BenchSpec(v), kWorld, fleet.get(), hooks);
    if (!run.ok()) {
      std::fprintf(stderr, "%s: %s\n", v.name, run.status().ToString().c_str());
      return 1;
    }
    const train::TrainResult& r0 = (*run)[0];
    std::vector<double> times;
    for (size_t s = 1; s < r0.stats.size(); ++s) {
      times.push_back(r0.stats[s].step_seconds);
    }
    std::sort(times.begin(), times.end());
    Measured m;
    m.step_seconds = times[times.size() / 2];
    m.state_bytes = static_cast<double>(r0.stats.back().model_state_bytes());
    m.sent_bytes = static_cast<double>(r0.stats.back().collective_bytes_sent());
    if (reference.empty()) reference = r0.params;
    m.same_bits = FirstDifference(r0.params, reference) == -1;
    std::printf("%-24s %12.2f %14.0f %16.0f %s\n", v.name, 1e3 * m.step_seconds,
                m.state_bytes, m.sent_bytes, m.same_bits ? "yes" : "NO");
    std::fflush(stdout);
    got.push_back(m);
  }
  bool ok = true;
  for (const Measured& m : got) ok &= m.same_bits;
  std::printf("check: every variant gives stage 0's bits: %s\n",
              ok ? "yes" : "NO");
  std::printf(
      "overlap on vs off (step time): ddp %.3f, zero3 %.3f; over the "
      "emulated links: ddp %.3f, zero3 %.3f\n",
      got[0].step_seconds / got[1].step_seconds,
      got[2].step_seconds / got[3].step_seconds,
      got[4].step_seconds / got[5].step_seconds,
      got[6].step_seconds / got[7].step_seconds);
  std::printf(
      "RESULT zero3_vs_ddp_step=%.3f zero3_vs_ddp_model_state_bytes=%.3f "
      "zero3_overlap_vs_no_overlap_step=%.3f "
      "ddp_overlap_vs_no_overlap_step=%.3f "
      "ddp_overlap_vs_no_overlap_step_link=%.3f "
      "zero3_overlap_vs_no_overlap_step_link=%.3f correct=%d\n",
      got[2].step_seconds / got[0].step_seconds,
      got[2].state_bytes / got[0].state_bytes,
      got[2].step_seconds / got[3].step_seconds,
      got[0].step_seconds / got[1].step_seconds,
      got[4].step_seconds / got[5].step_seconds,
      got[6].step_seconds / got[7].step_seconds, ok ? 1 : 0);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace zeroshard::engine

int main() { return zeroshard::engine::Main(); }
