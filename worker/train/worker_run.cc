#include "worker/train/worker_run.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "client/fault_interceptor.h"
#include "client/security.h"
#include "client/shard_client.h"
#include "common/cuda/device.h"
#include "common/env/env.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/rpc_metrics.h"
#include "common/status_macros.h"
#include "worker/collective/faulty_communicator.h"
#include "worker/collective/ucx_communicator.h"
#include "worker/config/ds_config.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/engine_model.h"
#include "worker/io/model_file.h"
#include "worker/train/eval_loss.h"
#include "worker/train/metrics_log.h"
#include "worker/train/monitor_writers.h"
#include "worker/train/rank_env.h"
#include "worker/train/run_metrics.h"
#include "worker/train/worker_metrics.h"

namespace zeroshard::train {
namespace {

// Stages 1-3: a client of --servers (else the config's), its RPCs timed in
// `registry` (which must outlive it) and faulted by `faults`. Stage 0: null.
absl::StatusOr<std::unique_ptr<ShardClient>> ConnectServers(
    const WorkerOptions& o, const config::EngineConfig& config,
    const TrainSpec& spec, metrics::Registry* registry,
    std::shared_ptr<fault::FaultInjector> faults) {
  if (spec.zero.stage == 0) return nullptr;
  ClientOptions co;
  co.addresses = absl::StrSplit(o.servers, ',', absl::SkipEmpty());
  if (co.addresses.empty()) co.addresses = config.zeroshard.server_addresses;
  if (co.addresses.empty()) {
    return absl::InvalidArgumentError(
        "stages 1-3 need shard servers: --servers or zeroshard.servers");
  }
  co.interceptors = [registry] {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        v;
    v.push_back(metrics::ClientLatencyInterceptorFactory(registry));
    return v;
  };
  ZS_RETURN_IF_ERROR(ApplyClientSecurity(o.train.security, &co));
  AddClientFaultInjection(std::move(faults), &co);  // last: after auth
  return ShardClient::Connect(co);
}

// --metrics_file with "%r" replaced, and its "start" record written.
absl::StatusOr<MetricsLog> OpenMetricsLog(const WorkerOptions& o,
                                          const TrainSpec& spec, int rank,
                                          int world) {
  const std::string who =
      o.elastic.elastic ? ElasticWorkerName(o.elastic) : std::to_string(rank);
  const std::string path = absl::StrReplaceAll(o.metrics_file, {{"%r", who}});
  absl::StatusOr<MetricsLog> log = MetricsLog::Create(DefaultEnv(), path);
  if (!log.ok()) {
    return absl::Status(
        log.status().code(),
        absl::StrCat("--metrics_file: ", log.status().message()));
  }
  RunInfo info;
  info.rank = rank;
  info.world = world;
  info.stage = spec.zero.stage;
  info.offload_param = spec.zero.offload_param_server;
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(spec.config));
  info.params = static_cast<int64_t>(layout.num_params());
  info.steps = spec.steps;
  info.micro_batch = spec.zero.micro_batch;
  info.seq_len = spec.zero.seq_len;
  info.grad_accum = spec.zero.gradient_accumulation_steps;
  ZS_RETURN_IF_ERROR(log->Append(StartRecord(info)));
  return log;
}

void PrintStep(const TrainSpec& spec, const engine::StepStats& s) {
  std::printf("step %d/%d loss %.6f lr %.3e norm %.4g%s tokens/s %.0f\n",
              static_cast<int>(s.step), spec.steps, s.global_loss, s.lr,
              s.grad_norm, s.skipped ? " (skipped: non-finite)" : "",
              s.step_seconds > 0 ? s.tokens / s.step_seconds : 0.0);
}

// "rank R: local rank L on GPU G of N (<name>, sm_<cc>, <n> MiB)"; nothing
// without a GPU (the model's creation then fails saying why).
void SayGpu(int rank, int local_rank) {
  const int count = cuda::DeviceCount();
  if (count < 1) return;
  const int gpu = gpt2::GpuForLocalRank(local_rank, count);
  // DescribeDevices: "<index>: <name>, sm_<cc>, <n> MiB" per line.
  const std::string prefix = absl::StrCat(gpu, ": ");
  std::string name;
  for (absl::string_view line : absl::StrSplit(cuda::DescribeDevices(), '\n')) {
    if (absl::StartsWith(line, prefix)) {
      name = std::string(line.substr(prefix.size()));
    }
  }
  std::printf("rank %d: local rank %d on GPU %d of %d (%s)\n", rank, local_rank,
              gpu, count, name.c_str());
  std::fflush(stdout);
}

}  // namespace

