#include "tests/nvme_server_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/metrics/process_metrics.h"
#include "common/model_spec.h"
#include "common/optim/adamw.h"
#include "common/optim/adamw_hyper.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

constexpr uint64_t kSampleElements = 4096;
constexpr double kMiB = 1024.0 * 1024.0;

// Element i of value stream s (0: initial parameters, 1 + t: step t's
// gradient): a multiple of 2^-12 in [-1, 1).
float Value(uint64_t s, uint64_t i) {
  const int64_t k = static_cast<int64_t>(SplitMix64((s << 48) ^ i) >> 51);
  return static_cast<float>(k - 4096) * 0x1.0p-12f;
}
float Init(uint64_t i) { return Value(0, i) * 0.05f; }
float Grad(int step, uint64_t i) { return Value(1 + step, i); }
double Lr(int step) { return 1e-3 * (step + 1); }

// Samples the VmRSS of `pid` every 50 ms until destroyed.
class RssSampler {
 public:
  explicit RssSampler(pid_t pid) : pid_(pid), thread_([this] { Loop(); }) {}
  ~RssSampler() {
    stop_.Notify();
    thread_.join();
  }
  uint64_t peak() const { return peak_; }
  uint64_t samples() const { return samples_; }
  // The largest sample since the previous call (or the start).
  uint64_t TakePhasePeak() {
    Sample();
    return phase_peak_.exchange(0);
  }

 private:
  void Loop() {
    do {
      Sample();
    } while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  }
  void Sample() {
    const uint64_t rss = metrics::ProcStatusBytes(pid_, "VmRSS");
    ++samples_;
    uint64_t seen = peak_;
    while (rss > seen && !peak_.compare_exchange_weak(seen, rss)) {
    }
    seen = phase_peak_;
    while (rss > seen && !phase_peak_.compare_exchange_weak(seen, rss)) {
    }
  }
  const pid_t pid_;
  std::atomic<uint64_t> peak_{0}, phase_peak_{0}, samples_{0};
  absl::Notification stop_;
  std::thread thread_;
};

// Two tensors (7/8 in group 0 with weight decay, 1/8 in group 1 without),
// multiples of 64 elements, together >= state_bytes / 12 elements.
v1::ModelSpec Spec(uint64_t state_bytes) {
  v1::ModelSpec spec = SmallSpec("nvme_server", 1);
  spec.clear_tensors();
  const uint64_t units = (state_bytes / 12 + 511) / 512;  // of 512 elements
  const uint64_t sizes[] = {units / 8 * 7 * 512, (units - units / 8 * 7) * 512};
  for (int t = 0; t < 2; ++t) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t == 0 ? "w" : "b");
    ts->add_shape(static_cast<int64_t>(sizes[t]));
    ts->set_param_group(t);
  }
  return spec;
}

// Calls `send(range, data)` for consecutive chunks of [0, total) filled
// with value(i).
template <typename F, typename S>
absl::Status Chunked(uint64_t total, uint64_t chunk, F value, S send) {
  std::vector<float> buf(std::min(chunk, total));
  for (uint64_t b = 0; b < total; b += chunk) {
    const Range r{b, std::min(total, b + chunk)};
    for (uint64_t i = r.begin; i < r.end; ++i) buf[i - b] = value(i);
    ZS_RETURN_IF_ERROR(send(r, buf.data()));
  }
  return absl::OkStatus();
}

// Ranges of kSampleElements: the first and last, ones across the tensor
// boundary, a chunk boundary and a default sub-group boundary (2^21), the
// rest at seeded positions; all inside [0, total) and 64-aligned.
std::vector<Range> SampleRanges(const PartitionPlan& plan, uint64_t chunk,
                                int count) {
  const uint64_t total = plan.total(), half = kSampleElements / 2;
  std::vector<uint64_t> starts = {0, total - kSampleElements,
                                  plan.tensors()[1].range.begin - half,
                                  chunk - half, (1u << 21) - half};
  for (uint64_t n = 0; static_cast<int>(starts.size()) < count; ++n) {
    starts.push_back(SplitMix64(n) % (total - kSampleElements));
  }
  std::vector<Range> ranges;
  for (uint64_t s : starts) {
    s = std::min(s, total - kSampleElements) / 64 * 64;
    ranges.push_back(Range{s, s + kSampleElements});
  }
  return ranges;
}

