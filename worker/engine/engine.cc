#include "worker/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/rollback.h"
#include "common/status_macros.h"
#include "worker/engine/clip.h"
#include "worker/engine/lr_schedule.h"
#include "worker/engine/op_wait.h"
#include "worker/engine/precision.h"
#include "worker/engine/zero_plan.h"

namespace zeroshard::engine {
namespace {

using collective::DType;

// Floats per rank in the step exchange (sum of squares and loss, two
// doubles): a multiple of the part alignment, so that part r of W·slot
// floats is rank r's slot.
uint64_t ExchangeSlot(uint32_t alignment) {
  return alignment * ((4 + alignment - 1) / alignment);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ZeroEngine>> ZeroEngine::Create(
    const ZeroOptions& options, const gpt2::Config& config,
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
  if (elastic != nullptr &&
      (options.stage == 0 || options.checkpoint_interval <= 0)) {
    return absl::InvalidArgumentError(
        "ZeroEngine: elastic worker groups need stage 1-3 and checkpoints "
        "(checkpoint_interval > 0)");
  }
  std::unique_ptr<ZeroEngine> e(new ZeroEngine(options, comm, client, elastic));
  if (elastic != nullptr) e->epoch_ = elastic->min_epoch;
  ZS_RETURN_IF_ERROR(e->Init(config, initial_params));
  return e;
}

ZeroEngine::~ZeroEngine() = default;

engine::LossScalerOptions ZeroEngine::ScalerOptions(const ZeroOptions& o) {
  if (o.precision == engine::Precision::kFp16) return o.loss_scaler;
  return engine::LossScalerOptions();  // static, scale 1
}

absl::Status ZeroEngine::RestoreScaler(const v1::TrainerState& state) {
  if (state.loss_scale_hysteresis() == 0) {
    // Not recorded (a run without dynamic fp16): start afresh.
    scaler_ = engine::LossScaler(ScalerOptions(options_));
    return absl::OkStatus();
  }
  engine::LossScalerState s;
  s.scale = state.loss_scale();
  s.hysteresis_left = state.loss_scale_hysteresis();
  s.iteration = state.loss_scale_iteration();
  s.last_overflow_iteration = state.loss_scale_last_overflow();
  return scaler_.Restore(s);
}

absl::Status ZeroEngine::Init(const gpt2::Config& config,
                              absl::Span<const float> initial_params) {
  ZS_ASSIGN_OR_RETURN(gpt2::ParamLayout layout,
                      gpt2::ParamLayout::Create(config));
  const uint64_t n = layout.num_params();
  const bool needs_init = options_.stage == 0 || comm_->rank() == 0;
  if (needs_init && initial_params.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZeroEngine: initial_params has ", initial_params.size(),
                     " floats, the model has ", n));
  }
  params_.assign(n, 0.0f);
  grads_.assign(n, 0.0f);
  gpt2::ModelOptions mo;
  mo.threads = options_.threads;
  mo.params = absl::MakeSpan(params_);
  mo.grads = absl::MakeSpan(grads_);
  if (options_.stage == 3) {
    ParamWindowOptions wo;
    wo.offload = options_.offload_param_server;
    wo.prefetch = options_.stage3_prefetch_units;
    wo.poison = options_.poison_released_params;
    wo.persistence_threshold = options_.stage3_param_persistence_threshold;
    window_ = std::make_unique<ParamWindow>(layout, wo, comm_, client_,
                                            absl::MakeSpan(params_));
    window_->set_stats(&stats_);
    mo.param_hook = [this](const gpt2::ParamEvent& e) {
      absl::Status s = window_->OnEvent(e);
      if (s.ok() && mixed() && e.kind == gpt2::ParamEvent::Kind::kNeeded) {
        // The unit is complete here; rounding again is a no-op.
        engine::RoundTo(options_.precision, absl::MakeSpan(params_).subspan(
                                                e.range.begin, e.range.size()));
      }
      return s;
    };
  }
  ZS_ASSIGN_OR_RETURN(model_, gpt2::Model::Create(config, options_.micro_batch,
                                                  options_.seq_len, mo));
  if (options_.server_aggregation) {
    pusher_ = std::make_unique<GradPusher>(
        options_.reduce_bucket_size, comm_->part_alignment(),
        options_.overlap_comm, comm_->size(), comm_->rank(),
        options_.gradient_accumulation_steps, client_, absl::MakeSpan(grads_));
    pusher_->set_stats(&stats_);
  } else {
    reducer_ = std::make_unique<GradReducer>(
        options_.stage, options_.reduce_bucket_size, options_.overlap_comm,
        comm_, absl::MakeSpan(grads_));
    reducer_->set_stats(&stats_);
  }

