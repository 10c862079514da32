#include "client/capi/trainer.h"

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/capi/convert.h"
#include "client/capi/member_handle.h"
#include "common/status_macros.h"

namespace zeroshard::capi {
namespace {

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

bool Flag(int v) { return v == 0 || v == 1; }

// The status of a rank's push or fetch reported as a code.
absl::Status RankStatus(int code, const char* what) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat("this rank's ", what, " failed (",
                                   zs_status_name(code), ")"));
}

StepProtocolOptions ProtocolOptions(const zs_trainer_options& o) {
  StepProtocolOptions po;
  po.checkpoint_interval = o.checkpoint_interval;
  po.recovery_timeout_seconds = o.recovery_timeout_seconds;
  po.elastic = o.elastic != 0;
  po.min_epoch = o.min_epoch;
  zs_member* member = o.member;
  if (po.elastic && member != nullptr) {
    // Looked up at each use: a closed member only stops the reports.
    po.world_epoch = [member]() -> uint64_t {
      absl::StatusOr<std::shared_ptr<MemberHandle>> m =
          Lookup<MemberHandle>(member);
      return m.ok() ? (*m)->membership()->epoch() : 0;
    };
  }
  return po;
}

}  // namespace

absl::Status CallbackGroup::Check(const zs_group* g) {
  if (g == nullptr) return absl::OkStatus();
  if (g->size < 1 || g->size > 65536) {
    return Bad(
        absl::StrCat("group->size is ", g->size, "; give 1 to 65536 ranks"));
  }
  if (g->rank < 0 || g->rank >= g->size) {
    return Bad(
        absl::StrCat("group->rank is ", g->rank, " of ", g->size, " ranks"));
  }
  if (g->size > 1 && (g->broadcast == nullptr || g->all_gather == nullptr)) {
    return Bad("a group of several ranks needs broadcast and all_gather");
  }
  return absl::OkStatus();
}

CallbackGroup::CallbackGroup(const zs_group* g) {
  std::memset(&group_, 0, sizeof(group_));
  group_.size = 1;
  if (g != nullptr) group_ = *g;
}

absl::Status CallbackGroup::Broadcast(void* word, size_t bytes) {
  if (group_.size == 1) return absl::OkStatus();
  const int rc = group_.broadcast(word, bytes, group_.user);
  if (rc == 0) return absl::OkStatus();
  return CallbackStatus(rc, "the group's broadcast callback");
}

absl::Status CallbackGroup::AllGather(const void* mine, size_t bytes,
                                      void* all) {
  if (group_.size == 1) {
    std::memcpy(all, mine, bytes);
    return absl::OkStatus();
  }
  const int rc = group_.all_gather(mine, bytes, all, group_.user);
  if (rc == 0) return absl::OkStatus();
  return CallbackStatus(rc, "the group's all_gather callback");
}

absl::Status TrainerHandle::CheckOptions(const zs_trainer_options& o) {
  if (o.checkpoint_interval < 0) {
    return Bad(absl::StrCat("checkpoint_interval is ", o.checkpoint_interval,
                            "; give 0 (off) or more"));
  }
  if (!(std::isfinite(o.recovery_timeout_seconds) &&
        o.recovery_timeout_seconds > 0)) {
    return Bad(absl::StrCat("recovery_timeout_seconds is ",
                            o.recovery_timeout_seconds, "; give > 0"));
  }
  if (!Flag(o.elastic)) return Bad("elastic must be 0 or 1");
  if (o.member != nullptr) {
    ZS_RETURN_IF_ERROR(Find(o.member, Kind::kMember).status());
  }
  return absl::OkStatus();
}

TrainerHandle::TrainerHandle(std::shared_ptr<ClientHandle> client,
                             const zs_group* group,
                             const zs_trainer_options& options)
    : Handle(kKind), client_(std::move(client)), group_(group) {
  protocol_ = std::make_unique<StepProtocol>(client_->client(), &group_,
                                             ProtocolOptions(options));
}

absl::Status TrainerHandle::Expect(Phase want) const {
  if (phase_ == want) return absl::OkStatus();
  const uint64_t step = state_.step();
  switch (phase_) {
    case Phase::kFailed:
      return absl::FailedPreconditionError(absl::StrCat(
          "the trainer failed earlier (", failure_,
          "); close it: a new trainer's zs_trainer_start resumes or rolls "
          "back"));
    case Phase::kNew:
      return absl::FailedPreconditionError("call zs_trainer_start first");
    case Phase::kFetch:
      return absl::FailedPreconditionError(
          absl::StrCat("fetch the parameters of step ", step,
                       " and call zs_trainer_after_fetch first"));
    case Phase::kReady:
      return absl::FailedPreconditionError(
          want == Phase::kDecided
              ? absl::StrCat("step ", step,
                             " is not decided: call zs_trainer_decide first")
              : absl::StrCat("the trainer is started and at step ", step,
                             ": push, then zs_trainer_step"));
    case Phase::kDecided:
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, " is decided: call zs_trainer_commit first"));
  }
  return absl::InternalError("unknown phase");
}