// AdamW over `r` only, from the initial values through every step.
std::vector<float> Expected(const v1::ModelSpec& spec,
                            const PartitionPlan& plan, const Range& r,
                            const std::vector<float>& clips) {
  const uint64_t n = r.size();
  std::vector<float> p(n), m(n, 0.0f), v(n, 0.0f), g(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = Init(r.begin + i);
  for (size_t step = 0; step < clips.size(); ++step) {
    for (uint64_t i = 0; i < n; ++i) {
      g[i] = Grad(static_cast<int>(step), r.begin + i);
    }
    for (size_t t : plan.TensorsIn(r)) {
      const TensorInfo& info = plan.tensors()[t];
      const Range part = Intersect(r, info.range);
      const AdamWHyper h = GroupAdamWHyper(
          spec.param_groups(info.desc.param_group), Lr(static_cast<int>(step)),
          clips[step], static_cast<int64_t>(step + 1));
      const uint64_t o = part.begin - r.begin;
      AdamWStepAt(SimdLevel::kScalar, h, &p[o], &g[o], &m[o], &v[o], nullptr,
                  ServingType::kNone, part.size());
    }
  }
  return p;
}

// Gathers the sampled ranges (fp32 and bf16) and compares them with
// Expected; DATA_LOSS naming the first element that differs.
absl::Status CheckSamples(ShardClient& client, const std::vector<Range>& ranges,
                          const std::vector<float>& clips, uint64_t* checked) {
  for (const Range& r : ranges) {
    std::vector<float> got(r.size());
    std::vector<uint16_t> served(r.size());
    ZS_RETURN_IF_ERROR(client.Gather(r, v1::DTYPE_FP32, got.data()));
    ZS_RETURN_IF_ERROR(client.Gather(r, v1::DTYPE_BF16, served.data()));
    const std::vector<float> want =
        Expected(client.spec(), client.plan(), r, clips);
    const int64_t d = FirstBitDifference(got, want);
    if (d >= 0) {
      return absl::DataLossError(
          absl::StrFormat("element %d: the server has %.9g, AdamW gives %.9g",
                          r.begin + d, got[d], want[d]));
    }
    for (uint64_t i = 0; i < r.size(); ++i) {
      if (served[i] != Fp32ToBf16(want[i])) {
        return absl::DataLossError(absl::StrFormat(
            "element %d: bf16 serving copy 0x%04x, expected 0x%04x",
            r.begin + i, served[i], Fp32ToBf16(want[i])));
      }
    }
    *checked += r.size();
  }
  return absl::OkStatus();
}

double Since(absl::Time t) { return absl::ToDoubleSeconds(absl::Now() - t); }

// The run with the server up; fills `r` as it goes.
absl::Status Train(const NvmeServerOptions& o, LocalFleet& fleet,
                   RssSampler& rss, NvmeServerResult& r) {
  const absl::Time start = absl::Now();
  auto log = [&](const std::string& line) {
    if (!o.verbose) return;
    std::printf("[%6.1f s] %s\n", Since(start), line.c_str());
    std::fflush(stdout);
  };
  ClientOptions co;
  co.addresses = fleet.addresses();
  co.deadline = std::chrono::minutes(10);  // a 4 GiB step takes a while
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                      ShardClient::Connect(co));
  const v1::ModelSpec spec = Spec(o.state_bytes);
  ZS_RETURN_IF_ERROR(client->RegisterModel(spec));
  const uint64_t total = client->plan().total();
  r.elements = total;
  if (total < 16 * kSampleElements) {
    return absl::InvalidArgumentError("state_bytes is too small to sample");
  }
  r.rss_idle = metrics::ProcStatusBytes(fleet.server(0).pid(), "VmRSS");
  log(absl::StrFormat("registered %d elements (%.2f GiB of p+m+v)", total,
                      total * 12.0 / (1 << 30)));
  absl::Time t = absl::Now();
  ZS_RETURN_IF_ERROR(Chunked(total, o.chunk_elements, Init,
                             [&](const Range& range, const float* data) {
                               return client->WriteParameters(range, data);
                             }));
  r.write_s = Since(t);
  log(absl::StrFormat("wrote the parameters in %.1f s, peak RSS %.1f MiB",
                      r.write_s, rss.TakePhasePeak() / kMiB));
  std::vector<float> clips;
  for (int step = 0; step < o.steps; ++step) {
    NvmeStepTiming s;
    double sum_squares = 0;
    t = absl::Now();
    ZS_RETURN_IF_ERROR(Chunked(
        total, o.chunk_elements, [step](uint64_t i) { return Grad(step, i); },
        [&](const Range& range, const float* data) {
          for (uint64_t i = 0; i < range.size(); ++i) {
            sum_squares += static_cast<double>(data[i]) * data[i];
          }
          const PushId id{0, static_cast<uint64_t>(step), 0,
                          absl::StrCat("s", step, "/", range.begin)};
          return client->Push(range, v1::DTYPE_FP32, data, id);
        }));
    s.push_s = Since(t);
    t = absl::Now();
    ZS_ASSIGN_OR_RETURN(const StepNorm norm, client->Prepare(0, step));
    s.prepare_s = Since(t);
    if (std::abs(norm.sum_squares - sum_squares) > 1e-6 * sum_squares) {
      return absl::DataLossError(
          absl::StrFormat("step %d: the server's sum of squares is %.9g, the "
                          "pushed gradient's %.9g",
                          step, norm.sum_squares, sum_squares));
    }
    clips.push_back(static_cast<float>(std::min(1.0, 1.0 / norm.norm())));
    t = absl::Now();
    ZS_RETURN_IF_ERROR(client->Commit(0, step, clips.back(), Lr(step), false));
    s.commit_s = Since(t);
    ZS_ASSIGN_OR_RETURN(auto stats, client->Stats());
    s.server_step_s = stats[0].last_step_seconds();
    s.server_io_wait_s = stats[0].last_step_io_wait_seconds();
    s.rss_peak = rss.TakePhasePeak();
    r.steps.push_back(s);
    log(absl::StrFormat(
        "step %d: push %.1f s, prepare %.1f s, commit %.1f s, peak RSS %.1f "
        "MiB",
        step, s.push_s, s.prepare_s, s.commit_s, s.rss_peak / kMiB));
  }
  t = absl::Now();
  ZS_RETURN_IF_ERROR(CheckSamples(
      *client, SampleRanges(client->plan(), o.chunk_elements, o.samples), clips,
      &r.checked_elements));
  r.gather_s = Since(t);
  ZS_ASSIGN_OR_RETURN(auto stats, client->Stats());
  const v1::GetStatsResponse& st = stats[0];
  r.state_bytes = st.owned_elements() * 12;
  r.storage_read = st.storage_bytes_read();
  r.storage_written = st.storage_bytes_written();
  if (st.storage() != "nvme" || st.optimizer_steps() != clips.size() ||
      st.owned_elements() != total) {
    return absl::InternalError(
        absl::StrCat("GetStats: storage ", st.storage(), ", ",
                     st.optimizer_steps(), " steps, ", st.owned_elements(),
                     " elements; expected nvme, ", clips.size(), ", ", total));
  }
  return absl::OkStatus();
}

}  // namespace

