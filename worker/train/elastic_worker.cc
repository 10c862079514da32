#include "worker/train/elastic_worker.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/membership_client.h"
#include "common/hostname.h"
#include "common/status_macros.h"
#include "worker/collective/ucx_transport.h"
#include "worker/elastic/batch_policy.h"
#include "worker/elastic/elastic_trainer.h"

namespace zeroshard::train {
namespace {

// The first SIGTERM/SIGINT taken (0: none yet).
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "the signal handler needs a lock-free atomic");

// Async-signal-safe: an atomic exchange, and _exit.
void OnStopSignal(int signo) {
  if (stop_signal.exchange(signo) != 0) _exit(128 + signo);
}

const char* SignalName(int signo) {
  return signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : "signal";
}

absl::StatusOr<elastic::ElasticSpec> MakeElasticSpec(
    const ElasticFlags& f, const config::EngineConfig& config) {
  elastic::ElasticSpec es;
  es.min_workers = static_cast<int>(f.min_workers);
  es.start_workers = static_cast<int>(f.start_workers);
  ZS_ASSIGN_OR_RETURN(es.policy, elastic::ParseBatchPolicy(f.batch_policy));
  if (f.elastic_timeout <= 0 || f.collective_timeout <= 0) {
    return absl::InvalidArgumentError(
        "--elastic_timeout and --collective_timeout must be positive");
  }
  es.timeout = absl::Seconds(f.elastic_timeout);
  es.comm.part_alignment = config.zeroshard.alignment;
  es.comm.op_timeout = absl::Seconds(f.collective_timeout);
  es.stop_requested = [] { return stop_signal.load() != 0; };
  ZS_RETURN_IF_ERROR(elastic::ValidateElasticSpec(es));
  return es;
}

}  // namespace

void AddElasticFlags(FlagSet* flags, ElasticFlags* f) {
  flags->Bool("elastic", &f->elastic,
              "join the job's membership (first server) and train in "
              "whatever worker group it forms; no launcher environment; "
              "needs stage 1-3 and --checkpoint_interval > 0; SIGTERM or "
              "SIGINT: leave the job at the next step boundary and exit 0 (a "
              "second one: exit at once)");
  flags->String("worker_name", &f->worker_name,
                "--elastic: this worker's name in the membership "
                "(default host:pid)");
  flags->Int64("min_workers", &f->min_workers,
               "--elastic: the fewest workers a group trains with");
  flags->Int64("start_workers", &f->start_workers,
               "--elastic: the first group waits for this many (0: "
               "--min_workers); the global batch is this × the config's "
               "gradient accumulation micro-batches");
  flags->String("batch_policy", &f->batch_policy,
                "--elastic, when the group size does not divide the global "
                "batch: rescale (keep the micro-batch, round the "
                "accumulation) or refuse (wait for a size that divides it)");
  flags->Double("elastic_timeout", &f->elastic_timeout,
                "--elastic: seconds to wait for a group to form");
  flags->Double("collective_timeout", &f->collective_timeout,
                "--elastic: seconds a collective waits for a silent peer "
                "before the group is re-formed without it");
}

int ElasticConfigWorld(const ElasticFlags& f) {
  return static_cast<int>(f.start_workers > 0 ? f.start_workers
                                              : f.min_workers);
}

std::string ElasticWorkerName(const ElasticFlags& f) {
  if (!f.worker_name.empty()) return f.worker_name;
  return absl::StrCat(LocalHostname(), ":", getpid());
}

void HandleStopSignals() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    for (;;) pause();
  }).detach();
}

absl::StatusOr<std::optional<TrainResult>> RunElasticWorker(
    const ElasticFlags& f, const config::EngineConfig& config,
    const TrainSpec& spec, ShardClient* client, const StepCallback& on_step,
    TrainProgress* progress) {
  ZS_ASSIGN_OR_RETURN(elastic::ElasticSpec es, MakeElasticSpec(f, config));
  // Servers reached on this machine's loopback: the membership's workers
  // are all here too (UcxTransportOptions::loopback_only).
  const std::vector<std::string>& servers = client->options().addresses;
  es.transport.loopback_only =
      !servers.empty() &&
      std::all_of(servers.begin(), servers.end(),
                  [](const std::string& a) { return IsLoopbackAddress(a); });
  const std::string name = ElasticWorkerName(f);
  MembershipClientOptions mo;
  mo.job_id = spec.zero.job_id;
  mo.worker_name = name;
  mo.node = LocalHostname();
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<MembershipClient> member,
                      MembershipClient::Create(client, mo));
  ZS_RETURN_IF_ERROR(member->Join());
  std::printf("worker '%s': joined job '%s' as member %llu\n", name.c_str(),
              mo.job_id.c_str(),
              static_cast<unsigned long long>(member->member_id()));
  std::fflush(stdout);
  absl::StatusOr<elastic::ElasticResult> r =
      elastic::RunElastic(spec, es, member.get(), client, on_step, progress);
  absl::Status left = member->Leave();  // no-op when RunElastic left
  if (!left.ok()) {
    std::fprintf(stderr, "worker '%s': leaving the membership: %s\n",
                 name.c_str(), left.ToString().c_str());
  }
  if (!r.ok()) return r.status();
  if (r->already_done) {
    std::printf(
        "zeroshard-worker: %s: job '%s' already finished (the servers "
        "committed step %lld of --steps %lld); nothing to do\n",
        name.c_str(), mo.job_id.c_str(), static_cast<long long>(r->last_step),
        static_cast<long long>(spec.steps));
    std::fflush(stdout);
    return std::nullopt;
  }
  if (!r->left) return std::move(r->train);
  const char* why = SignalName(stop_signal.load());
  if (r->last_step < 0) {
    std::printf("zeroshard-worker: %s left the job before training (%s)\n",
                name.c_str(), why);
  } else {
    std::printf("zeroshard-worker: %s left the job after step %lld (%s)\n",
                name.c_str(), static_cast<long long>(r->last_step), why);
  }
  std::fflush(stdout);
  return std::nullopt;
}

}  // namespace zeroshard::train
