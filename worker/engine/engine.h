// ZeroEngine: ZeRO-style data-parallel training of any model that declares
// its parameters as units of one flat layout (model.h; GPT-2:
// worker/gpt2/engine_model.h) in DeepSpeed's shape:
//
//   ZS_ASSIGN_OR_RETURN(auto engine, ZeroEngine::Create(options, model_def,
//                                                        init, comm, client));
//   for (...) {                       // every micro-batch
//     ZS_ASSIGN_OR_RETURN(float loss, engine->Forward(batch));
//     ZS_RETURN_IF_ERROR(engine->Backward());
//     ZS_RETURN_IF_ERROR(engine->Step());  // updates every gas-th call
//   }
//
// Stages (ZeroOptions::stage), W ranks of `comm`, K shard servers:
//   0  DDP: per-bucket all-reduce, local AdamW (optimizer.h); no servers.
//      One rank in fp32 with a model that keeps its parameters on a device
//      (Model::resident_optimizer, model.h): AdamW runs there too, so the
//      parameters, gradients and moments never cross to the host during a
//      step (resident_grad_path.h); the same arithmetic, and on the
//      host-emulated device the same bits.
//   1  gradients reduce-scattered per bucket while backward runs; each rank
//      pushes its reduced parts to the servers that own them; the leader
//      (rank 0) prepares and commits; each rank gathers its slice of the
//      updated parameters from the servers and the slices are all-gathered.
//      The full-size gradient buffer is kept through the step.
//   2  as 1, keeping only this rank's gradient parts.
//      Stages 1-2 without recovery (no checkpoints, not elastic): the
//      model's units (model.h) are grouped into all-gather buckets of up
//      to allgather_bucket_size elements; a thread fetches this rank's part
//      of every unit from the servers in the order the forward needs them
//      and all-gathers each bucket once its parts are in, and the forward
//      waits for a unit (the model's unit hook) only until its parameters
//      are complete (behind_gather.h), so the fetch and the all-gather
//      overlap the next forward instead of ending the step. Until the next
//      Backward the engine's caller issues nothing on `comm` itself.
//      With delayed_update_from = N > 0 (ZeRO-Offload's one-step delayed
//      parameter update; changes the arithmetic), the commit of each step
//      s >= N - 1 runs on a thread of its own, which then starts the fetch
//      and all-gathers of its parameters into a second buffer (a second
//      BehindGather), while the next step trains on the parameters it has:
//      step s + 1's Backward waits for that commit (its pushes go to step
//      s + 1) and every all-gather issued; the end of step s + 1 waits for
//      the buffer and copies it in, before step s + 2. So the push, commit,
//      fetch and all-gather of a step overlap the whole next step; the
//      worker holds 4Ψ more bytes (param_bytes 8Ψ). ReadParameters (and
//      the worker's evaluation, which reads them) gives the servers'
//      newest, without changing what the next step trains on.
//   3  as 2, and parameters partitioned by the model's units
//      (param_window.h): gathered
//      just in time for forward and backward, released after use, the next
//      unit prefetched; after the commit each rank gathers its parts from
//      the servers. offload_param_server: no parts kept; every use fetches
//      this rank's part of the unit from the servers, then all-gathers.
//      Units of at most stage3_param_persistence_threshold elements are
//      persistent: every rank fetches them whole after each commit and
//      never gathers or releases them. Without recovery (no checkpoints,
//      not elastic) the fetch after a commit returns once issued and each
//      unit waits for its part when first needed, so the fetch overlaps
//      the next forward (param_window.h lazy_fetch).
//
// Gradients leave backward through one GradPath (grad_path.h), one per
// mode; reducing among the workers, each part is pushed as soon as its
// reduce-scatter has finished in the step's last micro-batch (grad_
// reducer.h). Reduction among the workers (grad_reducer.h; every stage, the
// same bits on every stage and K): identical parts are accumulated and scaled;
// each rank sums the squares of its parts in fp64; the W partials (with
// each rank's loss sum) are all-gathered (a bit copy) and added in rank
// order on every rank; DecideStep (common/optim/clip.h) turns them into the
// norm and torch 1.13's clip coefficient, applied as AdamW's grad_scale.
// The servers' own partial norms (which depend on K) are not used.
// Server-side aggregation (ZeroOptions::server_aggregation, stages 1-3;
// grad_pusher.h): no gradient collective; each rank pushes every
// micro-batch's scaled gradient and the servers sum the W·gas
// contributions in a fixed order; the norm then comes from the servers'
// prepare (their fp64 partials, added in shard order), so the leader
// decides clip and skip. Deterministic for a given W and K, but not
// bit-identical to reduction among workers (the sums associate
// differently).
//
// Non-finite gradients (a NaN/Inf norm, seen identically by every rank):
// the update is skipped — stage 0 leaves its parameters and moments alone,
// stages 1-3 push and commit the step with skip — and the learning-rate
// schedule does not advance: update k (0-based, skipped steps not counted)
// uses engine::UpdateLearningRate(options.lr_schedule, k).
//
// Mixed precision (ZeroOptions::precision fp16 / bf16; engine/precision.h):
// the model reads the master weights rounded to the type — stages 1-2
// round the all-gathered copy after each fetch, stage 3 each unit when the
// model needs it, stage 0 keeps an fp32 master copy (counted with the
// optimizer's bytes) that AdamW updates and the model reads rounded — and
// the gradient hook multiplies each part's gradients by the loss scale and
// rounds them to the type before they are reduced or pushed. Reduction,
// norm and optimizer stay fp32. An fp16 overflow is a non-finite norm (or
// the servers' overflow flag): the step is skipped on every shard as above.
// Every rank keeps the same loss scaler (engine/loss_scaler.h) and updates
// it from the decision all ranks share, so their scales never differ; its
// state goes into every commit's and checkpoint's TrainerState and comes
// back with a roll back or a continued start.
//
// The step against the servers (stages 1-3) is the client library's step
// protocol (client/step_protocol.h; the engine's ranks are its StepGroup,
// comm_group.h): pushes → the leader's prepare, decision and commit (and a
// checkpoint every checkpoint_interval steps) → the outcome on every rank
// → gathers; with checkpoints on, a failure rolls every rank back to the
// newest common checkpoint (step, updates, data position and loss scaler
// restored; rollbacks() counts it) or retries a failed fetch.
//
// Initialisation: stage 0 copies `initial_params`; stages 1-3 start the
// protocol (register the model's spec, optimizer.h; rank 0 of a fresh job
// writes `initial_params`, and checkpoints step 0 with checkpoints on; a
// job whose servers hold a later state resumes from it), a barrier, then
// every rank fetches what it keeps.
//
// Elastic groups (ElasticHooks; worker/elastic/elastic_trainer.h): the
// engine of a worker group formed after a worker left or joined starts
// from the servers' last commit when they are consistent (client/
// rollback.h ContinueState) — step, updates and data position from the
// commit's trainer state, a new epoch above every server's and the previous
// group's, so that contributions of the step the old group left unfinished
// are discarded — and from the newest checkpoint otherwise. Every step's
// outcome word from the leader also carries the newest membership epoch
// the leader knows (world_epoch()); the trainer leaves the group at that
// step boundary when it differs from the group's.
//
// The engine creates and owns the model over its own flat buffers (it
// needs the engine's unit hook). Threading: one thread calls the engine; the
// communicator's progress thread and the client's RPC threads work in the
// background. Errors: a collective, server or model error is returned;
// afterwards the engine (and the communicator) must be considered broken.
#ifndef ZEROSHARD_WORKER_ENGINE_ENGINE_H_
#define ZEROSHARD_WORKER_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/shard_client.h"
#include "client/step_protocol.h"
#include "common/optim/clip.h"
#include "worker/collective/collective.h"
#include "worker/engine/behind_gather.h"
#include "worker/engine/comm_group.h"
#include "worker/engine/grad_path.h"
#include "worker/engine/loss_scaler.h"
#include "worker/engine/model.h"
#include "worker/engine/optimizer.h"
#include "worker/engine/param_window.h"
#include "worker/engine/step_stats.h"
#include "worker/engine/zero_options.h"