  v1::ModelSpec spec =
      ZeroModelSpec(layout, options_, client_ ? client_->num_servers() : 1,
                    comm_->part_alignment());
  if (pusher_ != nullptr) {
    spec.set_contributions_per_step(GradPusher::Contributions(
        comm_->size(), options_.gradient_accumulation_steps));
  }
  if (options_.stage == 0) {
    std::copy(initial_params.begin(), initial_params.end(), params_.begin());
    if (mixed()) {
      master_ = params_;
      engine::RoundTo(options_.precision, absl::MakeSpan(params_));
    }
    adamw_ = std::make_unique<LocalAdamW>(spec, layout);
    return absl::OkStatus();
  }
  ZS_RETURN_IF_ERROR(client_->RegisterModel(spec));
  bool resumed = false;
  if (recovery()) ZS_RETURN_IF_ERROR(Decide(absl::OkStatus(), true, &resumed));
  if (!resumed) {
    absl::Status written;
    if (comm_->rank() == 0) written = WriteInitial(spec, initial_params);
    if (!recovery()) {
      ZS_RETURN_IF_ERROR(written);
    } else {
      // Every rank learns the outcome (no rank is left in a collective).
      ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(written));
      if (!all_ok) {
        ZS_RETURN_IF_ERROR(written);
        return absl::AbortedError("rank 0 could not write the parameters");
      }
    }
  }
  StepStats scratch;
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->Barrier(), &scratch.broadcast, &scratch.comm_wait_seconds));
  return Refresh();
}

absl::Status ZeroEngine::WriteInitial(const v1::ModelSpec& spec,
                                      absl::Span<const float> initial) {
  const Range all{0, params_.size()};
  if (!recovery()) return client_->WriteParameters(all, initial.data());
  // Then checkpoint step 0, so that a crash before the first interval
  // recovers. A server restarted meanwhile comes back without a model:
  // register it again and start over.
  absl::Status s;
  for (int attempt = 0; attempt < 3; ++attempt) {
    s = client_->RegisterModel(spec);
    if (s.ok()) s = client_->WriteParameters(all, initial.data());
    if (s.ok()) {
      const v1::TrainerState state = StateNow();
      s = client_->Checkpoint(0, &state).status();
    }
    if (s.ok()) return s;
    ZS_RETURN_IF_ERROR(
        ViewServers(client_, options_.recovery_timeout_seconds).status());
  }
  return s;
}

void ZeroEngine::set_data_position(int64_t epoch, int64_t shard,
                                   int64_t offset) {
  data_position_.set_data_epoch(epoch);
  data_position_.set_data_shard(shard);
  data_position_.set_data_offset(offset);
}

v1::TrainerState ZeroEngine::StateNow() const {
  v1::TrainerState s = data_position_;
  s.set_step(static_cast<uint64_t>(step_));
  s.set_updates(static_cast<uint64_t>(updates_));
  const engine::LossScalerState scaler = scaler_.state();
  s.set_loss_scale(scaler.scale);
  if (scaler_.dynamic()) {
    s.set_loss_scale_hysteresis(scaler.hysteresis_left);
    s.set_loss_scale_iteration(scaler.iteration);
    s.set_loss_scale_last_overflow(scaler.last_overflow_iteration);
  }
  s.set_seed(seed_);
  return s;
}