absl::Status TrainerHandle::Fail(absl::Status s) {
  phase_ = Phase::kFailed;
  failure_ = std::string(s.message());
  return s;
}

void TrainerHandle::Take(const Outcome& o, zs_outcome* out) {
  if (o.moved()) {
    state_ = o.state;
    phase_ = Phase::kFetch;
  }
  std::memset(out, 0, sizeof(*out));
  switch (o.kind) {
    case Outcome::Kind::kOk:
      out->kind = ZS_OUTCOME_OK;
      break;
    case Outcome::Kind::kRolledBack:
      out->kind = ZS_OUTCOME_ROLLED_BACK;
      break;
    case Outcome::Kind::kContinued:
      out->kind = ZS_OUTCOME_CONTINUED;
      break;
    case Outcome::Kind::kRetry:
      out->kind = ZS_OUTCOME_RETRY;
      break;
  }
  out->epoch = protocol_->epoch();
  out->world_epoch = protocol_->world_epoch();
  out->state = FromProto(state_);
}

absl::Status TrainerHandle::Start(const float* initial, size_t initial_bytes,
                                  zs_write_initial_fn write_initial, void* user,
                                  const zs_trainer_state* now,
                                  zs_outcome* out) {
  ZS_RETURN_IF_ERROR(NotNull(out, "out"));
  ZS_RETURN_IF_ERROR(Expect(Phase::kNew));
  ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client_->Plan());
  const uint64_t total = plan->total();
  if (initial != nullptr && write_initial != nullptr) {
    return Bad("give initial or write_initial, not both");
  }
  if (initial != nullptr) {
    ZS_RETURN_IF_ERROR(
        CheckBuffer(initial, initial_bytes, total, 4, "initial"));
  } else if (initial_bytes != 0) {
    return Bad(absl::StrCat("initial is NULL with initial_bytes ",
                            initial_bytes, " (give 0 without initial)"));
  }
  v1::TrainerState start;
  start.set_loss_scale(1);
  if (now != nullptr) {
    if (now->step != 0 || now->updates != 0) {
      return Bad(absl::StrCat("now->step and now->updates are ", now->step,
                              " and ", now->updates,
                              "; a fresh start is at step 0"));
    }
    start = ToProto(*now);
  }
  const auto write = [&]() -> absl::Status {
    if (initial != nullptr) {
      return client_->client()->WriteParameters(Range{0, total}, initial);
    }
    if (write_initial == nullptr) return absl::OkStatus();
    const int rc = write_initial(user);
    return rc == 0 ? absl::OkStatus()
                   : CallbackStatus(rc, "the write_initial callback");
  };
  absl::StatusOr<Outcome> o =
      protocol_->Start(client_->client()->spec(), write, start);
  if (!protocol_->recovery() && group_.size() > 1) {
    // Without recovery the protocol's start ends when the leader has
    // written, on the leader only: every rank waits for it here and
    // learns whether every rank started (no rank fetches too early).
    const uint32_t mine = static_cast<uint32_t>(o.status().code());
    std::vector<uint32_t> all(group_.size());
    absl::Status s = group_.AllGather(&mine, sizeof(mine), all.data());
    for (int r = 0; s.ok() && o.ok() && r < group_.size(); ++r) {
      if (all[r] != 0) {
        s = absl::AbortedError(
            absl::StrCat("rank ", r, " could not start (",
                         zs_status_name(static_cast<int>(all[r])), ")"));
      }
    }
    if (!s.ok()) return Fail(s);
  }
  if (!o.ok()) return Fail(o.status());
  state_ = start;
  phase_ = Phase::kFetch;
  Take(*o, out);
  return absl::OkStatus();
}

absl::Status TrainerHandle::CheckStepArgs(const zs_step_args& a) const {
  if (a.step != state_.step()) {
    return Bad(absl::StrCat("args->step is ", a.step,
                            " but the trainer is at step ", state_.step(),
                            " (zs_outcome.state.step)"));
  }
  if (a.push_status < 0 || a.push_status > 16) {
    return Bad(absl::StrCat("args->push_status ", a.push_status,
                            " is not a status code (0..16)"));
  }
  if (!Flag(a.norm_from_servers) || !Flag(a.nonfinite)) {
    return Bad("args->norm_from_servers and args->nonfinite must be 0 or 1");
  }
  if (a.sum_squares < 0) {
    return Bad(absl::StrCat("args->sum_squares is ", a.sum_squares,
                            "; a sum of squares is >= 0"));
  }
  if (!(std::isfinite(a.loss_scale) && a.loss_scale > 0)) {
    return Bad(absl::StrCat("args->loss_scale is ", a.loss_scale,
                            "; give > 0 (1: none)"));
  }
  if (!(std::isfinite(a.max_norm) && a.max_norm >= 0)) {
    return Bad(absl::StrCat("args->max_norm is ", a.max_norm,
                            "; give >= 0 (0: no clipping)"));
  }
  if (!(std::isfinite(a.lr) && a.lr >= 0)) {
    return Bad(absl::StrCat("args->lr is ", a.lr, "; give >= 0"));
  }
  return absl::OkStatus();
}

