// The object behind a zs_trainer handle: the step protocol
// (client/step_protocol.h) over a client and a group given as C callbacks,
// plus what the C API adds around it — the workers' step and updates, and
// the order of calls:
//
//   start -> fetch -> { step | decide -> commit } -> fetch -> ...
//
// where "fetch" is the caller's gather followed by AfterFetch. A call out
// of that order, or with bad arguments, is an error that changes nothing.
// An error from the servers or the group leaves the trainer failed (the
// protocol's rule: the job must be considered broken); later calls say so.
//
// Threading: one call at a time (the API functions take busy() with
// TryLock and refuse a second concurrent call).
#ifndef ZEROSHARD_CLIENT_CAPI_TRAINER_H_
#define ZEROSHARD_CLIENT_CAPI_TRAINER_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/capi/client_handle.h"
#include "client/capi/handles.h"
#include "client/step_protocol.h"
#include "client/zeroshard.h"
#include "common/optim/clip.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::capi {

// A StepGroup over zs_group's callbacks (or a single rank).
class CallbackGroup final : public StepGroup {
 public:
  // INVALID_ARGUMENT unless `g` (may be null) describes a usable group.
  static absl::Status Check(const zs_group* g);
  explicit CallbackGroup(const zs_group* g);

  int rank() const override { return group_.rank; }
  int size() const override { return group_.size; }
  absl::Status Broadcast(void* word, size_t bytes) override;
  absl::Status AllGather(const void* mine, size_t bytes, void* all) override;

 private:
  zs_group group_;
};

class TrainerHandle : public Handle {
 public:
  static constexpr Kind kKind = Kind::kTrainer;

  // INVALID_ARGUMENT for bad options (a checked group: CallbackGroup::Check).
  static absl::Status CheckOptions(const zs_trainer_options& o);
  TrainerHandle(std::shared_ptr<ClientHandle> client, const zs_group* group,
                const zs_trainer_options& options);

  absl::Mutex* busy() { return &busy_; }

  // The zs_trainer_* calls (client/zeroshard.h), under busy().
  absl::Status Start(const float* initial, size_t initial_bytes,
                     zs_write_initial_fn write_initial, void* user,
                     const zs_trainer_state* now, zs_outcome* out);
  absl::Status Decide(const zs_step_args& args, zs_decision* decision,
                      zs_outcome* out);
  absl::Status Commit(const zs_trainer_state* after, zs_outcome* out);
  absl::Status AfterFetch(int fetch_status, zs_outcome* out);

 private:
  enum class Phase { kNew, kFetch, kReady, kDecided, kFailed };

  // OK in phase `want`, else FAILED_PRECONDITION saying what comes next.
  absl::Status Expect(Phase want) const;
  // Marks the trainer failed by `s` and returns it.
  absl::Status Fail(absl::Status s);
  // Takes `o`: a move to o.state (then a fetch) or OK; fills *out.
  void Take(const Outcome& o, zs_outcome* out);
  absl::Status CheckStepArgs(const zs_step_args& args) const;

  const std::shared_ptr<ClientHandle> client_;
  CallbackGroup group_;
  std::unique_ptr<StepProtocol> protocol_;
  absl::Mutex busy_;

  // Touched only under busy_.
  Phase phase_ = Phase::kNew;
  std::string failure_;     // kFailed: why
  v1::TrainerState state_;  // the workers' state now
  // kDecided: the step's arguments and decision.
  zs_step_args args_{};
  StepDecision decision_;
};

// Fills the C decision of `d` (clip coefficient for `max_norm`).
zs_decision ToC(const StepDecision& d, double max_norm);

}  // namespace zeroshard::capi

#endif  // ZEROSHARD_CLIENT_CAPI_TRAINER_H_
