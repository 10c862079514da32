#include "worker/train/run_metrics.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_format.h"

namespace zeroshard::train {

std::string StartRecord(const RunInfo& i) {
  return absl::StrFormat(
      "{\"event\":\"start\",\"rank\":%d,\"world\":%d,\"stage\":%d,"
      "\"offload_param\":%s,\"params\":%d,\"steps\":%d,\"micro_batch\":%d,"
      "\"seq_len\":%d,\"grad_accum\":%d}",
      i.rank, i.world, i.stage, i.offload_param ? "true" : "false", i.params,
      i.steps, i.micro_batch, i.seq_len, i.grad_accum);
}

std::string JsonDouble(double v, int digits) {
  return std::isfinite(v) ? absl::StrFormat("%.*g", digits, v) : "null";
}

std::string JsonFixed(double v, int decimals) {
  return std::isfinite(v) ? absl::StrFormat("%.*f", decimals, v) : "null";
}

std::string StepRecord(const engine::StepStats& s) {
  const uint64_t server = s.server_push.bytes_sent +
                          s.server_gather.bytes_received +
                          s.server_gather.bytes_sent;
  const uint64_t collective = s.collective_bytes_sent();
  return absl::StrFormat(
      "{\"event\":\"step\",\"step\":%d,\"loss\":%s,\"rank_loss\":%s,"
      "\"lr\":%s,\"grad_norm\":%s,\"clip_coef\":%s,\"loss_scale\":%s,"
      "\"skipped\":%s,\"tokens\":%d,\"step_seconds\":%s,\"period_seconds\":%s,"
      "\"tokens_per_s\":%s,\"bytes_moved\":%d,\"collective_bytes\":%d,"
      "\"server_bytes\":%d,\"model_state_bytes\":%d,\"param_bytes\":%d,"
      "\"grad_bytes\":%d,\"optimizer_bytes\":%d,"
      "\"peak_live_param_bytes\":%d,\"device_bytes\":%d,"
      "\"activation_bytes\":%d,"
      "\"phase_seconds\":{\"forward\":%s,"
      "\"backward\":%s,\"reduce_wait\":%s,\"push\":%s,\"sync\":%s,"
      "\"server_step\":%s,\"gather\":%s,\"all_gather_wait\":%s}}",
      s.step, JsonDouble(s.global_loss, 7), JsonDouble(s.loss, 7),
      JsonDouble(s.lr, 6), JsonDouble(s.grad_norm, 6),
      JsonDouble(s.clip_coef, 6), JsonDouble(s.loss_scale, 9),
      s.skipped ? "true" : "false", s.tokens, JsonFixed(s.step_seconds, 6),
      JsonFixed(s.period_seconds, 6),
      JsonFixed(s.step_seconds > 0 ? s.tokens / s.step_seconds : 0.0, 1),
      collective + server, collective, server, s.model_state_bytes(),
      s.param_bytes, s.grad_bytes, s.optimizer_bytes, s.peak_live_param_bytes,
      s.device_bytes, s.activation_bytes, JsonFixed(s.phases.forward, 6),
      JsonFixed(s.phases.backward, 6), JsonFixed(s.phases.reduce_wait, 6),
      JsonFixed(s.phases.push, 6), JsonFixed(s.phases.sync, 6),
      JsonFixed(s.phases.server_step, 6), JsonFixed(s.phases.gather, 6),
      JsonFixed(s.phases.all_gather_wait, 6));
}

std::string EndRecord(double eval_loss, int64_t eval_tokens) {
  return absl::StrFormat(
      "{\"event\":\"end\",\"eval_loss\":%s,\"eval_tokens\":%d}",
      JsonDouble(eval_loss, 7), eval_tokens);
}

std::string JsonEvent(absl::string_view line) {
  const absl::string_view key = "\"event\":\"";
  const size_t at = line.find(key);
  if (at == absl::string_view::npos) return "";
  const size_t begin = at + key.size();
  const size_t end = line.find('"', begin);
  if (end == absl::string_view::npos) return "";
  return std::string(line.substr(begin, end - begin));
}

std::optional<double> JsonNumber(absl::string_view line,
                                 absl::string_view key) {
  const std::string pattern = absl::StrFormat("\"%s\":", key);
  const size_t at = line.find(pattern);
  if (at == absl::string_view::npos) return std::nullopt;
  const std::string rest(line.substr(at + pattern.size(), 32));
  if (rest.rfind("true", 0) == 0) return 1.0;
  if (rest.rfind("false", 0) == 0) return 0.0;
  char* end = nullptr;
  const double v = std::strtod(rest.c_str(), &end);
  if (end == rest.c_str()) return std::nullopt;
  return v;
}

}  // namespace zeroshard::train
