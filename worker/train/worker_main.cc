// zeroshard-worker: one rank of a ZeRO training run of GPT-2
// (engine.h, trainer.h), over UCX between real processes and real shard
// servers, configured by a DeepSpeed JSON config (ds_options.h).
//
//   zeroshard-worker --config ds_config.json --data 'train_*.bin'
//       --model_file init.bin --seq_len 64 --steps 100 --save final.bin
//       --servers host:port,host:port
//
// Rank, world and node layout come from the launcher's environment
// (ucx_communicator.h: ZEROSHARD_RANK, ZEROSHARD_WORLD_SIZE,
// ZEROSHARD_LOCAL_RANK, ZEROSHARD_LOCAL_SIZE, ZEROSHARD_COORD); rank 0 may
// listen on port 0 and report the port through --port_file. Servers:
// --servers, else the config's zeroshard.servers addresses (stages 1-3).
// Model: --model_file (llm.c format; its header gives the config), else the
// --layers/--heads/... flags with seeded initial weights (--seed,
// --init_std). Data: --data token files (llm.c format, split over the ranks
// by io::DataLoader), else synthetic tokens of --seed (tests).
//
// Rank 0 prints the config's warnings and one progress line per step:
//   step 3/100 loss 4.123456 lr 6.0e-04 norm 1.234 tokens/s 12345
// (--stats: every rank also prints its step_stats.h line). Rank 0 writes
// the final parameters to --save (llm.c model file, fp32). With
// --metrics_file every rank writes JSON lines (run_metrics.h) there: a
// "start" record, one "step" record per step and, on rank 0, an "end"
// record with the loss of the final parameters on the eval batch: the
// first B·T + 1 tokens of the first data file (inputs, then targets
// shifted by one; no record without --data or with a shorter file). A "%r"
// in the path is replaced by the rank.
//
// --metrics_port P (0: a free one) serves Prometheus metrics on
// --metrics_host:P (GET /metrics, worker_metrics.h) while the rank trains;
// the rank prints "rank R: metrics on http://HOST:PORT/metrics".
//
// Servers with TLS and tokens: --tls_ca, --tls_cert/--tls_key (mutual
// TLS), the token from --token_file or $ZEROSHARD_TOKEN (client/security.h).
//
// Elastic (--elastic; worker/elastic/elastic_trainer.h): no launcher
// environment; the worker joins the job's membership service on the first
// server as --worker_name (default host:pid), trains in whatever group the
// membership forms — at least --min_workers, the first group waits for
// --start_workers — and keeps the global batch of --start_workers × the
// config's gradient accumulation micro-batches (--batch_policy for sizes
// that do not divide it). Needs stage 1-3 and --checkpoint_interval > 0.
// Whichever worker is rank 0 at the end writes --save and the eval record;
// "%r" in --metrics_file is the worker name. SIGTERM or SIGINT (Kubernetes
// scaling the workers down) makes an elastic worker leave the job cleanly:
// it leaves the membership at once, trains on with its group until the
// group ends at a step boundary, prints
//   zeroshard-worker: NAME left the job after step N (SIGTERM)
// and exits 0; the others go on without it. A second signal exits at once
// with 128 + its number. (Without --elastic the signals keep their default
// action.)
//
// Test hook: ZEROSHARD_TEST_FAIL_AT="R:K" makes rank R exit with status 3
// right after step K (the launcher's failure tests).
//
// Exits 0 on success, 1 with the error on failure, 2 on bad flags.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/fault_interceptor.h"
#include "client/membership_client.h"
#include "client/security.h"
#include "client/shard_client.h"
#include "common/fault/fault_spec.h"
#include "common/flags.h"
#include "common/hostname.h"
#include "common/malloc_tuning.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/rpc_metrics.h"
#include "common/status_macros.h"
#include "worker/collective/faulty_communicator.h"
#include "worker/collective/ucx_communicator.h"
#include "worker/config/ds_config.h"
#include "worker/config/ds_options.h"
#include "worker/elastic/elastic_trainer.h"
#include "worker/gpt2/model.h"
#include "worker/io/data_loader.h"
#include "worker/io/model_file.h"
#include "worker/io/token_file.h"
#include "worker/train/run_metrics.h"
#include "worker/train/trainer.h"
#include "worker/train/worker_metrics.h"