namespace zeroshard::engine {

struct ElasticHooks {
  // The newest membership epoch this process knows; the leader calls it
  // once per step (any thread may update what it returns).
  std::function<uint64_t()> world_epoch;
  // Pushes and commits use an epoch above this: the previous group's.
  uint64_t min_epoch = 0;
};

class ZeroEngine {
 public:
  // Collective: every rank calls it. Creates the model of `model` over the
  // engine's buffers. `initial_params` (num_params floats) is read on every
  // rank for stage 0 and on rank 0 for stages 1-3 (others may pass an empty
  // span). `comm` must outlive the engine; `client` too (stages 1-3; may be
  // null for stage 0). INVALID_ARGUMENT for bad options, a bad layout or
  // sizes; the model's, server and collective errors as they come.
  static absl::StatusOr<std::unique_ptr<ZeroEngine>> Create(
      const ZeroOptions& options, const ModelDef& model,
      absl::Span<const float> initial_params, collective::Communicator* comm,
      ShardClient* client, const ElasticHooks* elastic = nullptr);
  ~ZeroEngine();

  // One micro-batch. Returns the micro-batch's mean loss.
  absl::StatusOr<float> Forward(const MicroBatch& batch);
  // A token model's micro-batch (B·T tokens and next tokens).
  absl::StatusOr<float> Forward(absl::Span<const int> inputs,
                                absl::Span<const int> targets) {
    return Forward(MicroBatch{inputs, {}, targets});
  }
  // Backward of the last Forward, sending gradient buckets on as they
  // finish (the GradPath).
  absl::Status Backward();
  // Ends a micro-batch; the gradient_accumulation_steps-th call of a step
  // runs the optimizer step (collective). Sets *stepped (if not null).
  absl::Status Step(bool* stepped = nullptr);

