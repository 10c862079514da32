// The zs_trainer_* functions of the C API (client/zeroshard.h): thin
// wrappers over TrainerHandle (trainer.h) that look the handle up, allow
// one call at a time and report the result.
#include <cstring>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "client/capi/client_handle.h"
#include "client/capi/handles.h"
#include "client/capi/trainer.h"
#include "client/zeroshard.h"
#include "common/status_macros.h"

namespace zeroshard::capi {
namespace {

// Holds a trainer's busy() lock if it was free.
class Busy {
 public:
  explicit Busy(TrainerHandle* t) : mu_(t->busy()), held_(mu_->TryLock()) {}
  ~Busy() {
    if (held_) mu_->Unlock();
  }
  absl::Status status() const {
    if (held_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "another call on this trainer is in progress (one call at a time)");
  }

 private:
  absl::Mutex* const mu_;
  const bool held_;
};

// Runs `body(TrainerHandle*)` on the live trainer `t`, alone.
template <class F>
int OnTrainer(const char* function, const zs_trainer* t, F&& body) {
  return Run(function, [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::shared_ptr<TrainerHandle> trainer,
                        Lookup<TrainerHandle>(t));
    *blame = trainer;
    Busy busy(trainer.get());
    ZS_RETURN_IF_ERROR(busy.status());
    return body(trainer.get());
  });
}

}  // namespace
}  // namespace zeroshard::capi

using zeroshard::capi::TrainerHandle;

extern "C" {

void zs_trainer_options_init(zs_trainer_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->recovery_timeout_seconds = 60;
}

int zs_trainer_create(zs_client* c, const zs_group* group,
                      const zs_trainer_options* options, zs_trainer** out) {
  using zeroshard::capi::ClientHandle;
  return zeroshard::capi::Run(
      "zs_trainer_create", [&](zeroshard::capi::Blame*) -> absl::Status {
        ZS_ASSIGN_OR_RETURN(std::shared_ptr<ClientHandle> client,
                            zeroshard::capi::Lookup<ClientHandle>(c));
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(options, "options"));
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(out, "out"));
        ZS_RETURN_IF_ERROR(zeroshard::capi::CallbackGroup::Check(group));
        ZS_RETURN_IF_ERROR(TrainerHandle::CheckOptions(*options));
        auto trainer =
            std::make_shared<TrainerHandle>(std::move(client), group, *options);
        *out = reinterpret_cast<zs_trainer*>(
            zeroshard::capi::Register(std::move(trainer)));
        return absl::OkStatus();
      });
}

int zs_trainer_close(zs_trainer* trainer) {
  return zeroshard::capi::Run("zs_trainer_close", [&](zeroshard::capi::Blame*) {
    return zeroshard::capi::Remove(trainer, TrainerHandle::kKind).status();
  });
}

size_t zs_trainer_error(const zs_trainer* trainer, char* buf, size_t size) {
  return zeroshard::capi::CopyErrorOf(trainer, TrainerHandle::kKind, buf, size);
}

int zs_trainer_start(zs_trainer* t, const float* initial, size_t initial_bytes,
                     zs_write_initial_fn write_initial, void* user,
                     const zs_trainer_state* now, zs_outcome* out) {
  return zeroshard::capi::OnTrainer(
      "zs_trainer_start", t, [&](TrainerHandle* trainer) {
        return trainer->Start(initial, initial_bytes, write_initial, user, now,
                              out);
      });
}

int zs_trainer_decide(zs_trainer* t, const zs_step_args* args,
                      zs_decision* decision, zs_outcome* out) {
  return zeroshard::capi::OnTrainer(
      "zs_trainer_decide", t, [&](TrainerHandle* trainer) -> absl::Status {
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(args, "args"));
        return trainer->Decide(*args, decision, out);
      });
}

int zs_trainer_commit(zs_trainer* t, const zs_trainer_state* after,
                      zs_outcome* out) {
  return zeroshard::capi::OnTrainer(
      "zs_trainer_commit", t,
      [&](TrainerHandle* trainer) { return trainer->Commit(after, out); });
}

int zs_trainer_step(zs_trainer* t, const zs_step_args* args,
                    const zs_trainer_state* after, zs_decision* decision,
                    zs_outcome* out) {
  return zeroshard::capi::OnTrainer(
      "zs_trainer_step", t, [&](TrainerHandle* trainer) -> absl::Status {
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(args, "args"));
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(out, "out"));
        // Written only when the whole call succeeds (a commit that fails
        // after the decision leaves the caller's outputs as they were).
        zs_decision d{};
        zs_outcome o{};
        ZS_RETURN_IF_ERROR(trainer->Decide(*args, &d, &o));
        if (o.kind == ZS_OUTCOME_OK) {
          ZS_RETURN_IF_ERROR(trainer->Commit(after, &o));
        }
        if (decision != nullptr) *decision = d;
        *out = o;
        return absl::OkStatus();
      });
}

int zs_trainer_after_fetch(zs_trainer* t, int fetch_status, zs_outcome* out) {
  return zeroshard::capi::OnTrainer(
      "zs_trainer_after_fetch", t, [&](TrainerHandle* trainer) {
        return trainer->AfterFetch(fetch_status, out);
      });
}

}  // extern "C"