absl::StatusOr<bool> ZeroEngine::AllOk(const absl::Status& mine) {
  const int W = comm_->size();
  const uint64_t slot = ExchangeSlot(comm_->part_alignment());
  std::vector<float> buf(slot * W, 0.0f);
  const uint32_t code = static_cast<uint32_t>(mine.code());
  std::memcpy(buf.data() + comm_->PartRange(buf.size(), comm_->rank()).begin,
              &code, sizeof(code));
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->AllGather(buf.data(), buf.size(), DType::kFloat32),
             &stats_.all_gather, &stats_.comm_wait_seconds));
  for (int r = 0; r < W; ++r) {
    uint32_t theirs;
    std::memcpy(&theirs, buf.data() + comm_->PartRange(buf.size(), r).begin,
                sizeof(theirs));
    if (theirs != 0) return false;
  }
  return true;
}

absl::Status ZeroEngine::Decide(const absl::Status& leader_status,
                                bool at_start, bool* rolled_back,
                                bool* healthy) {
  *rolled_back = false;
  constexpr uint64_t kRolledBack = 1000, kHealthy = 1001, kContinued = 1002;
  // The outcome as raw bits: code, then the state to roll back to, then
  // the leader's membership epoch.
  struct Word {
    uint64_t code, step, updates, data_epoch, data_shard, data_offset, epoch,
        seed;
    double loss_scale;
    int64_t scale_hysteresis, scale_iteration, scale_last_overflow;
    uint64_t world;
  } w{};
  std::optional<v1::TrainerState> to;  // leader: the state to move to
  absl::Status err = leader_status;
  if (comm_->rank() == 0 && (at_start || !leader_status.ok())) {
    absl::StatusOr<ServerView> view =
        ViewServers(client_, options_.recovery_timeout_seconds);
    bool roll = false;
    if (!view.ok()) {
      err = view.status();
    } else if (at_start && elastic_ && (to = ContinueState(*view))) {
      w.code = kContinued;
    } else if (at_start) {
      roll = std::any_of(view->steps.begin(), view->steps.end(),
                         [](uint64_t s) { return s != 0; }) ||
             !CommonCheckpoints(view->checkpoints).empty();
    } else {
      roll = NeedsRollback(*view, incarnations_);
    }
    if (view.ok()) incarnations_ = view->incarnations;
    if (view.ok() && !at_start && !roll) {
      w.code = kHealthy;  // a transient failure: the phase may be retried
      err = absl::AbortedError(absl::StrCat(
          leader_status.message(), " (the servers are up, at step ",
          view->steps[0], ", none restarted)"));
    }
    if (view.ok()) w.epoch = NextEpoch(*view, epoch_);
    if (roll) {
      absl::StatusOr<v1::TrainerState> state =
          RollBack(client_, *view, w.epoch);
      if (state.ok()) {
        w.code = kRolledBack;
        to = *state;
      } else {
        err = state.status();
      }
    }
    if (to.has_value()) {
      w.step = to->step();
      w.updates = to->updates();
      w.data_epoch = static_cast<uint64_t>(to->data_epoch());
      w.data_shard = static_cast<uint64_t>(to->data_shard());
      w.data_offset = static_cast<uint64_t>(to->data_offset());
      w.seed = to->seed();
      w.loss_scale = to->loss_scale();
      w.scale_hysteresis = to->loss_scale_hysteresis();
      w.scale_iteration = to->loss_scale_iteration();
      w.scale_last_overflow = to->loss_scale_last_overflow();
    }
  }
  if (comm_->rank() == 0 && elastic_ && elastic_->world_epoch) {
    w.world = elastic_->world_epoch();
  }
  if (w.code != kRolledBack && w.code != kHealthy && w.code != kContinued) {
    w.code = static_cast<uint64_t>(err.code());
  }
  ZS_RETURN_IF_ERROR(BroadcastFromLeader(&w, sizeof(Word)));
  world_epoch_ = w.world;
  if (w.code == kRolledBack || w.code == kContinued) {
    restored_.Clear();
    restored_.set_step(w.step);
    restored_.set_updates(w.updates);
    restored_.set_data_epoch(static_cast<int64_t>(w.data_epoch));
    restored_.set_data_shard(static_cast<int64_t>(w.data_shard));
    restored_.set_data_offset(static_cast<int64_t>(w.data_offset));
    restored_.set_seed(w.seed);
    restored_.set_loss_scale(w.loss_scale);
    restored_.set_loss_scale_hysteresis(w.scale_hysteresis);
    restored_.set_loss_scale_iteration(w.scale_iteration);
    restored_.set_loss_scale_last_overflow(w.scale_last_overflow);
    ZS_RETURN_IF_ERROR(RestoreScaler(restored_));
    step_ = static_cast<int64_t>(w.step);
    updates_ = static_cast<int64_t>(w.updates);
    epoch_ = w.epoch;
    micro_ = 0;
    step_start_ = -1;
    if (w.code == kContinued) {
      continued_ = true;
    } else {
      ++rollbacks_;
    }
    *rolled_back = true;
    return absl::OkStatus();
  }
  if (healthy != nullptr) *healthy = w.code == kHealthy;
  if (comm_->rank() == 0) return err;
  if (w.code == 0) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat(
      "step ", step_, ": the step leader failed (code ", w.code, ")"));
}