namespace zeroshard::train {
namespace {

struct Args {
  std::string config, servers, data, model_file, save, port_file;
  std::string metrics_file;
  std::string job_id = "zero";
  ClientSecurityFlags security;  // TLS and token (client/security.h)
  std::string metrics_host = "127.0.0.1";
  int64_t metrics_port = -1;
  gpt2::Config model{16, 64, 64, 2, 2, 32};
  int64_t seq_len = 16, steps = 1, seed = 1, threads = 1;
  int64_t checkpoint_interval = -1;  // -1: the config's
  double init_std = 0.02;
  bool stats = false;
  fault::FaultSpec faults;  // --fault_spec / ZEROSHARD_FAULTS
  // --elastic
  bool elastic = false;
  std::string worker_name, batch_policy = "rescale";
  int64_t min_workers = 1, start_workers = 0;
  double elastic_timeout = 600, collective_timeout = 60;
  // --elastic: the first SIGTERM/SIGINT taken (0: none yet), set by
  // HandleStopSignals' handler.
  const std::atomic<int>* stop_signal = nullptr;
};

const char* SignalName(int signo) {
  return signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : "signal";
}

// --elastic: the first SIGTERM/SIGINT taken (0: none yet).
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "the signal handler needs a lock-free atomic");

// Async-signal-safe: an atomic exchange, and _exit.
void OnStopSignal(int signo) {
  if (stop_signal.exchange(signo) != 0) _exit(128 + signo);
}

// Makes SIGTERM and SIGINT set stop_signal (the elastic worker leaves at a
// step boundary); a second one exits at once with 128 + its number. Call it
// before any thread starts: the signals are blocked in this thread and so
// in the threads started after it (gRPC's, UCX's), whose system calls they
// must not interrupt, and one thread started here takes them (it waits in
// pause() with them unblocked). Threads started before main (OpenBLAS's
// pool, by a library constructor) may take them too: the handler only
// touches an atomic.
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

// The ZEROSHARD_TEST_FAIL_AT step for `rank`, or -1.
int64_t TestFailStep(int rank) {
  const char* v = std::getenv("ZEROSHARD_TEST_FAIL_AT");
  int r = -1;
  long long k = -1;
  if (v == nullptr || std::sscanf(v, "%d:%lld", &r, &k) != 2 || r != rank) {
    return -1;
  }
  return k;
}

// The loss of `params` on the eval batch (file comment); nullopt when there
// is no such batch.
absl::StatusOr<std::optional<float>> EvalLoss(const TrainSpec& spec,
                                              const std::vector<float>& params,
                                              int64_t* tokens) {
  if (spec.data.empty()) return std::nullopt;
  ZS_ASSIGN_OR_RETURN(std::vector<std::string> files,
                      io::ExpandFilePatterns(spec.data));
  if (files.empty()) return std::nullopt;
  ZS_ASSIGN_OR_RETURN(io::TokenFile file, io::TokenFile::Open(files[0]));
  const int B = spec.zero.micro_batch, T = spec.zero.seq_len;
  const int64_t n = static_cast<int64_t>(B) * T;
  if (file.num_tokens() < n + 1) return std::nullopt;
  std::vector<uint16_t> raw(n + 1);
  ZS_RETURN_IF_ERROR(file.Read(0, raw.size(), raw.data()));
  std::vector<int> inputs(raw.begin(), raw.end() - 1);
  std::vector<int> targets(raw.begin() + 1, raw.end());
  std::vector<float> p = params;
  gpt2::ModelOptions mo;
  mo.threads = spec.zero.threads;
  mo.params = absl::MakeSpan(p);
  ZS_ASSIGN_OR_RETURN(auto model, gpt2::Model::Create(spec.config, B, T, mo));
  ZS_ASSIGN_OR_RETURN(float loss, model->Forward(inputs, targets));
  *tokens = n;
  return loss;
}

// --elastic: joins the membership and trains in its groups until the run
// is done or a signal makes it leave (result.left).
absl::StatusOr<elastic::ElasticResult> RunElasticWorker(
    const Args& a, const std::string& name, const config::EngineConfig& config,
    const TrainSpec& spec, ShardClient* client, const StepCallback& on_step,
    TrainProgress* progress) {
  elastic::ElasticSpec es;
  es.min_workers = static_cast<int>(a.min_workers);
  es.start_workers = static_cast<int>(a.start_workers);
  ZS_ASSIGN_OR_RETURN(es.policy, elastic::ParseBatchPolicy(a.batch_policy));
  if (a.elastic_timeout <= 0 || a.collective_timeout <= 0) {
    return absl::InvalidArgumentError(
        "--elastic_timeout and --collective_timeout must be positive");
  }
  es.timeout = absl::Seconds(a.elastic_timeout);
  es.comm.part_alignment = config.zeroshard.alignment;
  es.comm.op_timeout = absl::Seconds(a.collective_timeout);
  if (a.stop_signal != nullptr) {
    es.stop_requested = [stop = a.stop_signal] { return stop->load() != 0; };
  }
  ZS_RETURN_IF_ERROR(elastic::ValidateElasticSpec(es));
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
  return r;
}

absl::Status Run(const Args& a) {
  collective::UcxCommunicatorConfig cc;
  if (a.elastic) {
    cc.world_size =
        static_cast<int>(a.start_workers > 0 ? a.start_workers : a.min_workers);
  } else {
    ZS_ASSIGN_OR_RETURN(cc, collective::UcxCommunicatorConfig::FromEnv());
  }
  std::vector<std::string> warnings;
  ZS_ASSIGN_OR_RETURN(
      config::EngineConfig config,
      config::ParseDeepSpeedConfigFile(a.config, cc.world_size, &warnings));
  TrainSpec spec;
  spec.config = a.model;
  if (!a.model_file.empty()) {
    ZS_ASSIGN_OR_RETURN(io::ModelFileInfo info,
                        io::ReadModelFileInfo(a.model_file));
    spec.config = info.config;
    spec.init_file = a.model_file;
  }
  ZS_ASSIGN_OR_RETURN(spec.zero, config::ZeroOptionsFromConfig(
                                     config, spec.config,
                                     static_cast<int>(a.seq_len), &warnings));
  spec.zero.job_id = a.job_id;
  spec.zero.threads = static_cast<int>(a.threads);
  if (a.checkpoint_interval >= 0) {
    spec.zero.checkpoint_interval = static_cast<int>(a.checkpoint_interval);
    ZS_RETURN_IF_ERROR(engine::ValidateZeroOptions(spec.zero));
  }
  spec.steps = static_cast<int>(a.steps);
  spec.seed = static_cast<uint64_t>(a.seed);
  spec.init_std = a.init_std;
  spec.data = absl::StrSplit(a.data, ',', absl::SkipEmpty());
  const std::string name = a.worker_name.empty()
                               ? absl::StrCat(LocalHostname(), ":", getpid())
                               : a.worker_name;
  if (cc.rank == 0) {
    std::printf("config: %s\n", config::DescribeEngineConfig(config).c_str());
    for (const std::string& w : warnings) {
      std::printf("config warning: %s\n", w.c_str());
    }
    std::fflush(stdout);
  }

  cc.part_alignment = config.zeroshard.alignment;
  cc.port_file = a.port_file;
  metrics::Registry registry;  // outlives the client (its interceptors)
  metrics::AddProcessMetrics(&registry);
  WorkerMetrics worker_metrics(&registry, cc.rank, cc.world_size,
                               spec.zero.stage, spec.steps);
  std::unique_ptr<metrics::HttpExporter> metrics_http;
  if (a.metrics_port >= 0) {
    ZS_ASSIGN_OR_RETURN(
        metrics_http,
        metrics::HttpExporter::Start(
            a.metrics_host, static_cast<int>(a.metrics_port), &registry));
    std::printf("rank %d: metrics on http://%s/metrics\n", cc.rank,
                metrics_http->address().c_str());
    std::fflush(stdout);
  }
  std::unique_ptr<collective::Communicator> comm;
  if (!a.elastic) {
    ZS_ASSIGN_OR_RETURN(comm, collective::CreateUcxCommunicator(cc));
  }
  auto faults = std::make_shared<fault::FaultInjector>(a.faults);
  if (!a.faults.empty() && comm != nullptr) {
    comm = std::make_unique<collective::FaultyCommunicator>(std::move(comm),
                                                            faults);
  }
  std::unique_ptr<ShardClient> client;
  if (spec.zero.stage > 0) {
    ClientOptions o;
    o.addresses = absl::StrSplit(a.servers, ',', absl::SkipEmpty());
    if (o.addresses.empty()) o.addresses = config.zeroshard.server_addresses;
    o.interceptors = [&registry] {
      std::vector<std::unique_ptr<
          grpc::experimental::ClientInterceptorFactoryInterface>>
          v;
      v.push_back(metrics::ClientLatencyInterceptorFactory(&registry));
      return v;
    };
    if (o.addresses.empty()) {
      return absl::InvalidArgumentError(
          "stages 1-3 need shard servers: --servers or zeroshard.servers");
    }
    ZS_RETURN_IF_ERROR(ApplyClientSecurity(a.security, &o));
    AddClientFaultInjection(faults, &o);  // last: after authentication
    ZS_ASSIGN_OR_RETURN(client, ShardClient::Connect(o));
  }
  if (a.elastic && client == nullptr) {
    return absl::InvalidArgumentError(
        "--elastic needs stage 1-3 (the servers own the optimizer state)");
  }
  TrainProgress progress_now;  // rank and group size as they change
  progress_now.rank = comm != nullptr ? comm->rank() : 0;
  const int rank = progress_now.rank;
  std::ofstream metrics;
  if (!a.metrics_file.empty()) {
    const std::string path = absl::StrReplaceAll(
        a.metrics_file, {{"%r", a.elastic ? name : std::to_string(rank)}});
    metrics.open(path, std::ios::trunc);
    if (!metrics) {
      return absl::NotFoundError("cannot write --metrics_file " + path);
    }
    RunInfo info;
    info.rank = rank;
    info.world = cc.world_size;
    info.stage = spec.zero.stage;
    info.offload_param = spec.zero.offload_param_server;
    ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                        gpt2::ParamLayout::Create(spec.config));
    info.params = static_cast<int64_t>(layout.num_params());
    info.steps = spec.steps;
    info.micro_batch = spec.zero.micro_batch;
    info.seq_len = spec.zero.seq_len;
    info.grad_accum = spec.zero.gradient_accumulation_steps;
    metrics << StartRecord(info) << std::endl;
  }
  const int64_t fail_at = TestFailStep(rank);
  auto progress = [&](const engine::StepStats& s) {
    const int rank = progress_now.rank;
    worker_metrics.OnStep(s);
    if (metrics.is_open()) metrics << StepRecord(s) << std::endl;
    if (a.stats)
      std::printf("rank %d: %s\n", rank, engine::DescribeStepStats(s).c_str());
    if (rank == 0) {
      std::printf("step %d/%d loss %.6f lr %.3e norm %.4g%s tokens/s %.0f\n",
                  static_cast<int>(s.step), spec.steps, s.global_loss, s.lr,
                  s.grad_norm, s.skipped ? " (skipped: non-finite)" : "",
                  s.step_seconds > 0 ? s.tokens / s.step_seconds : 0.0);
    }
    std::fflush(stdout);
    if (s.step == fail_at) {
      std::fprintf(stderr, "rank %d: ZEROSHARD_TEST_FAIL_AT: exiting 3\n",
                   rank);
      std::fflush(stderr);
      _exit(3);
    }
  };
  TrainResult r;
  if (a.elastic) {
    ZS_ASSIGN_OR_RETURN(elastic::ElasticResult er,
                        RunElasticWorker(a, name, config, spec, client.get(),
                                         progress, &progress_now));
    if (er.left) {
      const char* why = SignalName(a.stop_signal->load());
      if (er.last_step < 0) {
        std::printf(
            "zeroshard-worker: %s left the job before training "
            "(%s)\n",
            name.c_str(), why);
      } else {
        std::printf("zeroshard-worker: %s left the job after step %lld (%s)\n",
                    name.c_str(), static_cast<long long>(er.last_step), why);
      }
      std::fflush(stdout);
      return absl::OkStatus();
    }
    r = std::move(er.train);
  } else {
    ZS_ASSIGN_OR_RETURN(r, RunTraining(spec, comm.get(), client.get(), progress,
                                       &progress_now));
  }
  const int final_rank = progress_now.rank;
  if (!a.faults.empty()) {
    std::printf("rank %d: %s\n", rank, faults->Summary().c_str());
    std::fflush(stdout);
  }
  if (final_rank == 0 && !a.save.empty()) {
    ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                        gpt2::ParamLayout::Create(spec.config));
    ZS_RETURN_IF_ERROR(io::WriteModelFile(a.save, layout, r.params.data()));
  }
  if (final_rank == 0 && metrics.is_open()) {
    int64_t tokens = 0;
    ZS_ASSIGN_OR_RETURN(std::optional<float> eval,
                        EvalLoss(spec, r.params, &tokens));
    if (eval.has_value()) {
      std::printf("eval loss %.6f (final parameters, first %lld tokens)\n",
                  *eval, static_cast<long long>(tokens));
      metrics << EndRecord(*eval, tokens) << std::endl;
    }
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace zeroshard::train

int main(int argc, char** argv) {
  zeroshard::TuneMallocForTransfers();
  zeroshard::train::Args a;
  int64_t max_seq_len = 16, vocab = 64, layers = 2, heads = 2, channels = 32;
  zeroshard::FlagSet flags(
      "zeroshard-worker",
      "zeroshard-worker --config ds_config.json [flags]\n\nOne rank of "
      "a ZeRO run of GPT-2 (rank from ZEROSHARD_RANK etc.).");
  flags.String("config", &a.config, "DeepSpeed JSON config (required)");
  flags.String("servers", &a.servers,
               "shard servers, comma-separated (default: the config's)");
  flags.String("data", &a.data,
               "token files or patterns, comma-separated (empty: synthetic)");
  flags.String("model_file", &a.model_file,
               "initial model (llm.c format); else the model flags below");
  flags.Int64("max_seq_len", &max_seq_len, "model maxT (no --model_file)");
  flags.Int64("vocab", &vocab, "vocabulary = padded (no --model_file)");
  flags.Int64("layers", &layers, "blocks (no --model_file)");
  flags.Int64("heads", &heads, "attention heads (no --model_file)");
  flags.Int64("channels", &channels, "channels (no --model_file)");
  flags.Int64("seq_len", &a.seq_len, "sequence length T");
  flags.Int64("steps", &a.steps, "optimizer steps");
  flags.Int64("seed", &a.seed, "seeded init and synthetic data");
  flags.Double("init_std", &a.init_std, "std of matrices at seeded init");
  flags.Int64("threads", &a.threads, "CPU kernel threads");
  flags.String("job_id", &a.job_id, "job id on the servers");
  flags.Int64("checkpoint_interval", &a.checkpoint_interval,
              "checkpoint every N steps (overrides the config's "
              "zeroshard.checkpoint_interval; the servers need "
              "--checkpoint_dir); resumes from the newest checkpoint and "
              "rolls back when a server restarts");
  zeroshard::AddClientSecurityFlags(&flags, &a.security);
  flags.String("save", &a.save, "rank 0 writes the final model here");
  flags.String("port_file", &a.port_file, "rank 0 writes its port here");
  flags.Bool("stats", &a.stats, "every rank prints its step stats");
  std::string fault_spec;
  flags.String("fault_spec", &fault_spec,
               "fault injection for tests (common/fault/fault_spec.h), e.g. "
               "'seed=7,drop=0.05,dup=0.05,delay=0.05:20ms,"
               "fail_at=AllReduce#3': RPCs to the servers can be dropped, "
               "failed, lost, duplicated or delayed, collectives failed or "
               "delayed; empty: $ZEROSHARD_FAULTS, else none");
  flags.String("metrics_file", &a.metrics_file,
               "JSON-lines step records of this rank (%r: the rank)");
  flags.String("metrics_host", &a.metrics_host,
               "address of the metrics endpoint (0.0.0.0: every interface)");
  flags.Int64("metrics_port", &a.metrics_port,
              "Prometheus metrics over HTTP at this port (GET /metrics); 0 "
              "picks a free one; -1: off");
  flags.Bool("elastic", &a.elastic,
             "join the job's membership (first server) and train in "
             "whatever worker group it forms; no launcher environment; "
             "needs stage 1-3 and --checkpoint_interval > 0; SIGTERM or "
             "SIGINT: leave the job at the next step boundary and exit 0 (a "
             "second one: exit at once)");
  flags.String("worker_name", &a.worker_name,
               "--elastic: this worker's name in the membership "
               "(default host:pid)");
  flags.Int64("min_workers", &a.min_workers,
              "--elastic: the fewest workers a group trains with");
  flags.Int64("start_workers", &a.start_workers,
              "--elastic: the first group waits for this many (0: "
              "--min_workers); the global batch is this × the config's "
              "gradient accumulation micro-batches");
  flags.String("batch_policy", &a.batch_policy,
               "--elastic, when the group size does not divide the global "
               "batch: rescale (keep the micro-batch, round the "
               "accumulation) or refuse (wait for a size that divides it)");
  flags.Double("elastic_timeout", &a.elastic_timeout,
               "--elastic: seconds to wait for a group to form");
  flags.Double("collective_timeout", &a.collective_timeout,
               "--elastic: seconds a collective waits for a silent peer "
               "before the group is re-formed without it");
  flags.ParseOrExit(argc, argv);
  auto faults = zeroshard::fault::FaultSpecFromFlagOrEnv(
      fault_spec, "ZEROSHARD_FAULTS", zeroshard::fault::Side::kWorker);
  if (!faults.ok()) {
    zeroshard::ExitWithError(flags.program(),
                             std::string(faults.status().message()));
  }
  a.faults = *faults;
  if (a.config.empty()) {
    std::fprintf(stderr, "zeroshard-worker: --config is required\n");
    return 2;
  }
  a.model = {static_cast<int>(max_seq_len), static_cast<int>(vocab),
             static_cast<int>(vocab),       static_cast<int>(layers),
             static_cast<int>(heads),       static_cast<int>(channels)};
  if (a.elastic) {
    // Before any thread starts (gRPC, UCX, metrics).
    zeroshard::train::HandleStopSignals();
    a.stop_signal = &zeroshard::train::stop_signal;
  }
  const absl::Status st = zeroshard::train::Run(a);
  if (!st.ok()) {
    std::fprintf(stderr, "zeroshard-worker: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