NvmeServerResult RunNvmeServer(const NvmeServerOptions& o) {
  NvmeServerResult r;
  const std::string state = absl::StrCat(o.path, "/nvme-", getpid());
  const std::string logs = state + ".logs";
  for (const std::string& dir : {o.path, state, logs}) mkdir(dir.c_str(), 0755);
  std::vector<std::string> flags = {"--storage=nvme", "--nvme_path=" + state};
  flags.insert(flags.end(), o.server_flags.begin(), o.server_flags.end());
  std::unique_ptr<LocalFleet> fleet = StartFleet(1, flags, logs);
  if (fleet == nullptr) {
    r.status = absl::UnavailableError("the server did not start, see " + logs);
  } else {
    const pid_t pid = fleet->server(0).pid();
    {
      RssSampler rss(pid);
      r.status = Train(o, *fleet, rss, r);
      r.vm_hwm = metrics::ProcStatusBytes(pid, "VmHWM");
      r.rss_peak = rss.peak();
      r.rss_samples = rss.samples();
    }
    const absl::Status stop = fleet->Stop(std::chrono::seconds(30));
    if (r.status.ok()) r.status = stop;
  }
  std::error_code ignored;
  std::filesystem::remove_all(state, ignored);
  if (r.status.ok()) std::filesystem::remove_all(logs, ignored);
  return r;
}

std::string DescribeNvmeServer(const NvmeServerResult& r) {
  std::string out = absl::StrFormat(
      "state: %d elements, %.3f GiB of p+m+v on NVMe; wrote the parameters "
      "in %.1f s; gathered and checked %d elements bit for bit in %.1f s\n",
      r.elements, r.state_bytes / (kMiB * 1024), r.write_s, r.checked_elements,
      r.gather_s);
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const NvmeStepTiming& s = r.steps[i];
    absl::StrAppendFormat(
        &out,
        "step %d: push %.2f s, prepare %.2f s, commit %.2f s (server: AdamW "
        "step %.2f s, I/O wait %.2f s); server peak RSS %.1f MiB\n",
        i, s.push_s, s.prepare_s, s.commit_s, s.server_step_s,
        s.server_io_wait_s, s.rss_peak / kMiB);
  }
  absl::StrAppendFormat(
      &out,
      "server memory: VmRSS idle %.1f MiB, largest of %d samples %.1f MiB, "
      "VmHWM %.1f MiB; tier I/O read %.1f MiB, written %.1f MiB",
      r.rss_idle / kMiB, r.rss_samples, r.rss_peak / kMiB, r.vm_hwm / kMiB,
      r.storage_read / kMiB, r.storage_written / kMiB);
  return out;
}

}  // namespace zeroshard::testing
