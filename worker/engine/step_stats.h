// StepStats: what one worker records for one optimizer step of the ZeRO
// engine (engine.h): the model-state bytes it holds, the live window of
// gathered parameters, the bytes each kind of collective and server RPC
// moved, and where the time went.
//
// Bytes held (fp32 training: 4-byte parameters, gradients and moments; the
// parameters are their own master copy, so the optimizer holds m and v):
//   param_bytes      stages 0-2: 4Ψ (full copy; 8Ψ with the delayed
//                    update, engine.h); stage 3: 4·(this rank's
//                    part of every unit) + 4·(persistent units, whole);
//                    stage 3 + offload: 4·(persistent units)
//   grad_bytes       stages 0-1: 4Ψ (full-size accumulation buffer);
//                    stages 2-3: 4·(this rank's part of every bucket);
//                    server-side aggregation: 0 (pushed per micro-batch)
//   optimizer_bytes  stage 0: 8Ψ (m, v), + 4Ψ fp32 master weights with
//                    fp16/bf16; stages 1-3: 0 (on the servers)
// (fp16/bf16 on the CPU model: the rounded 16-bit values are held in fp32
// buffers, so parameters and gradients still count 4 bytes each.)
// Not counted (like activations): the model's full-size per-micro-batch
// gradient buffer that backward writes and the buckets reduce in place, and
// in stage 3 the full-size parameter buffer the CPU model reads; released
// ranges of it are accounted as freed (and poisoned with NaN).
//   peak_live_param_bytes  stage 3: most bytes of gathered (or in-flight)
//                    units at once during the step; 0 otherwise.
//   device_bytes     a model on a device: the device memory it holds for
//                    parameters and gradients (and a resident optimizer's
//                    moments; activations not counted; engine/model.h);
//                    0 for a model in host memory.
//   activation_bytes the model's activation memory (on its device, if it
//                    has one): less with activation checkpointing.
//
// Traffic: payload bytes as the collectives report them (collective.h
// OpStats) and as the client sends/receives them (4 bytes per fp32 element;
// protocol framing not counted).
#ifndef ZEROSHARD_WORKER_ENGINE_STEP_STATS_H_
#define ZEROSHARD_WORKER_ENGINE_STEP_STATS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::engine {

struct Traffic {
  uint64_t ops = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  void Add(uint64_t sent, uint64_t received) {
    ++ops;
    bytes_sent += sent;
    bytes_received += received;
  }
};

struct StepStats {
  int64_t step = 0;  // optimizer steps completed after this one
  double loss = 0;   // mean of this rank's micro-batch losses
  // Mean over all ranks' micro-batches (rank losses added in rank order).
  double global_loss = 0;
  double grad_norm = 0;
  float clip_coef = 1;
  // Non-finite gradients: the update (and the lr schedule) was skipped.
  bool skipped = false;
  double lr = 0;  // learning rate of this update (0 when skipped)
  // The loss scale this step's gradients carried (fp16; 1 otherwise), and
  // the scaler's after the step (lower after an overflow past hysteresis,
  // higher after loss_scale_window clean steps).
  double loss_scale = 1;
  double next_loss_scale = 1;
  uint64_t tokens = 0;  // tokens of the step, all ranks: W·gas·B·T

  uint64_t param_bytes = 0;
  uint64_t grad_bytes = 0;
  uint64_t optimizer_bytes = 0;
  uint64_t peak_live_param_bytes = 0;
  uint64_t device_bytes = 0;
  uint64_t activation_bytes = 0;
  uint64_t model_state_bytes() const {
    return param_bytes + grad_bytes + optimizer_bytes;
  }

  Traffic all_reduce, reduce_scatter, all_gather, broadcast;
  Traffic server_push, server_gather, server_control;  // control: no payload
  uint64_t collective_bytes_sent() const {
    return all_reduce.bytes_sent + reduce_scatter.bytes_sent +
           all_gather.bytes_sent + broadcast.bytes_sent;
  }

  double compute_seconds = 0;      // forward and backward, less waits inside
  double comm_wait_seconds = 0;    // blocked on collectives
  double server_wait_seconds = 0;  // blocked on server RPCs
  double step_seconds = 0;         // first Forward to the end of Step
  // The end of the previous step to the end of this one: step_seconds
  // plus what ran between the steps (the caller's bookkeeping, data, and
  // the engine's work hidden there, such as stage 1-2 all-gathers behind
  // the next forward). What throughput sees. The first step of an engine
  // and a step redone after a roll back: step_seconds.
  double period_seconds = 0;

  // Where this rank's step time went, by phase (seconds; this rank's clock,
  // summed over the step's micro-batches). The waits are the time the
  // engine's thread was blocked, so a collective hidden behind compute
  // counts nothing; what is left of step_seconds (bookkeeping, gradient
  // accumulation, copies) is step_seconds - Phases::sum().
  struct Phases {
    double forward = 0;          // forward compute, less the waits inside
    double backward = 0;         // backward compute, less the waits inside
    double reduce_wait = 0;      // gradient reduce-scatter / all-reduce
    double push = 0;             // this rank's gradient onto the servers
    double sync = 0;             // norm and loss exchange among the ranks
    double server_step = 0;      // prepare, decision and commit (stages
                                 // 1-3); the local AdamW (stage 0)
    double gather = 0;           // parameters from the servers
    double all_gather_wait = 0;  // parameter all-gathers (stage 3: units)
    double sum() const {
      return forward + backward + reduce_wait + push + sync + server_step +
             gather + all_gather_wait;
    }
  };
  Phases phases;

  // The last micro-batch's timeline, in NowSeconds() (op_wait.h) of the
  // engine's thread: when each gradient bucket's collective was issued (in
  // reduction order, grad_reducer.h), and when the model's backward
  // returned. With overlap_comm each bucket is issued from the gradient
  // hook, before backward returns; without, all after it.
  std::vector<double> bucket_issue_seconds;
  double backward_end_seconds = 0;
};

// One line, "step=3 loss=... state=... sent=... time: ... phases: fwd=...s
// bwd=...s ..." (the phases in Phases' order).
std::string DescribeStepStats(const StepStats& s);

}  // namespace zeroshard::engine

#endif  // ZEROSHARD_WORKER_ENGINE_STEP_STATS_H_
