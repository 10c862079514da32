#include "tests/load_harness.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/fault_interceptor.h"
#include "common/fault/fault_spec.h"
#include "common/metrics/process_metrics.h"
#include "common/seeded_random.h"
#include "tests/testing.h"

namespace zeroshard::testing {
namespace {

constexpr double kLr = 1e-3;

// Worker w's gradient of element i at step s: k(s, i) · (w + 1) · 2^-12
// with k in [-15, 15]. Any sum over the W <= 64 workers is an integer
// multiple of 2^-12 below 2^15 · 2^-12: exact in fp32 in every order, and
// equal to k(s, i) · W(W+1)/2 · 2^-12. Dropping or doubling one worker's
// contribution changes it.
int K(uint64_t s, uint64_t i) {
  return static_cast<int>(SplitMix64((s << 40) ^ i) % 31) - 15;
}
float Grad(int w, uint64_t s, uint64_t i) {
  return static_cast<float>(K(s, i) * (w + 1)) * 0x1.0p-12f;
}

}  // namespace

LoadResult RunLoad(const LoadOptions& o) {
  LoadResult r;
  std::vector<std::string> server_args = {"--grpc_threads=32"};
  if (!o.server_faults.empty()) {
    server_args.push_back("--fault_spec=" + o.server_faults);
  }
  auto worker_faults =
      fault::ParseFaultSpec(o.worker_faults, fault::Side::kWorker);
  if (!worker_faults.ok()) {
    r.status = worker_faults.status();
    return r;
  }
  auto injector = std::make_shared<fault::FaultInjector>(*worker_faults);
  auto fleet = StartFleet(o.servers, server_args, o.work_dir);
  if (fleet == nullptr) {
    r.status = absl::UnavailableError("the servers did not start");
    return r;
  }
  const v1::ModelSpec spec = SmallSpec("load", o.servers, o.model_scale,
                                       static_cast<uint32_t>(o.workers));
  auto leader = Connect(*fleet);
  if (leader == nullptr) {
    r.status = absl::UnavailableError("cannot connect");
    return r;
  }
  r.status = leader->RegisterModel(spec);
  if (!r.status.ok()) return r;
  const uint64_t total = leader->plan().total();
  const Range all{0, total};
  r.params = total;
  std::vector<float> init(total);
  for (uint64_t i = 0; i < total; ++i) {
    init[i] = static_cast<float>(K(~0ull, i)) * 0.01f;
  }
  r.status = leader->WriteParameters(all, init.data());
  if (!r.status.ok()) return r;
  const uint64_t pieces = leader->plan().Split(all).size();

  absl::Mutex mu;
  int64_t go = -1;  // the step the workers may push
  bool stop = false;
  absl::Status first_error;
  auto fail = [&](const absl::Status& s) {
    absl::MutexLock l(&mu);
    if (first_error.ok()) first_error = s;
    stop = true;
  };
  std::atomic<uint64_t> pushes{0}, gathers{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < o.workers; ++w) {
    workers.emplace_back([&, w] {
      ClientOptions co;
      co.addresses = fleet->addresses();
      co.deadline = std::chrono::milliseconds(20000);
      // Under faults about one attempt in five fails (drops and duplicates
      // on both sides), so six attempts would run out about once in 16k
      // pushes; a client on a lossy network retries more.
      if (!o.worker_faults.empty() || !o.server_faults.empty()) {
        co.max_attempts = 16;
      }
      AddClientFaultInjection(injector, &co);
      auto connected = ShardClient::Connect(co);
      if (!connected.ok()) return fail(connected.status());
      std::unique_ptr<ShardClient> client = std::move(*connected);
      absl::Status s = client->UseSpec(spec);
      if (!s.ok()) return fail(s);
      std::vector<float> g(total);
      std::vector<uint16_t> params(total);
      for (uint64_t step = 0;; ++step) {
        {
          absl::MutexLock l(&mu);
          auto ready = [&] { return stop || go >= static_cast<int64_t>(step); };
          mu.Await(absl::Condition(&ready));
          if (stop) return;
        }
        for (uint64_t i = 0; i < total; ++i) g[i] = Grad(w, step, i);
        const PushId id{0, step, static_cast<uint32_t>(w),
                        absl::StrCat("w", w, "/s", step)};
        s = client->Push(all, v1::DTYPE_FP32, g.data(), id);
        if (!s.ok()) return fail(s);
        ++pushes;
        uint64_t at = 0;
        s = client->Gather(all, v1::DTYPE_BF16, params.data(), &at);
        if (!s.ok()) return fail(s);
        if (at != step && at != step + 1) {
          return fail(absl::InternalError(absl::StrCat(
              "worker ", w, " gathered step ", at, " during step ", step)));
        }
        ++gathers;
      }
    });
  }

  // The leader: publish a step, prepare (waits for all W slots), commit,
  // and apply the exact sum to the reference.
  ReferenceAdamW reference(spec, init);
  std::vector<float> sum(total);
  const float scale = static_cast<float>(o.workers * (o.workers + 1) / 2);
  const absl::Time start = absl::Now();
  for (uint64_t step = 0;; ++step) {
    {
      absl::MutexLock l(&mu);
      if (stop) break;
      go = static_cast<int64_t>(step);
    }
    auto norm = leader->Prepare(0, step);
    absl::Status s = norm.status();
    if (s.ok()) s = leader->Commit(0, step, 1.0f, kLr, false);
    if (!s.ok()) {
      fail(s);
      break;
    }
    for (uint64_t i = 0; i < total; ++i) {
      sum[i] = static_cast<float>(K(step, i)) * scale * 0x1.0p-12f;
    }
    reference.Step(sum, 1.0f, kLr);
    r.steps = step + 1;
    auto stats = leader->Stats();
    if (stats.ok()) {
      for (const auto& st : *stats) {
        r.rss_peak_sampled = std::max(r.rss_peak_sampled, st.bytes_held_rss());
        if (step == 0) {
          r.rss_first_step = std::max(r.rss_first_step, st.bytes_held_rss());
        }
      }
    }
    if (absl::Now() - start >= o.duration) {
      absl::MutexLock l(&mu);
      stop = true;
    }
  }
  for (auto& t : workers) t.join();
  r.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  r.status = first_error;
  r.pushes = pushes.load();
  r.gathers = gathers.load();
  r.push_bytes = r.pushes * total * 4;
  r.gather_bytes = r.gathers * total * 2;
  r.expected_contributions = r.pushes * pieces;
  const fault::FaultInjector::Counts c = injector->counts();
  r.faults_injected = c.drop + c.fail + c.lose + c.dup + c.delay;
  if (!r.status.ok()) return r;

  auto stats = leader->Stats();
  if (!stats.ok()) {
    r.status = stats.status();
    return r;
  }
  for (const auto& st : *stats) {
    r.contributions_applied += st.contributions_applied();
    r.duplicates_ignored += st.duplicates_ignored();
    r.state_bytes += st.bytes_held();
  }
  std::vector<float> p(total);
  r.status = leader->Gather(all, v1::DTYPE_FP32, p.data());
  if (!r.status.ok()) return r;
  r.params_match = FirstBitDifference(p, reference.params()) == -1;
  for (uint32_t k = 0; k < o.servers; ++k) {
    r.vm_hwm = std::max(
        r.vm_hwm, metrics::ProcStatusBytes(fleet->server(k).pid(), "VmHWM"));
  }
  return r;
}

std::string DescribeLoad(const LoadResult& r) {
  const double mib = 1024.0 * 1024.0;
  const double s = r.seconds > 0 ? r.seconds : 1;
  return absl::StrFormat(
      "%d steps in %.1f s (%.2f steps/s), %d parameters: %d pushes "
      "(%.1f/s, %.1f MiB/s), %d gathers (%.1f/s, %.1f MiB/s); ledgers: "
      "%d contributions applied (expected %d), %d duplicates ignored; "
      "parameters %s the reference; server memory: state %.1f MiB, RSS "
      "after step 0 %.1f MiB, largest sampled %.1f MiB, peak (VmHWM) %.1f "
      "MiB; %d faults injected by the workers",
      r.steps, r.seconds, r.steps / s, r.params, r.pushes, r.pushes / s,
      r.push_bytes / mib / s, r.gathers, r.gathers / s,
      r.gather_bytes / mib / s, r.contributions_applied,
      r.expected_contributions, r.duplicates_ignored,
      r.params_match ? "equal" : "DIFFER from", r.state_bytes / mib,
      r.rss_first_step / mib, r.rss_peak_sampled / mib, r.vm_hwm / mib,
      r.faults_injected);
}

}  // namespace zeroshard::testing