absl::Status ZeroEngine::BroadcastFromLeader(void* word, size_t bytes) {
  std::vector<float> buf((bytes + sizeof(float) - 1) / sizeof(float), 0.0f);
  std::memcpy(buf.data(), word, bytes);
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->Broadcast(buf.data(), buf.size(), DType::kFloat32, 0),
             &stats_.broadcast, &stats_.comm_wait_seconds));
  std::memcpy(word, buf.data(), bytes);
  return absl::OkStatus();
}

void ZeroEngine::ResetStats() {
  stats_ = StepStats();
  loss_sum_ = 0;
  step_start_ = NowSeconds();
}

absl::StatusOr<float> ZeroEngine::Forward(absl::Span<const int> inputs,
                                          absl::Span<const int> targets) {
  if (micro_ == 0 && step_start_ < 0) ResetStats();
  const double start = NowSeconds();
  const double waits = stats_.comm_wait_seconds + stats_.server_wait_seconds;
  absl::StatusOr<float> loss = model_->Forward(inputs, targets);
  stats_.compute_seconds +=
      NowSeconds() - start -
      (stats_.comm_wait_seconds + stats_.server_wait_seconds - waits);
  if (loss.ok()) loss_sum_ += *loss;
  return loss;
}

absl::Status ZeroEngine::Backward() {
  const double start = NowSeconds();
  const double waits = stats_.comm_wait_seconds + stats_.server_wait_seconds;
  if (pusher_ != nullptr) {
    // Before the gradients are zeroed: the last micro-batch's pushes read
    // them.
    pusher_->BeginMicroBatch(micro_, static_cast<uint64_t>(step_), epoch_);
  } else {
    reducer_->BeginMicroBatch(micro_ == 0);
  }
  model_->ZeroGrad();
  const float scale = static_cast<float>(scaler_.scale());
  absl::Status s = model_->Backward([&](const gpt2::GradSegment& seg) {
    if (mixed()) {
      // As if backward had produced 16-bit gradients of the scaled loss.
      engine::ScaleAndRoundTo(
          options_.precision, scale,
          absl::MakeSpan(grads_).subspan(seg.range.begin, seg.range.size()));
    }
    if (pusher_ != nullptr) {
      pusher_->OnSegment(seg);
    } else {
      reducer_->OnSegment(seg);
    }
  });
  stats_.backward_end_seconds = NowSeconds();
  stats_.compute_seconds +=
      stats_.backward_end_seconds - start -
      (stats_.comm_wait_seconds + stats_.server_wait_seconds - waits);
  ZS_RETURN_IF_ERROR(s);
  if (window_ != nullptr) ZS_RETURN_IF_ERROR(window_->EndMicroBatch());
  if (pusher_ != nullptr) {
    pusher_->EndMicroBatch();
    return absl::OkStatus();
  }
  return reducer_->EndMicroBatch();
}

