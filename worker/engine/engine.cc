#include "worker/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/helper_threads.h"
#include "common/status_macros.h"
#include "worker/engine/behind_gather.h"
#include "worker/engine/grad_pusher.h"
#include "worker/engine/grad_reducer.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/op_wait.h"
#include "worker/engine/precision.h"
#include "worker/engine/resident_grad_path.h"
#include "worker/engine/scaler_record.h"

namespace zeroshard::engine {

using collective::DType;

absl::StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(
    const ZeroOptions& options, const ModelDef& model,
    absl::Span<const float> initial_params, collective::Communicator* comm,
    ShardClient* client, const ElasticHooks* elastic) {
  ZS_RETURN_IF_ERROR(ValidateZeroOptions(options));
  if (comm == nullptr) {
    return absl::InvalidArgumentError("ZeroEngine: no communicator");
  }
  if (options.stage > 0 && client == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZeroEngine: stage ", options.stage, " needs a shard client"));
  }
  if (elastic != nullptr && options.server_aggregation) {
    return absl::InvalidArgumentError(
        "ZeroEngine: server_aggregation needs a fixed world size (the "
        "servers expect W·gas contributions per step); elastic worker groups "
        "reduce among themselves");
  }
  if (elastic != nullptr && options.delayed_update_from > 0) {
    return absl::InvalidArgumentError(
        "ZeroEngine: the delayed update (delayed_update_from) needs a fixed "
        "worker group; elastic groups recover from the servers' commits");
  }
  if (elastic != nullptr &&
      (options.stage == 0 || options.checkpoint_interval <= 0)) {
    return absl::InvalidArgumentError(
        "ZeroEngine: elastic worker groups need stage 1-3 and checkpoints "
        "(checkpoint_interval > 0)");
  }
  std::unique_ptr<ZeroEngine> e(new ZeroEngine(options, comm, client));
  ZS_RETURN_IF_ERROR(e->Init(model, initial_params, elastic));
  return e;
}

ZeroEngine::~ZeroEngine() {
  // The fetches and all-gathers in flight write into params_ (and
  // ahead_params_).
  if (committer_.joinable()) committer_.join();
  if (ahead_ != nullptr) (void)ahead_->Finish();
  (void)WaitBehind();
}

LossScalerOptions ZeroEngine::ScalerOptions(const ZeroOptions& o) {
  return ScalerOptionsFor(o.precision, o.loss_scaler);
}

absl::Status ZeroEngine::Init(const ModelDef& model,
                              absl::Span<const float> initial_params,
                              const ElasticHooks* elastic) {
  const ModelLayout& layout = model.layout;
  ZS_RETURN_IF_ERROR(ValidateModelLayout(layout));
  if (!model.create) {
    return absl::InvalidArgumentError("ZeroEngine: the model has no create");
  }
  const uint64_t n = layout.num_params();
  const bool needs_init = options_.stage == 0 || comm_->rank() == 0;
  if (needs_init && initial_params.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroEngine: initial_params has ", initial_params.size(),
                     " floats, the model has ", n));
  }
  params_.assign(n, 0.0f);
  grads_.assign(n, 0.0f);
  ModelContext mc;
  mc.threads = options_.threads;
  mc.bf16 = options_.precision == Precision::kBf16;
  mc.params = absl::MakeSpan(params_);
  mc.grads = absl::MakeSpan(grads_);
  if (options_.stage == 3) {
    ParamWindowOptions wo;
    wo.offload = options_.offload_param_server;
    wo.prefetch = options_.stage3_prefetch_units;
    wo.poison = options_.poison_released_params;
    wo.persistence_threshold = options_.stage3_param_persistence_threshold;
    wo.reuse_distance = options_.stage3_max_reuse_distance;
    mc.max_live_params = options_.stage3_max_live_parameters;
    // Without recovery a failed fetch ends the run wherever it shows, so
    // the partition's fetch may overlap the next forward.
    wo.lazy_fetch = options_.checkpoint_interval <= 0 && elastic == nullptr;
    window_ = std::make_unique<ParamWindow>(layout, wo, comm_, client_,
                                            absl::MakeSpan(params_));
    window_->set_stats(&stats_);
    mc.unit_hook = [this](const UnitEvent& e) {
      absl::Status s = window_->OnEvent(e);
      if (s.ok() && mixed() && e.kind == UnitEvent::Kind::kNeeded) {
        // The unit is complete here; rounding again is a no-op.
        RoundTo(options_.precision,
                absl::MakeSpan(params_).subspan(e.range.begin, e.range.size()));
      }
      return s;
    };
  }
  if ((options_.stage == 1 || options_.stage == 2) &&
      options_.checkpoint_interval <= 0 && elastic == nullptr) {
    behind_ = std::make_unique<BehindGather>(
        layout, options_.allgather_bucket_size, options_.precision, comm_,
        client_, absl::MakeSpan(params_));
    behind_->set_stats(&stats_);
    mc.unit_hook = [this](const UnitEvent& e) -> absl::Status {
      if (e.kind != UnitEvent::Kind::kNeeded) return absl::OkStatus();
      return behind_->Need(e.unit);
    };
    if (options_.delayed_update_from > 0) {
      ahead_params_.assign(n, 0.0f);
      ahead_ = std::make_unique<BehindGather>(
          layout, options_.allgather_bucket_size, options_.precision, comm_,
          client_, absl::MakeSpan(ahead_params_));
      ahead_->set_stats(&commit_stats_);
    }
  }
  ZS_ASSIGN_OR_RETURN(model_, model.create(mc));
  if (options_.stage == 0 && comm_->size() == 1 && !mixed()) {
    resident_ = model_->resident_optimizer();
  }
  if (resident_ != nullptr) {
    grad_path_ = std::make_unique<ResidentGradPath>(resident_, n);
  } else if (options_.server_aggregation) {
    grad_path_ = std::make_unique<GradPusher>(
        options_.reduce_bucket_size, comm_->part_alignment(),
        options_.overlap_comm, comm_->size(), comm_->rank(),
        options_.gradient_accumulation_steps, client_, absl::MakeSpan(grads_));
  } else {
    grad_path_ = std::make_unique<GradReducer>(
        options_.stage, options_.reduce_bucket_size, options_.overlap_comm,
        options_.gradient_accumulation_steps, comm_,
        options_.stage > 0 ? client_ : nullptr, absl::MakeSpan(grads_));
  }
  grad_path_->set_stats(&stats_);

  v1::ModelSpec spec =
      ZeroModelSpec(layout, options_, client_ ? client_->num_servers() : 1,
                    comm_->part_alignment());
  spec.set_contributions_per_step(grad_path_->contributions_per_step());
  if (options_.stage == 0) {
    std::copy(initial_params.begin(), initial_params.end(), params_.begin());
    if (mixed()) {
      master_ = params_;
      RoundTo(options_.precision, absl::MakeSpan(params_));
    }
    adamw_ = std::make_unique<LocalAdamW>(spec, layout);
    if (resident_ != nullptr) return resident_->Enable();
    return absl::OkStatus();
  }
  StepProtocolOptions po;
  po.checkpoint_interval = options_.checkpoint_interval;
  po.recovery_timeout_seconds = options_.recovery_timeout_seconds;
  if (elastic != nullptr) {
    po.elastic = true;
    po.world_epoch = elastic->world_epoch;
    po.min_epoch = elastic->min_epoch;
  }
  po.on_server_wait = [this](double seconds) {
    protocol_stats_->server_control.Add(0, 0);
    protocol_stats_->server_wait_seconds += seconds;
  };
  protocol_ = std::make_unique<StepProtocol>(client_, &group_, po);
  ZS_ASSIGN_OR_RETURN(
      Outcome start,
      protocol_->Start(
          spec,
          [&] {
            return client_->WriteParameters(Range{0, n}, initial_params.data());
          },
          StateNow()));
  ZS_RETURN_IF_ERROR(Apply(start).status());
  ZS_RETURN_IF_ERROR(group_.Barrier());
  return Refresh();
}

