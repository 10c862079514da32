#include "worker/engine/step_stats.h"

#include "absl/strings/str_format.h"

namespace zeroshard::engine {

std::string DescribeStepStats(const StepStats& s) {
  return absl::StrFormat(
             "step=%d loss=%.6f global_loss=%.6f norm=%.4g clip=%.4g lr=%.4g "
             "scale=%.9g%s "
             "state=%dB (p=%d g=%d opt=%d) "
             "live_peak=%dB sent: ar=%d rs=%d ag=%d bc=%d push=%d gather=%dB "
             "time: compute=%.3fs comm_wait=%.3fs server_wait=%.3fs step=%.3fs",
             s.step, s.loss, s.global_loss, s.grad_norm, s.clip_coef, s.lr,
             s.loss_scale, s.skipped ? " (skipped)" : "", s.model_state_bytes(),
             s.param_bytes, s.grad_bytes, s.optimizer_bytes,
             s.peak_live_param_bytes, s.all_reduce.bytes_sent,
             s.reduce_scatter.bytes_sent, s.all_gather.bytes_sent,
             s.broadcast.bytes_sent, s.server_push.bytes_sent,
             s.server_gather.bytes_received, s.compute_seconds,
             s.comm_wait_seconds, s.server_wait_seconds, s.step_seconds) +
         absl::StrFormat(
             " phases: fwd=%.4fs bwd=%.4fs rs_wait=%.4fs push=%.4fs "
             "sync=%.4fs srv_step=%.4fs gather=%.4fs ag_wait=%.4fs",
             s.phases.forward, s.phases.backward, s.phases.reduce_wait,
             s.phases.push, s.phases.sync, s.phases.server_step,
             s.phases.gather, s.phases.all_gather_wait);
}

}  // namespace zeroshard::engine
