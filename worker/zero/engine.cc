#include "worker/zero/engine.h"

#include <cmath>
#include <cstring>
#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/engine/clip.h"
#include "worker/engine/lr_schedule.h"
#include "worker/zero/op_wait.h"
#include "worker/zero/zero_plan.h"

namespace zeroshard::zero {
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
    ShardClient* client) {
  ZS_RETURN_IF_ERROR(ValidateZeroOptions(options));
  if (comm == nullptr) {
    return absl::InvalidArgumentError("ZeroEngine: no communicator");
  }
  if (options.stage > 0 && client == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZeroEngine: stage ", options.stage, " needs a shard client"));
  }
  std::unique_ptr<ZeroEngine> e(new ZeroEngine(options, comm, client));
  ZS_RETURN_IF_ERROR(e->Init(config, initial_params));
  return e;
}

ZeroEngine::~ZeroEngine() = default;

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
    window_ = std::make_unique<ParamWindow>(layout, wo, comm_, client_,
                                            absl::MakeSpan(params_));
    window_->set_stats(&stats_);
    mo.param_hook = [this](const gpt2::ParamEvent& e) {
      return window_->OnEvent(e);
    };
  }
  ZS_ASSIGN_OR_RETURN(model_, gpt2::Model::Create(config, options_.micro_batch,
                                                  options_.seq_len, mo));
  reducer_ = std::make_unique<GradReducer>(
      options_.stage, options_.reduce_bucket_size, options_.overlap_comm, comm_,
      absl::MakeSpan(grads_));
  reducer_->set_stats(&stats_);

  const v1::ModelSpec spec =
      ZeroModelSpec(layout, options_, client_ ? client_->num_servers() : 1,
                    comm_->part_alignment());
  if (options_.stage == 0) {
    std::copy(initial_params.begin(), initial_params.end(), params_.begin());
    adamw_ = std::make_unique<LocalAdamW>(spec, layout);
    return absl::OkStatus();
  }
  ZS_RETURN_IF_ERROR(client_->RegisterModel(spec));
  if (comm_->rank() == 0) {
    ZS_RETURN_IF_ERROR(
        client_->WriteParameters(Range{0, n}, initial_params.data()));
  }
  StepStats scratch;
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->Barrier(), &scratch.broadcast, &scratch.comm_wait_seconds));
  return Refresh();
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
  model_->ZeroGrad();
  reducer_->BeginMicroBatch(micro_ == 0);
  absl::Status s = model_->Backward(
      [this](const gpt2::GradSegment& seg) { reducer_->OnSegment(seg); });
  stats_.backward_end_seconds = NowSeconds();
  stats_.compute_seconds +=
      stats_.backward_end_seconds - start -
      (stats_.comm_wait_seconds + stats_.server_wait_seconds - waits);
  ZS_RETURN_IF_ERROR(s);
  if (window_ != nullptr) ZS_RETURN_IF_ERROR(window_->EndMicroBatch());
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
  const double mine[2] = {reducer_->SumSquares(comm_->rank()), loss_sum_};
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

absl::Status ZeroEngine::OptimizerStep() {
  const int W = comm_->size();
  const int gas = options_.gradient_accumulation_steps;
  const float scale = static_cast<float>(1.0 / (static_cast<double>(W) * gas));
  reducer_->Scale(scale);
  std::vector<double> partials;
  double loss_sum = 0;
  ZS_RETURN_IF_ERROR(ExchangeNormAndLoss(&partials, &loss_sum));
  const engine::StepDecision d =
      engine::DecideStep(partials, /*any_nonfinite=*/false,
                         /*loss_scale=*/1.0, options_.gradient_clipping);
  const double lr =
      d.skip ? 0.0 : engine::LearningRate(options_.lr_schedule, updates_);
  stats_.grad_norm = d.grad_norm;
  stats_.clip_coef = d.grad_scale;
  stats_.skipped = d.skip;
  stats_.lr = lr;
  if (options_.stage == 0) {
    if (!d.skip) {
      adamw_->Step(absl::MakeSpan(params_), reducer_->full(), d.grad_scale, lr);
    }
    ++step_;
  } else {
    ZS_RETURN_IF_ERROR(PushAndCommit(d.grad_scale, lr, d.skip));
    ++step_;
    ZS_RETURN_IF_ERROR(Refresh());
  }
  if (!d.skip) ++updates_;
  // Bytes held (step_stats.h).
  const uint64_t n = params_.size();
  stats_.step = step_;
  stats_.loss = loss_sum_ / gas;
  stats_.global_loss = loss_sum / (static_cast<double>(W) * gas);
  stats_.tokens =
      static_cast<uint64_t>(W) * gas * options_.micro_batch * options_.seq_len;
  stats_.param_bytes = options_.stage < 3 ? 4 * n : window_->partition_bytes();
  stats_.grad_bytes = reducer_->acc_bytes();
  stats_.optimizer_bytes = adamw_ ? adamw_->state_bytes() : 0;
  stats_.step_seconds = NowSeconds() - step_start_;
  last_stats_ = stats_;
  step_start_ = -1;
  return absl::OkStatus();
}