absl::StatusOr<bool> ZeroEngine::Apply(const Outcome& o) {
  if (!o.moved()) return false;
  restored_ = o.state;
  // Hysteresis 0: not recorded (a run without dynamic fp16), start afresh.
  LossScalerState record;
  record.scale = restored_.loss_scale();
  record.hysteresis_left = restored_.loss_scale_hysteresis();
  record.iteration = restored_.loss_scale_iteration();
  record.last_overflow_iteration = restored_.loss_scale_last_overflow();
  ZS_ASSIGN_OR_RETURN(scaler_,
                      ScalerFromRecord(ScalerOptions(options_), record));
  step_ = static_cast<int64_t>(restored_.step());
  updates_ = static_cast<int64_t>(restored_.updates());
  micro_ = 0;
  step_start_ = -1;
  last_step_end_ = -1;
  if (o.kind == Outcome::Kind::kContinued) {
    continued_ = true;
  } else {
    ++rollbacks_;
    rollback_reason_ = std::string(o.error.message());
  }
  return true;
}

void ZeroEngine::set_data_position(int64_t epoch, int64_t shard,
                                   int64_t offset) {
  data_position_.set_data_epoch(epoch);
  data_position_.set_data_shard(shard);
  data_position_.set_data_offset(offset);
}

v1::TrainerState ZeroEngine::StateAfter(uint64_t step, bool skip) const {
  v1::TrainerState after = StateNow();
  after.set_step(step + 1);
  after.set_updates(static_cast<uint64_t>(updates_) + (skip ? 0 : 1));
  return after;
}