  // Optimizer steps done (skipped ones included).
  int64_t global_step() const { return step_; }
  // Updates applied (steps less skipped ones): the lr schedule's step.
  int64_t updates() const { return updates_; }
  // The loss scale of the next step's gradients (1 unless fp16).
  double loss_scale() const { return scaler_.scale(); }
  // Stats of the last optimizer step.
  const StepStats& last_step_stats() const { return last_stats_; }
  // The current parameters (num_params floats): stages 0-2 from the local
  // copy (the device's, stage 0 with a resident optimizer); stage 3 read
  // from the servers. Not collective.
  absl::Status ReadParameters(absl::Span<float> out);

  // Recorded in checkpoints (ZeroOptions::checkpoint_interval): the data
  // loader's position of the next step; the trainer sets it before each
  // Step(). (The run's seed and data files come from the options.)
  void set_data_position(int64_t epoch, int64_t shard, int64_t offset);
  // Times every rank rolled back to a checkpoint, counting a start from
  // one. Afterwards global_step() is the checkpoint's step and
  // restored_state() the workers' state recorded with it (the run's shape
  // fields, world_size .. data, on rank 0 only: client/step_protocol.h).
  int rollbacks() const { return rollbacks_; }
  const v1::TrainerState& restored_state() const { return restored_; }
  // The workers' state now (step, updates, data position, seed, scaler,
  // and the run's shape: world size, batch, lr, data).
  v1::TrainerState StateNow() const;
  // Why the last roll back happened (step_protocol.h Outcome::error).
  const std::string& rollback_reason() const { return rollback_reason_; }
  // Elastic: the engine started from the servers' last commit (then
  // restored_state() is that commit's state); the membership epoch of the
  // leader's last step word; the epoch of pushes and commits.
  bool continued() const { return continued_; }
  uint64_t world_epoch() const {
    return protocol_ ? protocol_->world_epoch() : 0;
  }
  uint64_t epoch() const { return protocol_ ? protocol_->epoch() : 0; }

  Model& model() { return *model_; }
  const ModelLayout& layout() const { return model_->layout(); }
  const ZeroOptions& options() const { return options_; }
  const collective::Communicator& comm() const { return *comm_; }