absl::Status TrainerHandle::Decide(const zs_step_args& a, zs_decision* decision,
                                   zs_outcome* out) {
  ZS_RETURN_IF_ERROR(NotNull(out, "out"));
  ZS_RETURN_IF_ERROR(Expect(Phase::kReady));
  ZS_RETURN_IF_ERROR(CheckStepArgs(a));
  const uint64_t step = a.step;
  const absl::Status pushed = RankStatus(a.push_status, "push");
  if (group_.size() == 1 && pushed.ok() &&
      !client_->PushedFor(protocol_->epoch(), step)) {
    return absl::FailedPreconditionError(
        absl::StrCat("nothing was pushed for step ", step,
                     ": zs_push the gradient (id: "
                     "epoch ",
                     protocol_->epoch(), ", step ", step,
                     ") through the trainer's client first"));
  }
  // Every rank's {max_norm, loss_scale, lr}, and with the norm from the
  // ranks also {sum of squares, non-finite}: one all-gather.
  const bool from_ranks = !a.norm_from_servers;
  const int width = from_ranks ? 5 : 3;
  const double mine[5] = {a.max_norm, a.loss_scale, a.lr, a.sum_squares,
                          a.nonfinite ? 1.0 : 0.0};
  std::vector<double> all(static_cast<size_t>(width) * group_.size());
  if (absl::Status s =
          group_.AllGather(mine, sizeof(double) * width, all.data());
      !s.ok()) {
    return Fail(s);
  }
  static const char* const kArgs[3] = {"max_norm", "loss_scale", "lr"};
  for (int r = 1; r < group_.size(); ++r) {
    for (int i = 0; i < 3; ++i) {
      if (all[width * r + i] != all[i]) {
        // Every rank sees the same values and refuses alike; nothing
        // changed, so the step may be called again with the same arguments.
        return Bad(absl::StrCat("the ranks disagree on args->", kArgs[i],
                                " (rank 0: ", all[i], ", rank ", r, ": ",
                                all[width * r + i],
                                "); every rank must pass the same"));
      }
    }
  }
  StepDecision d;
  if (a.norm_from_servers) {
    absl::StatusOr<Outcome> o =
        protocol_->DecideOnServers(step, pushed, a.loss_scale, a.max_norm, &d);
    if (!o.ok()) return Fail(o.status());
    if (o->moved()) {
      if (decision != nullptr) std::memset(decision, 0, sizeof(*decision));
      Take(*o, out);
      return absl::OkStatus();
    }
  } else {
    // The same decision on every rank.
    std::vector<double> partials(group_.size());
    bool any_nonfinite = false;
    for (int r = 0; r < group_.size(); ++r) {
      partials[r] = all[width * r + 3];
      any_nonfinite |= all[width * r + 4] != 0;
    }
    d = DecideStep(partials, any_nonfinite, a.loss_scale, a.max_norm);
  }
  args_ = a;
  decision_ = d;
  phase_ = Phase::kDecided;
  if (decision != nullptr) *decision = ToC(d, a.max_norm);
  Take(Outcome(), out);
  return absl::OkStatus();
}

absl::Status TrainerHandle::Commit(const zs_trainer_state* after,
                                   zs_outcome* out) {
  ZS_RETURN_IF_ERROR(NotNull(out, "out"));
  ZS_RETURN_IF_ERROR(Expect(Phase::kDecided));
  v1::TrainerState next = after != nullptr ? ToProto(*after) : state_;
  next.set_step(state_.step() + 1);
  next.set_updates(state_.updates() + (decision_.skip ? 0 : 1));
  absl::StatusOr<Outcome> o = protocol_->Commit(
      args_.step, RankStatus(args_.push_status, "push"), decision_, args_.lr,
      next, args_.norm_from_servers != 0);
  if (!o.ok()) return Fail(o.status());
  if (!o->moved()) state_ = next;
  phase_ = Phase::kFetch;
  Take(*o, out);
  return absl::OkStatus();
}

absl::Status TrainerHandle::AfterFetch(int fetch_status, zs_outcome* out) {
  ZS_RETURN_IF_ERROR(NotNull(out, "out"));
  ZS_RETURN_IF_ERROR(Expect(Phase::kFetch));
  if (fetch_status < 0 || fetch_status > 16) {
    return Bad(absl::StrCat("fetch_status ", fetch_status,
                            " is not a status code (0..16)"));
  }
  absl::StatusOr<Outcome> o =
      protocol_->AfterFetch(RankStatus(fetch_status, "fetch"));
  if (!o.ok()) return Fail(o.status());
  if (o->kind == Outcome::Kind::kOk) phase_ = Phase::kReady;
  Take(*o, out);
  return absl::OkStatus();
}

zs_decision ToC(const StepDecision& d, double max_norm) {
  zs_decision c;
  c.grad_norm = d.grad_norm;
  c.clip_coef = d.skip ? 1.0f : ClipCoefficient(d.grad_norm, max_norm);
  c.grad_scale = d.grad_scale;
  c.skipped = d.skip ? 1 : 0;
  return c;
}

}  // namespace zeroshard::capi
