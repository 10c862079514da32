// The load benchmark (tests/load_harness.h): W simulated workers against K
// real servers for --seconds (default 60), correctness checked in the same
// run (ledgers, parameters vs the independent reference).
//
//   bazel run -c opt //tests:load_bench -- --seconds=60 --workers=64
//
// Last line: RESULT steps=... push_per_s=... push_mib_per_s=...
// gather_per_s=... gather_mib_per_s=... server_peak_rss_mib=... ok=1
#include <cstdio>

#include "common/bench/bench.h"
#include "common/flags.h"
#include "tests/load_harness.h"

int main(int argc, char** argv) {
  zeroshard::testing::LoadOptions o;
  double seconds = 60;
  int64_t workers = 64, scale = 10;
  uint32_t servers = 2;
  zeroshard::FlagSet flags(
      "load_bench",
      "load_bench [flags]\n\nW simulated workers push and gather against K "
      "real zeroshard-server processes; prints the sustained rates.");
  flags.Double("seconds", &seconds, "how long to run");
  flags.Int64("workers", &workers, "simulated workers W (1..64)");
  flags.Uint32("servers", &servers, "shard servers K");
  flags.Int64("scale", &scale, "model size (~23k parameters per unit)");
  flags.ParseOrExit(argc, argv);
  if (workers < 1 || workers > 64 || servers < 1 || scale < 1) {
    zeroshard::ExitWithError(flags.program(),
                             "--workers must be in [1, 64], --servers and "
                             "--scale >= 1");
  }
  o.duration = absl::Seconds(seconds);
  o.workers = static_cast<int>(workers);
  o.servers = servers;
  o.model_scale = static_cast<int>(scale);
  const zeroshard::testing::LoadResult r = zeroshard::testing::RunLoad(o);
  std::printf("load: %s\n", zeroshard::testing::DescribeLoad(r).c_str());
  if (!r.status.ok()) {
    std::printf("error: %s\n", r.status.ToString().c_str());
  }
  const bool ok = r.status.ok() && r.params_match &&
                  r.contributions_applied == r.expected_contributions &&
                  r.duplicates_ignored == 0;
  const double mib = 1024.0 * 1024.0, s = r.seconds > 0 ? r.seconds : 1;
  zeroshard::bench::ResultLine()
      .AddInt("steps", r.steps)
      .Add("seconds", r.seconds)
      .Add("push_per_s", r.pushes / s)
      .Add("push_mib_per_s", r.push_bytes / mib / s)
      .Add("gather_per_s", r.gathers / s)
      .Add("gather_mib_per_s", r.gather_bytes / mib / s)
      .Add("server_peak_rss_mib", r.vm_hwm / mib)
      .AddInt("ok", ok ? 1 : 0)
      .Print();
  return ok ? 0 : 1;
}