absl::Status RunWorker(const WorkerOptions& o, const WorkerHooks& hooks) {
  collective::UcxCommunicatorConfig cc;
  if (o.elastic.elastic) {
    cc.world_size = ElasticConfigWorld(o.elastic);
  } else {
    ZS_ASSIGN_OR_RETURN(cc, RankConfigFromEnv());
  }
  std::vector<std::string> warnings;
  ZS_ASSIGN_OR_RETURN(config::EngineConfig config,
                      ParseConfigForFlags(o.train, cc.world_size, &warnings));
  ZS_ASSIGN_OR_RETURN(TrainSpec spec,
                      TrainSpecFromFlags(o.train, config, &warnings));
  spec.local_rank = cc.local_rank;  // its GPU with --device=cuda
  if (spec.device == "cuda") SayGpu(cc.rank, cc.local_rank);
  if (spec.zero.stage > 0 && !o.servers.empty()) {
    // The servers this worker uses (--servers wins over the config's).
    const std::vector<std::string> used =
        absl::StrSplit(o.servers, ',', absl::SkipEmpty());
    config.zeroshard.num_servers = static_cast<int>(used.size());
  }
  if (cc.rank == 0) {
    std::printf("config: %s\n", config::DescribeEngineConfig(config).c_str());
    for (const std::string& w : warnings) {
      std::printf("config warning: %s\n", w.c_str());
    }
    std::fflush(stdout);
  }

  cc.part_alignment = config.zeroshard.alignment;
  cc.port_file = o.port_file;
  metrics::Registry registry;  // outlives the client (its interceptors)
  metrics::AddProcessMetrics(&registry);
  WorkerMetrics worker_metrics(&registry, cc.rank, cc.world_size,
                               spec.zero.stage, spec.steps);
  std::unique_ptr<metrics::HttpExporter> metrics_http;
  if (o.metrics_port >= 0) {
    ZS_ASSIGN_OR_RETURN(
        metrics_http,
        metrics::HttpExporter::Start(
            o.metrics_host, static_cast<int>(o.metrics_port), &registry));
    std::printf("rank %d: metrics on http://%s/metrics\n", cc.rank,
                metrics_http->address().c_str());
    std::fflush(stdout);
  }
  std::unique_ptr<collective::Communicator> comm;
  if (!o.elastic.elastic) {
    ZS_ASSIGN_OR_RETURN(comm, collective::CreateUcxCommunicator(cc));
  }
  auto faults = std::make_shared<fault::FaultInjector>(o.faults);
  if (!o.faults.empty() && comm != nullptr) {
    comm = std::make_unique<collective::FaultyCommunicator>(std::move(comm),
                                                            faults);
  }
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardClient> client,
                      ConnectServers(o, config, spec, &registry, faults));
  if (o.elastic.elastic && client == nullptr) {
    return absl::InvalidArgumentError(
        "--elastic needs stage 1-3 (the servers own the optimizer state)");
  }
  TrainProgress progress_now;  // rank and group size as they change
  progress_now.rank = comm != nullptr ? comm->rank() : 0;
  const int rank = progress_now.rank;
  std::optional<MetricsLog> metrics;
  if (!o.metrics_file.empty()) {
    ZS_ASSIGN_OR_RETURN(metrics, OpenMetricsLog(o, spec, rank, cc.world_size));
  }
  // A metrics file that fails mid-run is reported once and closed; the
  // run goes on.
  auto append = [&metrics, &progress_now](const std::string& record) {
    if (!metrics.has_value()) return;
    absl::Status s = metrics->Append(record);
    if (s.ok()) return;
    std::fprintf(stderr, "rank %d: --metrics_file: %s; no more records\n",
                 progress_now.rank, s.ToString().c_str());
    metrics.reset();
  };
  // DeepSpeed's tensorboard / csv_monitor files, written by rank 0; a
  // write error is reported once and that monitor closed.
  std::unique_ptr<FileMonitors> monitors;
  if (rank == 0 && config.monitor.any_file_monitor()) {
    ZS_ASSIGN_OR_RETURN(
        monitors,
        FileMonitors::Open(config.monitor,
                           config.precision == engine::Precision::kFp16,
                           config.batch.train_batch_size));
    std::printf("rank 0: monitors: %s\n", monitors->Describe().c_str());
  }
  // Rank 0 evaluates every --eval_every steps (eval_loss.h); elastic
  // workers only at the end (their rank 0 changes).
  std::optional<EvalSet> eval_set;
  std::optional<EvalResult> last_eval;  // and the step it was taken at
  int64_t last_eval_step = -1;
  const int64_t eval_period = EvalPeriod(o.train.eval_every, spec.steps);
  if (rank == 0 && !o.elastic.elastic) {
    ZS_ASSIGN_OR_RETURN(eval_set, OpenEvalSet(spec, o.train.val_data));
    if (eval_set.has_value() && eval_set->held_out) {
      std::printf(
          "eval: every %lld steps on %zu batches (%lld tokens) of "
          "held-out %s\n",
          static_cast<long long>(eval_period), eval_set->inputs.size(),
          static_cast<long long>(eval_set->tokens()), eval_set->file.c_str());
    } else if (eval_set.has_value()) {
      std::printf(
          "eval: no --val_data, so the eval loss is on the first "
          "%lld training tokens (zeroshard-tokenize --val_fraction "
          "writes a held-out file)\n",
          static_cast<long long>(eval_set->tokens()));
    }
    std::fflush(stdout);
  }
  auto after_step = [&](const engine::StepStats& s,
                        engine::ZeroEngine& engine) -> absl::Status {
    if (!eval_set.has_value() || !IsEvalStep(s.step, spec.steps, eval_period)) {
      return absl::OkStatus();
    }
    // An eval watches the run and never ends it: one that fails (the
    // servers' parameters unreadable while one restarts) is skipped.
    std::vector<float> params(engine.layout().num_params());
    absl::Status read = engine.ReadParameters(absl::MakeSpan(params));
    absl::StatusOr<EvalResult> result =
        read.ok() ? EvalLoss(spec, *eval_set, params) : read;
    if (!result.ok()) {
      std::printf("eval at step %lld skipped: %s\n",
                  static_cast<long long>(s.step),
                  result.status().ToString().c_str());
      std::fflush(stdout);
      return absl::OkStatus();
    }
    const EvalResult& e = *result;
    std::printf("eval loss %.6f at step %lld (%s, %lld tokens)\n", e.loss,
                static_cast<long long>(s.step),
                e.held_out ? "held-out" : "training data",
                static_cast<long long>(e.tokens));
    std::fflush(stdout);
    append(EvalRecord(s.step, e));
    last_eval = e;
    last_eval_step = s.step;
    return absl::OkStatus();
  };
  auto on_step = [&](const engine::StepStats& s) {
    const int rank = progress_now.rank;
    worker_metrics.OnStep(s);
    append(StepRecord(s));
    if (monitors != nullptr) {
      absl::Status m = monitors->OnStep(s);
      if (!m.ok()) std::fprintf(stderr, "rank 0: %s\n", m.ToString().c_str());
    }
    if (o.stats) {
      std::printf("rank %d: %s\n", rank, engine::DescribeStepStats(s).c_str());
    }
    if (rank == 0) PrintStep(spec, s);
    std::fflush(stdout);
    if (hooks.after_step) hooks.after_step(rank, s);
  };
  TrainResult r;
  if (o.elastic.elastic) {
    ZS_ASSIGN_OR_RETURN(std::optional<TrainResult> er,
                        RunElasticWorker(o.elastic, config, spec, client.get(),
                                         on_step, &progress_now));
    if (!er.has_value()) return absl::OkStatus();  // left the job
    r = *std::move(er);
  } else {
    ZS_ASSIGN_OR_RETURN(r, RunTraining(spec, comm.get(), client.get(), on_step,
                                       &progress_now, after_step));
  }
  if (!o.faults.empty()) {
    std::printf("rank %d: %s\n", rank, faults->Summary().c_str());
    std::fflush(stdout);
  }
  const bool final_rank0 = progress_now.rank == 0;  // elastic: may change
  if (final_rank0 && !o.train.save.empty()) {
    ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                        gpt2::ParamLayout::Create(spec.config));
    ZS_RETURN_IF_ERROR(
        io::WriteModelFile(o.train.save, layout, r.params.data()));
  }
  if (final_rank0 && metrics.has_value()) {
    // The last step's eval was of these parameters; else evaluate them.
    std::optional<EvalResult> eval;
    if (last_eval_step == spec.steps) eval = last_eval;
    if (!eval.has_value() && !eval_set.has_value()) {
      ZS_ASSIGN_OR_RETURN(eval_set, OpenEvalSet(spec, o.train.val_data));
    }
    if (!eval.has_value() && eval_set.has_value()) {
      ZS_ASSIGN_OR_RETURN(eval, EvalLoss(spec, *eval_set, r.params));
    }
    if (eval.has_value()) {
      std::printf("eval loss %.6f (final parameters, %lld %s tokens)\n",
                  eval->loss, static_cast<long long>(eval->tokens),
                  eval->held_out ? "held-out" : "training");
      append(EndRecord(eval->loss, eval->tokens));
    }
  }
  if (metrics.has_value()) ZS_RETURN_IF_ERROR(metrics->Sync());
  return absl::OkStatus();
}

}  // namespace zeroshard::train