absl::Status ZeroEngine::Step(bool* stepped) {
  if (stepped != nullptr) *stepped = false;
  if (++micro_ < options_.gradient_accumulation_steps) return absl::OkStatus();
  micro_ = 0;
  ZS_RETURN_IF_ERROR(OptimizerStep());
  if (stepped != nullptr) *stepped = true;
  return absl::OkStatus();
}

absl::Status ZeroEngine::ExchangeNormAndLoss(std::vector<double>* partials,
                                             double* loss_sum) {
  const int W = comm_->size();
  const uint64_t slot = ExchangeSlot(comm_->part_alignment());
  std::vector<float> buf(slot * W, 0.0f);
  const uint64_t count = buf.size();
  const double mine[2] = {
      reducer_ != nullptr ? reducer_->SumSquares(comm_->rank()) : 0.0,
      loss_sum_};
  std::memcpy(buf.data() + comm_->PartRange(count, comm_->rank()).begin, mine,
              sizeof(mine));
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->AllGather(buf.data(), count, DType::kFloat32),
             &stats_.all_gather, &stats_.comm_wait_seconds));
  partials->assign(W, 0.0);
  *loss_sum = 0;
  for (int r = 0; r < W; ++r) {
    double theirs[2];
    std::memcpy(theirs, buf.data() + comm_->PartRange(count, r).begin,
                sizeof(theirs));
    (*partials)[r] = theirs[0];
    *loss_sum += theirs[1];
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::ServerDecision(engine::StepDecision* d,
                                        bool* rolled_back) {
  *rolled_back = false;
  pusher_->WaitPushes();
  const absl::Status pushed = pusher_->TakeStatus();
  const uint64_t step = static_cast<uint64_t>(step_);
  absl::Status leader = pushed;
  if (recovery()) {
    ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(pushed));
    if (!all_ok && pushed.ok()) {
      leader = absl::AbortedError(
          absl::StrCat("step ", step, ": another rank's push failed"));
    }
  }
  // The decision as raw bits, from the leader.
  struct Word {
    uint32_t code, skip;
    double grad_norm;
    float grad_scale, pad;
  } w{};
  if (comm_->rank() == 0 && leader.ok()) {
    const double start = NowSeconds();
    absl::StatusOr<StepNorm> norm = client_->Prepare(epoch_, step);
    stats_.server_control.Add(0, 0);
    stats_.server_wait_seconds += NowSeconds() - start;
    if (norm.ok()) {
      const double partial[1] = {norm->sum_squares};
      *d = engine::DecideStep(partial, norm->overflow, scaler_.scale(),
                              options_.gradient_clipping);
      w.skip = d->skip;
      w.grad_norm = d->grad_norm;
      w.grad_scale = d->grad_scale;
    } else {
      leader = norm.status();
    }
  }
  if (recovery()) {
    ZS_RETURN_IF_ERROR(Decide(leader, false, rolled_back));
    if (*rolled_back) return absl::OkStatus();
  }
  w.code = static_cast<uint32_t>(leader.code());
  ZS_RETURN_IF_ERROR(BroadcastFromLeader(&w, sizeof(Word)));
  if (!leader.ok()) return leader;
  if (w.code != 0) {
    return absl::AbortedError(absl::StrCat(
        "step ", step, ": the leader failed to prepare (code ", w.code, ")"));
  }
  d->skip = w.skip != 0;
  d->grad_norm = w.grad_norm;
  d->grad_scale = w.grad_scale;
  return absl::OkStatus();
}