absl::Status ZeroEngine::PushAndCommit(float clip_coef, double lr, bool skip) {
  const uint64_t step = static_cast<uint64_t>(step_);
  std::vector<std::future<absl::Status>> pushes;
  for (const GradReducer::Part& p : reducer_->OwnParts()) {
    PushId id;
    id.epoch = 0;
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
  // {status code, committed step} from the leader, as raw bits.
  struct Word {
    uint32_t code;
    uint32_t pad;
    uint64_t step;
  } word{static_cast<uint32_t>(pushed.code()), 0, step};
  absl::Status leader = pushed;
  if (comm_->rank() == 0 && pushed.ok()) {
    const double start = NowSeconds();
    absl::StatusOr<StepNorm> norm = client_->Prepare(0, step);
    leader = norm.status();
    if (norm.ok() && norm->overflow && !skip) {
      leader = absl::DataLossError(absl::StrCat(
          "step ", step,
          ": the servers hold NaN/Inf gradients the workers did not see"));
    } else if (norm.ok()) {
      leader = client_->Commit(0, step, clip_coef, lr, skip);
    }
    stats_.server_control.Add(0, 0);
    stats_.server_wait_seconds += NowSeconds() - start;
    word.code = static_cast<uint32_t>(leader.code());
  }
  std::vector<float> buf(4);
  std::memcpy(buf.data(), &word, sizeof(word));
  ZS_RETURN_IF_ERROR(
      WaitOp(comm_->Broadcast(buf.data(), buf.size(), DType::kFloat32, 0),
             &stats_.broadcast, &stats_.comm_wait_seconds));
  std::memcpy(&word, buf.data(), sizeof(word));
  if (!leader.ok()) return leader;
  if (word.code != 0 || word.step != step) {
    return absl::AbortedError(
        absl::StrCat("step ", step, ": the leader failed to commit (code ",
                     word.code, ", step ", word.step, ")"));
  }
  return absl::OkStatus();
}

absl::Status ZeroEngine::Refresh() {
  if (options_.stage == 3) return window_->FetchPartition();
  const uint64_t n = params_.size();
  const Range slice = comm_->PartRange(n, comm_->rank());
  uint64_t got = 0;
  if (!slice.empty()) {
    const double start = NowSeconds();
    ZS_RETURN_IF_ERROR(client_->Gather(slice, v1::DTYPE_FP32,
                                       params_.data() + slice.begin, &got));
    stats_.server_wait_seconds += NowSeconds() - start;
    stats_.server_gather.Add(0, 4 * slice.size());
    if (got != static_cast<uint64_t>(step_)) {
      return absl::AbortedError(absl::StrCat("gathered parameters of step ",
                                             got, ", expected ", step_));
    }
  }
  return WaitOp(comm_->AllGather(params_.data(), n, DType::kFloat32),
                &stats_.all_gather, &stats_.comm_wait_seconds);
}

absl::Status ZeroEngine::ReadParameters(absl::Span<float> out) {
  if (out.size() != params_.size()) {
    return absl::InvalidArgumentError("ReadParameters: wrong size");
  }
  if (options_.stage < 3) {
    std::copy(params_.begin(), params_.end(), out.begin());
    return absl::OkStatus();
  }
  return client_->Gather(Range{0, params_.size()}, v1::DTYPE_FP32, out.data());
}

}  // namespace zeroshard::zero