v1::TrainerState ZeroEngine::StateNow() const {
  v1::TrainerState s = data_position_;
  s.set_step(static_cast<uint64_t>(step_));
  s.set_updates(static_cast<uint64_t>(updates_));
  const LossScalerState record = RecordOf(scaler_);  // 0s unless dynamic
  s.set_loss_scale(record.scale);
  s.set_loss_scale_hysteresis(record.hysteresis_left);
  s.set_loss_scale_iteration(record.iteration);
  s.set_loss_scale_last_overflow(record.last_overflow_iteration);
  s.set_seed(options_.seed);
  s.set_world_size(static_cast<uint32_t>(comm_->size()));
  s.set_micro_batch(static_cast<uint32_t>(options_.micro_batch));
  s.set_seq_len(static_cast<uint32_t>(options_.seq_len));
  s.set_gradient_accumulation_steps(
      static_cast<uint32_t>(options_.gradient_accumulation_steps));
  s.set_lr(options_.lr_schedule.lr);
  s.set_data(options_.data);
  return s;
}

void ZeroEngine::ResetStats() {
  stats_ = StepStats();
  loss_sum_ = 0;
  step_start_ = NowSeconds();
}

absl::StatusOr<float> ZeroEngine::Forward(const MicroBatch& batch) {
  if (micro_ == 0 && step_start_ < 0) ResetStats();
  const double start = NowSeconds();
  const double waits = stats_.comm_wait_seconds + stats_.server_wait_seconds;
  if (micro_ == 0) model_->BeginStep();
  absl::StatusOr<float> loss = model_->Forward(batch);
  const double compute =
      NowSeconds() - start -
      (stats_.comm_wait_seconds + stats_.server_wait_seconds - waits);
  stats_.compute_seconds += compute;
  stats_.phases.forward += compute;
  if (loss.ok()) loss_sum_ += *loss;
  return loss;
}

absl::Status ZeroEngine::Backward() {
  // Every all-gather behind the forward issued before backward's
  // collectives (behind_gather.h).
  if (behind_ != nullptr) behind_->JoinIssuer();
  // The delayed update: the previous step's commit (this step's pushes
  // follow it) and its all-gathers issued.
  ZS_RETURN_IF_ERROR(JoinCommit());
  const double start = NowSeconds();
  const double waits = stats_.comm_wait_seconds + stats_.server_wait_seconds;
  // Before the gradients are zeroed: the last micro-batch's pushes may
  // still read them.
  grad_path_->BeginMicroBatch(micro_, static_cast<uint64_t>(step_), epoch());
  // A resident optimizer's gradients accumulate in the model over the
  // step's micro-batches.
  if (resident_ == nullptr || micro_ == 0) model_->ZeroGrad();
  const float scale = static_cast<float>(scaler_.scale());
  absl::Status s = model_->Backward([&](const GradReady& seg) {
    if (mixed()) {
      // As if backward had produced 16-bit gradients of the scaled loss.
      ScaleAndRoundTo(
          options_.precision, scale,
          absl::MakeSpan(grads_).subspan(seg.range.begin, seg.range.size()));
    }
    grad_path_->OnSegment(seg);
  });
  stats_.backward_end_seconds = NowSeconds();
  const double compute =
      stats_.backward_end_seconds - start -
      (stats_.comm_wait_seconds + stats_.server_wait_seconds - waits);
  stats_.compute_seconds += compute;
  stats_.phases.backward += compute;
  ZS_RETURN_IF_ERROR(s);
  if (window_ != nullptr) ZS_RETURN_IF_ERROR(window_->EndMicroBatch());
  return grad_path_->EndMicroBatch();
}

