#include "worker/elastic/elastic_trainer.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/elastic/world.h"
#include "worker/zero/engine.h"

namespace zeroshard::elastic {
namespace {

// What one group did: its outcome and where it left the engine.
struct GroupRun {
  absl::Status status;
  bool done = false;
  int64_t steps_committed = 0;  // by this group
  uint64_t epoch = 0;           // the engine's push epoch at the end
};

// Trains with `world` until the run is done, the membership moves on or
// something fails.
GroupRun TrainGroup(const zero::TrainSpec& spec, World& world,
                    const zero::ElasticHooks& hooks, ShardClient* client,
                    const zero::StepCallback& on_step,
                    zero::TrainProgress* progress, zero::TrainResult* result,
                    int64_t* first) {
  GroupRun run;
  run.epoch = hooks.min_epoch;
  std::vector<float> init;
  if (world.rank == 0) {
    absl::StatusOr<std::vector<float>> p = zero::InitialParams(spec);
    if (!p.ok()) return {p.status()};
    init = std::move(*p);
  }
  absl::StatusOr<std::optional<io::DataLoader>> loader =
      zero::OpenLoader(spec, *world.comm);
  if (!loader.ok()) return {loader.status()};
  absl::StatusOr<std::unique_ptr<zero::ZeroEngine>> engine =
      zero::ZeroEngine::Create(spec.zero, spec.config, init, world.comm.get(),
                               client, &hooks);
  if (!engine.ok()) return {engine.status()};
  zero::ZeroEngine& e = **engine;
  const int64_t start = e.global_step();
  const uint64_t epoch = world.epoch;
  run.status = zero::RunSteps(
      spec, e, loader->has_value() ? &**loader : nullptr, on_step, progress,
      result, first, [&e, epoch] { return e.world_epoch() != epoch; });
  run.steps_committed = e.global_step() - start;
  run.epoch = e.epoch();
  if (run.status.ok() && e.global_step() >= spec.steps) {
    run.done = true;
    result->rollbacks = progress->rollbacks;
    result->params.assign(e.layout().num_params(), 0.0f);
    run.status = e.ReadParameters(absl::MakeSpan(result->params));
  }
  return run;
}

}  // namespace

absl::Status ValidateElasticSpec(const ElasticSpec& s) {
  if (s.min_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_workers ", s.min_workers, " must be at least 1"));
  }
  if (s.start_workers != 0 && s.start_workers < s.min_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_workers ", s.start_workers,
                     " is below min_workers ", s.min_workers));
  }
  if (s.global_micro_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_micro_batches ", s.global_micro_batches,
                     " must be at least 1 (0: the default)"));
  }
  if (s.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the elastic timeout must be positive");
  }
  if (s.max_failures < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_failures ", s.max_failures, " must be at least 1"));
  }
  return absl::OkStatus();
}

absl::StatusOr<zero::TrainResult> RunElastic(const zero::TrainSpec& spec,
                                             const ElasticSpec& elastic,
                                             MembershipClient* member,
                                             ShardClient* client,
                                             const zero::StepCallback& on_step,
                                             zero::TrainProgress* progress) {
  ZS_RETURN_IF_ERROR(ValidateElasticSpec(elastic));
  auto log = elastic.log ? elastic.log : [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  const int start_workers =
      elastic.start_workers > 0 ? elastic.start_workers : elastic.min_workers;
  const int global =
      elastic.global_micro_batches > 0
          ? elastic.global_micro_batches
          : start_workers * spec.zero.gradient_accumulation_steps;
  zero::TrainProgress scratch;
  if (progress == nullptr) progress = &scratch;
  zero::TrainResult result;
  int64_t first = -1;
  uint64_t epoch = 0;  // pushes of the next group go above this
  int failures = 0;
  bool first_group = true;
  uint64_t last_world = 0;  // the membership epoch of the last group
  while (true) {
    WorldOptions wo;
    wo.min_workers = first_group ? start_workers : elastic.min_workers;
    // Never the same group again: it changed or it failed.
    wo.min_epoch = first_group ? 0 : last_world + 1;
    wo.timeout = elastic.timeout;
    wo.comm = elastic.comm;
    wo.log = log;
    ZS_ASSIGN_OR_RETURN(World world, FormWorld(member, wo));
    first_group = false;
    last_world = world.epoch;
    absl::StatusOr<int> gas =
        AccumulationSteps(global, world.size, elastic.policy);
    if (!gas.ok()) {
      if (!absl::IsFailedPrecondition(gas.status())) return gas.status();
      // kRefuse: wait for the membership to change.
      log(absl::StrCat("epoch ", world.epoch, ": ", gas.status().message()));
      world.comm.reset();
      const absl::Time deadline = absl::Now() + elastic.timeout;
      while (member->epoch() == world.epoch) {
        if (absl::Now() > deadline) return gas.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    if (*gas * world.size != global) {
      log(absl::StrCat("epoch ", world.epoch, ": ", world.size,
                       " workers do not divide the global batch of ", global,
                       " micro-batches; batch policy rescale: ", *gas,
                       " each, ", *gas * world.size, " per step"));
    }
    zero::TrainSpec group_spec = spec;
    group_spec.zero.gradient_accumulation_steps = *gas;
    zero::ElasticHooks hooks;
    hooks.world_epoch = [member] { return member->epoch(); };
    hooks.min_epoch = epoch;
    GroupRun run = TrainGroup(group_spec, world, hooks, client, on_step,
                              progress, &result, &first);
    epoch = std::max(epoch, run.epoch);
    if (run.done && run.status.ok()) return result;
    if (run.status.ok()) {
      log(absl::StrCat("epoch ", world.epoch,
                       ": the membership changed; leaving the group at step ",
                       first + static_cast<int64_t>(result.stats.size())));
      failures = 0;
      continue;
    }
    failures = run.steps_committed > 0 ? 1 : failures + 1;
    if (failures >= elastic.max_failures) {
      return absl::Status(run.status.code(),
                          absl::StrCat(failures,
                                       " worker groups in a row failed without "
                                       "committing a step; the last: ",
                                       run.status.message()));
    }
    log(absl::StrCat("epoch ", world.epoch, ": ", run.status.ToString(),
                     "; forming a new group"));
  }
}

}  // namespace zeroshard::elastic