 private:
  ZeroEngine(const ZeroOptions& options, collective::Communicator* comm,
             ShardClient* client)
      : options_(options),
        comm_(comm),
        client_(client),
        group_(comm, &stats_),
        scaler_(ScalerOptions(options)) {}
  static LossScalerOptions ScalerOptions(const ZeroOptions& options);
  bool mixed() const { return options_.precision != Precision::kFp32; }
  absl::Status Init(const ModelDef& model,
                    absl::Span<const float> initial_params,
                    const ElasticHooks* elastic);
  absl::Status OptimizerStep();
  // Stage 0: AdamW on this rank's copy with the decision.
  absl::Status LocalStep(const StepDecision& d, double lr);
  // All-gathers each rank's sum of squares (`squares`, this rank's) and
  // loss sum; `partials` in rank order, `loss_sum` added in rank order.
  absl::Status ExchangeNormAndLoss(double squares,
                                   std::vector<double>* partials,
                                   double* loss_sum);
  // Every rank moves to `o`'s state when it is a roll back or a continued
  // start (step, updates, loss scaler); true if it did.
  absl::StatusOr<bool> Apply(const Outcome& o);
  // Fetches what this rank keeps from the servers, then (stages 0-2)
  // all-gathers it; with recovery on, a failure anywhere rolls back.
  absl::Status Refresh();
  absl::Status FetchOwn();  // FetchOwnParts, timed as the gather phase
  absl::Status FetchOwnParts();
  // Stages 1-2 behind the forward: every fetch and all-gather done.
  absl::Status WaitBehind();
  // Whether stages 1-2 refresh behind the forward (behind_ is set).
  bool behind() const { return behind_ != nullptr; }
  // The delayed update (engine.h, stages 1-2). DelayedCommit: the commit of
  // `step` and the fetch of its parameters into ahead_params_, on
  // committer_. JoinCommit: waits for that thread and for every all-gather
  // it started to be issued (before a collective of this thread), and
  // returns its error (and keeps returning it: the engine is broken).
  bool delayed(uint64_t step) const {
    return ahead_ != nullptr &&
           step + 1 >= static_cast<uint64_t>(options_.delayed_update_from);
  }
  void DelayedCommit(uint64_t step, absl::Status pushed, StepDecision d,
                     double lr, v1::TrainerState after);
  absl::Status JoinCommit();
  // Waits for ahead_params_ to hold the commit's parameters (if pending).
  absl::Status FinishAhead();
  // The state committed with `step`: StateNow() after it (skipped or not).
  v1::TrainerState StateAfter(uint64_t step, bool skip) const;
  void ResetStats();

  const ZeroOptions options_;
  collective::Communicator* comm_;
  ShardClient* client_;
  std::vector<float> params_, grads_;  // the model's buffers
  std::unique_ptr<Model> model_;
  std::unique_ptr<GradPath> grad_path_;
  std::unique_ptr<ParamWindow> window_;  // stage 3
  // Stages 1-2 without recovery: the refresh behind the forward (null
  // otherwise). After params_, so that it ends first.
  std::unique_ptr<BehindGather> behind_;
  // The delayed update: the parameters of the commit in flight, their
  // fetch, the thread that commits (null / not joinable when off or idle),
  // its status and stats (merged into stats_ on this thread), and whether
  // ahead_params_ holds a commit not copied into params_ yet.
  std::vector<float> ahead_params_;
  std::unique_ptr<BehindGather> ahead_;
  std::thread committer_;
  absl::Status commit_status_;
  StepStats commit_stats_;
  bool ahead_pending_ = false;
  // Where the protocol's waits go: stats_, or commit_stats_ while
  // committer_ runs.
  StepStats* protocol_stats_ = &stats_;
  std::unique_ptr<LocalAdamW> adamw_;  // stage 0
  // Stage 0, one rank, fp32, a model on a device: its optimizer (owned by
  // model_), else null.
  ResidentOptimizer* resident_ = nullptr;
  std::vector<float> master_;  // stage 0, fp16/bf16: the fp32 weights
  int micro_ = 0;              // micro-batches done in this step
  int64_t step_ = 0;           // steps done: the servers' step
  int64_t updates_ = 0;        // steps applied
  double loss_sum_ = 0;
  double step_start_ = -1;
  double last_step_end_ = -1;  // period_seconds; -1: none to count from
  StepStats stats_, last_stats_;
  CommGroup group_;                         // the ranks, for the protocol
  std::unique_ptr<StepProtocol> protocol_;  // stages 1-3
  v1::TrainerState data_position_;          // data_* fields only
  int rollbacks_ = 0;
  std::string rollback_reason_;
  bool continued_ = false;
  v1::TrainerState restored_;
  LossScaler scaler_;
};

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_ENGINE_H_