absl::Status ZeroEngine::Step(bool* stepped) {
  if (stepped != nullptr) *stepped = false;
  if (++micro_ < options_.gradient_accumulation_steps) return absl::OkStatus();
  micro_ = 0;
  ZS_RETURN_IF_ERROR(OptimizerStep());
  if (stepped != nullptr) *stepped = true;
  return absl::OkStatus();
}

absl::Status ZeroEngine::ExchangeNormAndLoss(double squares,
                                             std::vector<double>* partials,
                                             double* loss_sum) {
  const int W = comm_->size();
  const double mine[2] = {squares, loss_sum_};
  std::vector<double> all(2 * W);
  ZS_RETURN_IF_ERROR(group_.AllGather(mine, sizeof(mine), all.data()));
  partials->assign(W, 0.0);
  *loss_sum = 0;
  for (int r = 0; r < W; ++r) {
    (*partials)[r] = all[2 * r];
    *loss_sum += all[2 * r + 1];
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::LocalStep(const StepDecision& d, double lr) {
  if (d.skip) return absl::OkStatus();
  if (resident_ != nullptr) {
    return resident_->AdamW(adamw_->Updates(d.grad_scale, lr));
  }
  // fp32: the parameters are their own master copy.
  std::vector<float>& master = mixed() ? master_ : params_;
  adamw_->Step(absl::MakeSpan(master), grad_path_->full(), d.grad_scale, lr);
  if (mixed()) {
    std::copy(master_.begin(), master_.end(), params_.begin());
    RoundTo(options_.precision, absl::MakeSpan(params_));
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::OptimizerStep() {
  const int W = comm_->size();
  const int gas = options_.gradient_accumulation_steps;
  const uint64_t step = static_cast<uint64_t>(step_);
  grad_path_->FinishStep(
      static_cast<float>(1.0 / (static_cast<double>(W) * gas)));
  // This rank's gradient onto the servers (nothing at stage 0).
  double mark = NowSeconds();
  const auto phase_ends = [&mark](double* phase) {
    const double now = NowSeconds();
    *phase += now - mark;
    mark = now;
  };
  // The sum of squares (a pass over this rank's gradient) beside the push
  // wait where the path allows it.
  std::future<double> squares;
  if (grad_path_->sum_beside_push()) {
    squares = HelperThreads::Default().Async(
        [this] { return grad_path_->SumSquares(); });
  }
  const absl::Status pushed = grad_path_->Push(step, epoch());
  phase_ends(&stats_.phases.push);
  const double my_squares =
      squares.valid() ? squares.get() : grad_path_->SumSquares();
  std::vector<double> partials;
  double loss_sum = 0;
  ZS_RETURN_IF_ERROR(ExchangeNormAndLoss(my_squares, &partials, &loss_sum));
  phase_ends(&stats_.phases.sync);
  StepDecision d;
  const bool on_servers = grad_path_->summed_on_servers();
  if (on_servers) {
    ZS_ASSIGN_OR_RETURN(
        Outcome o, protocol_->DecideOnServers(step, pushed, scaler_.scale(),
                                              options_.gradient_clipping, &d));
    ZS_ASSIGN_OR_RETURN(bool moved, Apply(o));
    if (moved) return Refresh();  // the step is redone from there
  } else {
    d = DecideStep(partials, /*any_nonfinite=*/false, scaler_.scale(),
                   options_.gradient_clipping);
  }
  // Every rank has the same decision, so every scaler moves alike. Before
  // the commit: the state committed with the step is the one after it.
  stats_.loss_scale = scaler_.scale();
  ZS_RETURN_IF_ERROR(scaler_.Update(d.skip));
  stats_.next_loss_scale = scaler_.scale();
  const double lr =
      d.skip ? 0.0 : UpdateLearningRate(options_.lr_schedule, updates_);
  stats_.grad_norm = d.grad_norm;
  // The clip coefficient alone (grad_scale also divides by the loss scale).
  stats_.clip_coef =
      d.skip ? 1.0f : ClipCoefficient(d.grad_norm, options_.gradient_clipping);
  stats_.skipped = d.skip;
  stats_.lr = lr;
  bool restored_this_step = false;
  if (protocol_ == nullptr) {    // stage 0
    ZS_RETURN_IF_ERROR(pushed);  // a resident optimizer's device error
    ZS_RETURN_IF_ERROR(LocalStep(d, lr));
    phase_ends(&stats_.phases.server_step);
    ++step_;
  } else if (delayed(step)) {
    // The next step trains on the parameters of the previous commit (the
    // first time: those it has, behind_'s refresh complete).
    ZS_RETURN_IF_ERROR(WaitBehind());
    ZS_RETURN_IF_ERROR(FinishAhead());
    if (ahead_pending_) {
      std::copy(ahead_params_.begin(), ahead_params_.end(), params_.begin());
      ahead_pending_ = false;
    }
    DelayedCommit(step, pushed, d, lr, StateAfter(step, d.skip));
    ++step_;
  } else {
    ZS_ASSIGN_OR_RETURN(
        Outcome o, protocol_->Commit(step, pushed, d, lr,
                                     StateAfter(step, d.skip), on_servers));
    phase_ends(&stats_.phases.server_step);
    ZS_ASSIGN_OR_RETURN(bool moved, Apply(o));
    if (moved) return Refresh();  // the step is redone from there
    ++step_;
    const int64_t committed = step_;
    const int before = rollbacks_;
    ZS_RETURN_IF_ERROR(Refresh());
    if (rollbacks_ != before) {
      // Rolled back to an earlier step: it is redone from there. Rolled
      // back to the checkpoint of this very step: its restored state
      // already counts this step's update; only the stats remain.
      if (step_ != committed) return absl::OkStatus();
      restored_this_step = true;
    }
  }
  if (!d.skip && !restored_this_step) ++updates_;
  // Bytes held (step_stats.h).
  const uint64_t n = params_.size();
  stats_.step = step_;
  stats_.loss = loss_sum_ / gas;
  stats_.global_loss = loss_sum / (static_cast<double>(W) * gas);
  stats_.tokens =
      static_cast<uint64_t>(W) * gas * options_.micro_batch * options_.seq_len;
  stats_.param_bytes = window_ != nullptr ? window_->partition_bytes() : 4 * n;
  stats_.param_bytes += 4 * ahead_params_.size();
  stats_.grad_bytes = grad_path_->acc_bytes();
  stats_.optimizer_bytes = (resident_ != nullptr ? 8 * n
                            : adamw_             ? adamw_->state_bytes()
                                                 : 0) +
                           4 * master_.size();
  stats_.device_bytes = model_->device_bytes();
  stats_.activation_bytes = model_->activation_bytes();
  const double end = NowSeconds();
  stats_.step_seconds = end - step_start_;
  stats_.period_seconds =
      last_step_end_ >= 0 ? end - last_step_end_ : stats_.step_seconds;
  last_step_end_ = end;
  last_stats_ = stats_;
  step_start_ = -1;
  return absl::OkStatus();
}

absl::Status ZeroEngine::Refresh() {
  for (int attempt = 0;; ++attempt) {
    ZS_ASSIGN_OR_RETURN(Outcome o, protocol_->AfterFetch(FetchOwn()));
    if (o.kind != Outcome::Kind::kOk) {
      ZS_RETURN_IF_ERROR(Apply(o).status());  // a roll back: fetch again
      if (attempt < 5) {
        if (o.kind == Outcome::Kind::kRetry) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        continue;
      }
      if (o.kind == Outcome::Kind::kRetry) return o.error;
      return absl::AbortedError("parameters could not be fetched");
    }
    if (window_ != nullptr || behind()) return absl::OkStatus();
    const double waited = stats_.comm_wait_seconds;
    ZS_RETURN_IF_ERROR(WaitOp(
        comm_->AllGather(params_.data(), params_.size(), DType::kFloat32),
        &stats_.all_gather, &stats_.comm_wait_seconds));
    stats_.phases.all_gather_wait += stats_.comm_wait_seconds - waited;
    RoundTo(options_.precision, absl::MakeSpan(params_));
    return absl::OkStatus();
  }
}

absl::Status ZeroEngine::FetchOwn() {
  const double start = NowSeconds();
  absl::Status s = FetchOwnParts();
  stats_.phases.gather += NowSeconds() - start;
  return s;
}

absl::Status ZeroEngine::FetchOwnParts() {
  if (window_ != nullptr) return window_->FetchPartition();
  if (behind()) return behind_->Start(static_cast<uint64_t>(step_));
  const uint64_t n = params_.size();
  const Range slice = comm_->PartRange(n, comm_->rank());
  uint64_t got = 0;
  if (slice.empty()) return absl::OkStatus();
  const double start = NowSeconds();
  ZS_RETURN_IF_ERROR(client_->Gather(slice, v1::DTYPE_FP32,
                                     params_.data() + slice.begin, &got));
  stats_.server_wait_seconds += NowSeconds() - start;
  stats_.server_gather.Add(0, 4 * slice.size());
  if (got != static_cast<uint64_t>(step_)) {
    return absl::AbortedError(absl::StrCat("gathered parameters of step ", got,
                                           ", expected ", step_));
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::WaitBehind() {
  return behind_ != nullptr ? behind_->Finish() : absl::OkStatus();
}

namespace {
void AddTraffic(const Traffic& from, Traffic* to) {
  to->ops += from.ops;
  to->bytes_sent += from.bytes_sent;
  to->bytes_received += from.bytes_received;
}
}  // namespace

void ZeroEngine::DelayedCommit(uint64_t step, absl::Status pushed,
                               StepDecision d, double lr,
                               v1::TrainerState after) {
  // The thread's waits and traffic go to commit_stats_ until JoinCommit.
  protocol_stats_ = &commit_stats_;
  group_.set_stats(&commit_stats_);
  ahead_pending_ = true;
  committer_ = std::thread([this, step, pushed = std::move(pushed), d, lr,
                            after = std::move(after)] {
    absl::StatusOr<Outcome> o =
        protocol_->Commit(step, pushed, d, lr, after, /*prepared=*/false);
    absl::Status s = o.status();
    if (s.ok() && o->kind != Outcome::Kind::kOk) {
      s = absl::InternalError(absl::StrCat(
          "delayed update: the commit of step ", step,
          " moved the job, which needs recovery (not used with it)"));
    }
    if (s.ok()) s = ahead_->Start(step + 1);
    commit_status_ = s;
  });
}

absl::Status ZeroEngine::JoinCommit() {
  // A failed commit stays the answer: the engine is broken then.
  if (!committer_.joinable()) return commit_status_;
  const double start = NowSeconds();
  committer_.join();
  ahead_->JoinIssuer();
  const double waited = NowSeconds() - start;
  stats_.server_wait_seconds += waited;
  stats_.phases.server_step += waited;
  AddTraffic(commit_stats_.broadcast, &stats_.broadcast);
  AddTraffic(commit_stats_.server_control, &stats_.server_control);
  AddTraffic(commit_stats_.server_gather, &stats_.server_gather);
  commit_stats_ = StepStats();
  protocol_stats_ = &stats_;
  group_.set_stats(&stats_);
  return commit_status_;
}

absl::Status ZeroEngine::FinishAhead() {
  if (!ahead_pending_) return absl::OkStatus();
  ZS_RETURN_IF_ERROR(JoinCommit());
  // ahead_'s waits (this thread's) into stats_.
  absl::Status s = ahead_->Finish();
  stats_.phases.gather += commit_stats_.phases.gather;
  stats_.phases.all_gather_wait += commit_stats_.phases.all_gather_wait;
  stats_.server_wait_seconds += commit_stats_.server_wait_seconds;
  stats_.comm_wait_seconds += commit_stats_.comm_wait_seconds;
  AddTraffic(commit_stats_.all_gather, &stats_.all_gather);
  commit_stats_ = StepStats();
  return s;
}

absl::Status ZeroEngine::ReadParameters(absl::Span<float> out) {
  ZS_RETURN_IF_ERROR(WaitBehind());
  if (out.size() != params_.size()) {
    return absl::InvalidArgumentError("ReadParameters: wrong size");
  }
  if (ahead_pending_) {
    // The delayed update: the servers' newest are the commit in flight;
    // params_ keeps what the next step trains on.
    ZS_RETURN_IF_ERROR(FinishAhead());
    if (!mixed()) {
      std::copy(ahead_params_.begin(), ahead_params_.end(), out.begin());
      return absl::OkStatus();
    }
  }
  if (resident_ != nullptr) return resident_->ReadParameters(out);
  // fp16/bf16: params_ holds the rounded copy; the master weights are
  // master_ (stage 0) or on the servers.
  if (protocol_ == nullptr && mixed()) {
    std::copy(master_.begin(), master_.end(), out.begin());
    return absl::OkStatus();
  }
  if (window_ == nullptr && !mixed()) {
    std::copy(params_.begin(), params_.end(), out.begin());
    return absl::OkStatus();
  }
  return client_->Gather(Range{0, params_.size()}, v1::DTYPE_FP32, out.data());
}

}  // namespace zeroshard::engine
