// nvme_server_bench: the NVMe issue's acceptance criterion on a real
// server process: "a server holding >= 4 GiB of optimizer state on NVMe
// runs with resident memory under 512 MiB (measured, printed) through a
// full step". One `zeroshard-server --storage=nvme` (K = 1, default tier
// flags: --sub_group_size, --buffer_count, --buffer_size, --aio_*,
// --read_cache_bytes and --grads_on_disk as in `zeroshard-server --help`)
// holds --state_gib GiB of fp32 master + Adam m + v; the client writes the
// parameters, pushes --steps steps of gradients in 64 MiB chunks, prepares
// and commits each step and checks sampled ranges bit for bit against AdamW
// computed locally (tests/nvme_server_run.h). The server's VmRSS is sampled
// every 50 ms from /proc and its VmHWM read before it is stopped.
//
//   bazel run -c opt //tests:nvme_server_bench -- --state_gib=4 --path=/tmp/x
//
// Needs about 32 bytes of disk per element (two generations of p, m, v and
// the serving copy, plus the gradient): ~11 GiB at 4 GiB of state; the
// state is deleted at the end. Timings are printed, never judged.
//
// Last line: RESULT server_state_gib=S server_vm_hwm_mib=H
// server_rss_peak_mib=P step_s=T under_512_mib=0|1 ok=0|1 step_median_s=M,
// where step_s is the slowest step's prepare + commit (the server's
// optimizer step over the whole state) and step_median_s the median step's.
// Exit 1 unless every check passed and VmHWM < 512 MiB.
#include <cstdio>
#include <string>
#include <vector>

#include "common/bench/bench.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "tests/nvme_server_run.h"

int main(int argc, char** argv) {
  zeroshard::TuneMallocForTransfers();
  zeroshard::testing::NvmeServerOptions o;
  double state_gib = 4;
  std::string path = "/tmp/nvme_server_bench";
  int64_t steps = o.steps;
  zeroshard::FlagSet flags(
      "nvme_server_bench",
      "nvme_server_bench [flags]\n\nTrains against one real zeroshard-server "
      "--storage=nvme holding --state_gib GiB of optimizer state and reports "
      "its resident memory.");
  flags.Double("state_gib", &state_gib, "p + m + v on the server, in GiB");
  flags.String("path", &path, "folder for the server's state and logs");
  flags.Int64("steps", &steps, "optimizer steps (1..100)");
  flags.ParseOrExit(argc, argv);
  if (state_gib <= 0 || steps < 1 || steps > 100 || path.empty()) {
    zeroshard::ExitWithError(flags.program(),
                             "--state_gib must be > 0, --steps in [1, 100] "
                             "and --path not empty");
  }
  o.state_bytes = static_cast<uint64_t>(state_gib * (1ull << 30));
  o.path = path;
  o.steps = static_cast<int>(steps);
  const zeroshard::testing::NvmeServerResult r =
      zeroshard::testing::RunNvmeServer(o);
  std::printf("%s\n", zeroshard::testing::DescribeNvmeServer(r).c_str());
  if (!r.status.ok()) std::printf("error: %s\n", r.status.ToString().c_str());
  const double mib = 1024.0 * 1024.0;
  const bool under = r.vm_hwm > 0 && r.vm_hwm < (512ull << 20);
  std::vector<double> step_seconds;
  for (const auto& s : r.steps)
    step_seconds.push_back(s.prepare_s + s.commit_s);
  const zeroshard::bench::Summary steps_s =
      zeroshard::bench::Summarize(step_seconds);
  zeroshard::bench::ResultLine()
      .Add("server_state_gib", r.state_bytes / (mib * 1024))
      .Add("server_vm_hwm_mib", r.vm_hwm / mib)
      .Add("server_rss_peak_mib", r.rss_peak / mib)
      .Add("step_s", steps_s.max)
      .AddInt("under_512_mib", under ? 1 : 0)
      .AddInt("ok", r.status.ok() ? 1 : 0)
      .Add("step_median_s", steps_s.median)
      .Print();
  return r.status.ok() && under ? 0 : 1;
}