absl::Status ZeroEngine::OptimizerStep() {
  const int W = comm_->size();
  const int gas = options_.gradient_accumulation_steps;
  const float scale = static_cast<float>(1.0 / (static_cast<double>(W) * gas));
  if (reducer_ != nullptr) reducer_->Scale(scale);
  std::vector<double> partials;
  double loss_sum = 0;
  ZS_RETURN_IF_ERROR(ExchangeNormAndLoss(&partials, &loss_sum));
  engine::StepDecision d;
  if (pusher_ != nullptr) {
    bool rolled_back = false;
    ZS_RETURN_IF_ERROR(ServerDecision(&d, &rolled_back));
    if (rolled_back) return Refresh();  // the step is redone from there
  } else {
    d = engine::DecideStep(partials, /*any_nonfinite=*/false, scaler_.scale(),
                           options_.gradient_clipping);
  }
  // Every rank has the same decision, so every scaler moves alike. Before
  // the commit: the state committed with the step is the one after it.
  stats_.loss_scale = scaler_.scale();
  ZS_RETURN_IF_ERROR(scaler_.Update(d.skip));
  stats_.next_loss_scale = scaler_.scale();
  const double lr =
      d.skip ? 0.0 : engine::LearningRate(options_.lr_schedule, updates_);
  stats_.grad_norm = d.grad_norm;
  // The clip coefficient alone (grad_scale also divides by the loss scale).
  stats_.clip_coef =
      d.skip ? 1.0f
             : engine::ClipCoefficient(d.grad_norm, options_.gradient_clipping);
  stats_.skipped = d.skip;
  stats_.lr = lr;
  bool restored_this_step = false;
  if (options_.stage == 0) {
    if (!d.skip) {
      // fp32: the parameters are their own master copy.
      std::vector<float>& master = mixed() ? master_ : params_;
      adamw_->Step(absl::MakeSpan(master), reducer_->full(), d.grad_scale, lr);
      if (mixed()) {
        std::copy(master_.begin(), master_.end(), params_.begin());
        engine::RoundTo(options_.precision, absl::MakeSpan(params_));
      }
    }
    ++step_;
  } else {
    bool rolled_back = false;
    ZS_RETURN_IF_ERROR(PushAndCommit(d.grad_scale, lr, d.skip, &rolled_back));
    if (rolled_back) return Refresh();  // the step is redone from there
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
  stats_.param_bytes = options_.stage < 3 ? 4 * n : window_->partition_bytes();
  stats_.grad_bytes = reducer_ != nullptr ? reducer_->acc_bytes() : 0;
  stats_.optimizer_bytes =
      (adamw_ ? adamw_->state_bytes() : 0) + 4 * master_.size();
  stats_.step_seconds = NowSeconds() - step_start_;
  last_stats_ = stats_;
  step_start_ = -1;
  return absl::OkStatus();
}

absl::Status ZeroEngine::PushAndCommit(float clip_coef, double lr, bool skip,
                                       bool* rolled_back) {
  *rolled_back = false;
  const uint64_t step = static_cast<uint64_t>(step_);
  std::vector<std::future<absl::Status>> pushes;
  const std::vector<GradReducer::Part> parts =
      reducer_ != nullptr ? reducer_->OwnParts()
                          : std::vector<GradReducer::Part>();  // pushed
  for (const GradReducer::Part& p : parts) {
    PushId id;
    id.epoch = epoch_;
    id.step = step;
    id.slot = 0;
    id.key_prefix =
        absl::StrCat("w", comm_->rank(), "/s", step, "/o", p.range.begin);
    pushes.push_back(
        client_->PushAsync(p.range, v1::DTYPE_FP32, p.data, std::move(id)));
    stats_.server_push.Add(4 * p.range.size(), 0);
  }
  absl::Status pushed;
  for (auto& f : pushes) {
    absl::Status s = WaitFuture(f, &stats_.server_wait_seconds);
    if (pushed.ok()) pushed = s;
  }
  if (recovery()) {
    ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(pushed));
    absl::Status leader =
        all_ok
            ? absl::OkStatus()
            : (pushed.ok() ? absl::AbortedError(absl::StrCat(
                                 "step ", step, ": another rank's push failed"))
                           : pushed);
    if (comm_->rank() == 0 && all_ok) {
      v1::TrainerState after = StateNow();
      after.set_step(step + 1);
      after.set_updates(updates_ + (skip ? 0 : 1));
      leader = LeaderCommit(step, clip_coef, lr, skip, &after);
      if (leader.ok() && (step + 1) % options_.checkpoint_interval == 0) {
        leader = client_->Checkpoint(step + 1, &after).status();
      }
    }
    return Decide(leader, false, rolled_back);
  }
  // {status code, committed step} from the leader, as raw bits.
  struct Word {
    uint32_t code;
    uint32_t pad;
    uint64_t step;
  } word{static_cast<uint32_t>(pushed.code()), 0, step};
  absl::Status leader = pushed;
  if (comm_->rank() == 0 && pushed.ok()) {
    v1::TrainerState after = StateNow();  // kept for outside checkpoints
    after.set_step(step + 1);
    after.set_updates(updates_ + (skip ? 0 : 1));
    leader = LeaderCommit(step, clip_coef, lr, skip, &after);
    word.code = static_cast<uint32_t>(leader.code());
  }
  ZS_RETURN_IF_ERROR(BroadcastFromLeader(&word, sizeof(word)));
  if (!leader.ok()) return leader;
  if (word.code != 0 || word.step != step) {
    return absl::AbortedError(
        absl::StrCat("step ", step, ": the leader failed to commit (code ",
                     word.code, ", step ", word.step, ")"));
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::LeaderCommit(uint64_t step, float clip_coef, double lr,
                                      bool skip,
                                      const v1::TrainerState* after) {
  const double start = NowSeconds();
  // With server-side aggregation ServerDecision has prepared this step.
  absl::StatusOr<StepNorm> norm =
      pusher_ != nullptr ? StepNorm() : client_->Prepare(epoch_, step);
  absl::Status leader = norm.status();
  if (norm.ok() && norm->overflow && !skip) {
    leader = absl::DataLossError(absl::StrCat(
        "step ", step,
        ": the servers hold NaN/Inf gradients the workers did not see"));
  } else if (norm.ok()) {
    leader = client_->Commit(epoch_, step, clip_coef, lr, skip, after);
  }
  stats_.server_control.Add(0, 0);
  stats_.server_wait_seconds += NowSeconds() - start;
  return leader;
}

absl::Status ZeroEngine::Refresh() {
  for (int attempt = 0;; ++attempt) {
    absl::Status own = FetchOwn();
    if (recovery()) {
      ZS_ASSIGN_OR_RETURN(bool all_ok, AllOk(own));
      if (!all_ok) {
        bool rolled_back = false, healthy = false;
        absl::Status decided = Decide(
            own.ok() ? absl::AbortedError("another rank's fetch failed") : own,
            false, &rolled_back, &healthy);
        if ((rolled_back || healthy) && attempt < 5) {
          if (healthy)
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
          continue;
        }
        ZS_RETURN_IF_ERROR(decided);
        return absl::AbortedError("parameters could not be fetched");
      }
    }
    ZS_RETURN_IF_ERROR(own);
    if (options_.stage == 3) return absl::OkStatus();
    ZS_RETURN_IF_ERROR(WaitOp(
        comm_->AllGather(params_.data(), params_.size(), DType::kFloat32),
        &stats_.all_gather, &stats_.comm_wait_seconds));
    engine::RoundTo(options_.precision, absl::MakeSpan(params_));
    return absl::OkStatus();
  }
}

absl::Status ZeroEngine::FetchOwn() {
  if (options_.stage == 3) return window_->FetchPartition();
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

absl::Status ZeroEngine::ReadParameters(absl::Span<float> out) {
  if (out.size() != params_.size()) {
    return absl::InvalidArgumentError("ReadParameters: wrong size");
  }
  // fp16/bf16: params_ holds the rounded copy; the master weights are
  // master_ (stage 0) or on the servers.
  if (options_.stage == 0 && mixed()) {
    std::copy(master_.begin(), master_.end(), out.begin());
    return absl::OkStatus();
  }
  if (options_.stage < 3 && !mixed()) {
    std::copy(params_.begin(), params_.end(), out.begin());
    return absl::OkStatus();
  }
  return client_->Gather(Range{0, params_.size()}, v1::DTYPE_FP32, out.data());
}

}  // namespace zeroshard::engine
