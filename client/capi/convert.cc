#include "client/capi/convert.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/capi/handles.h"
#include "client/security.h"
#include "common/model_spec.h"
#include "common/security/tokens.h"
#include "common/status_macros.h"

namespace zeroshard::capi {
namespace {

absl::Status Bad(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

std::string Str(const char* s) { return s == nullptr ? std::string() : s; }

// Copies `s` into the fixed array `out` (NUL-terminated, cut to fit).
template <size_t N>
void CopyString(const std::string& s, char (&out)[N]) {
  capi::CopyString(s, out, N);
}

absl::Status ApplySecurity(const zs_connect_options& o, ClientOptions* out) {
  ClientSecurityFlags f;
  f.tls_ca = Str(o.tls_ca_file);
  f.tls_cert = Str(o.tls_cert_file);
  f.tls_key = Str(o.tls_key_file);
  f.token_file = Str(o.token_file);
  f.insecure = o.insecure != 0;
  const bool any_tls =
      !f.tls_ca.empty() || !f.tls_cert.empty() || !f.tls_key.empty();
  if (o.insecure != 0 && o.insecure != 1) {
    return Bad(absl::StrCat("insecure is ", o.insecure, "; give 0 or 1"));
  }
  if (f.insecure && any_tls) {
    return Bad(
        "insecure = 1 excludes tls_ca_file, tls_cert_file and "
        "tls_key_file");
  }
  if (!f.insecure && f.tls_ca.empty()) {
    return Bad(any_tls ? "tls_cert_file and tls_key_file need tls_ca_file "
                         "(the CA of the servers)"
                       : "give tls_ca_file (TLS) or insecure = 1 (plaintext)");
  }
  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return Bad("give tls_cert_file and tls_key_file together");
  }
  const std::string token = Str(o.token);
  if (!token.empty() && !f.token_file.empty()) {
    return Bad("give token or token_file, not both");
  }
  if (token.empty()) return ApplyClientSecurity(f, out);
  // The rule a token file or $ZEROSHARD_TOKEN is held to
  // (common/security/tokens.h): the token goes into an HTTP/2 header, which
  // gRPC refuses (aborting the process) for control characters.
  if (token.size() < security::kMinTokenLength) {
    return Bad(absl::StrCat("token is ", token.size(), " bytes; give at least ",
                            security::kMinTokenLength,
                            " printable characters"));
  }
  if (const size_t i = security::FirstBadTokenByte(token);
      i != absl::string_view::npos) {
    return Bad(absl::StrCat("token has byte ", i,
                            " outside printable ASCII (no spaces, no "
                            "control characters)"));
  }
  ZS_ASSIGN_OR_RETURN(out->credentials, ClientCredentials(f));
  if (f.tls_ca.empty()) out->credentials = nullptr;  // plaintext
  out->interceptors = [token] {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        v;
    v.push_back(BearerTokenInterceptorFactory(token));
    return v;
  };
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClientOptions> ToClientOptions(const zs_connect_options& o) {
  ClientOptions out;
  if (o.addresses == nullptr || o.addresses[0] == '\0') {
    return Bad("addresses is empty: give \"host:port,host:port,...\"");
  }
  int index = 0;
  for (absl::string_view a : absl::StrSplit(o.addresses, ',')) {
    a = absl::StripAsciiWhitespace(a);
    if (a.empty()) {
      return Bad(absl::StrCat("addresses has an empty entry (shard ", index,
                              ") in \"", o.addresses, "\""));
    }
    out.addresses.emplace_back(a);
    ++index;
  }
  if (!(std::isfinite(o.deadline_seconds) && o.deadline_seconds > 0 &&
        o.deadline_seconds <= 1e6)) {
    return Bad(absl::StrCat("deadline_seconds is ", o.deadline_seconds,
                            "; give a value in (0, 1e6]"));
  }
  out.deadline = std::chrono::milliseconds(
      std::max<int64_t>(1, std::llround(o.deadline_seconds * 1000)));
  if (o.max_attempts < 1 || o.max_attempts > 1000) {
    return Bad(absl::StrCat("max_attempts is ", o.max_attempts,
                            "; give a value in [1, 1000]"));
  }
  out.max_attempts = o.max_attempts;
  ZS_RETURN_IF_ERROR(ApplySecurity(o, &out));
  return out;
}

absl::StatusOr<v1::ModelSpec> ToModelSpec(const zs_model& model,
                                          const std::string& job_id,
                                          uint32_t num_servers) {
  if (job_id.empty()) {
    return Bad("the client has no job_id: give zs_connect_options.job_id");
  }
  if (model.num_tensors == 0) return Bad("model.num_tensors is 0");
  if (model.tensors == nullptr) return Bad("model.tensors is NULL");
  if (model.num_groups == 0) return Bad("model.num_groups is 0");
  if (model.groups == nullptr) return Bad("model.groups is NULL");
  if (model.num_tensors > (1u << 24) || model.num_groups > (1u << 16)) {
    return Bad(absl::StrCat("model.num_tensors ", model.num_tensors,
                            " or num_groups ", model.num_groups,
                            " is implausibly large"));
  }
  v1::ModelSpec spec;
  spec.set_job_id(job_id);
  spec.set_num_servers(num_servers);
  spec.set_alignment(model.alignment);
  spec.set_contributions_per_step(model.contributions_per_step);
  if (model.serving_dtype != ZS_DTYPE_BF16 &&
      model.serving_dtype != ZS_DTYPE_FP16) {
    return Bad(absl::StrCat("model.serving_dtype is ", model.serving_dtype,
                            "; give ZS_DTYPE_BF16 (2) or ZS_DTYPE_FP16 (3)"));
  }
  spec.set_serving_dtype(static_cast<v1::DType>(model.serving_dtype));
  for (size_t i = 0; i < model.num_tensors; ++i) {
    const zs_tensor& t = model.tensors[i];
    const std::string f = absl::StrCat("model.tensors[", i, "]");
    if (t.name == nullptr) return Bad(f + ".name is NULL");
    ZS_RETURN_IF_ERROR(CheckUtf8(t.name, f + ".name"));
    if (t.ndim == 0 || t.ndim > 64) {
      return Bad(absl::StrCat(f, " ('", t.name, "').ndim is ", t.ndim,
                              "; give 1 to 64 dimensions"));
    }
    if (t.shape == nullptr) return Bad(f + ".shape is NULL");
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (size_t d = 0; d < t.ndim; ++d) ts->add_shape(t.shape[d]);
    ts->set_param_group(t.param_group);
  }
  for (size_t i = 0; i < model.num_groups; ++i) {
    const zs_param_group& g = model.groups[i];
    v1::ParamGroup* pg = spec.add_param_groups();
    pg->set_beta1(g.beta1);
    pg->set_beta2(g.beta2);
    pg->set_eps(g.eps);
    pg->set_weight_decay(g.weight_decay);
    pg->set_lr_scale(g.lr_scale);
    if (g.no_bias_correction != 0 && g.no_bias_correction != 1) {
      return Bad(absl::StrCat("groups[", i, "].no_bias_correction is ",
                              g.no_bias_correction, "; give 0 or 1"));
    }
    pg->set_no_bias_correction(g.no_bias_correction == 1);
  }
  spec.mutable_init()->set_seed(model.init_seed);
  spec.mutable_init()->set_std(model.init_std);
  ZS_RETURN_IF_ERROR(ValidateSpec(spec));
  return spec;
}

v1::TrainerState ToProto(const zs_trainer_state& s) {
  v1::TrainerState p;
  p.set_step(s.step);
  p.set_updates(s.updates);
  p.set_data_epoch(s.data_epoch);
  p.set_data_shard(s.data_shard);
  p.set_data_offset(s.data_offset);
  p.set_seed(s.seed);
  p.set_loss_scale(s.loss_scale);
  p.set_loss_scale_hysteresis(s.loss_scale_hysteresis);
  p.set_loss_scale_iteration(s.loss_scale_iteration);
  p.set_loss_scale_last_overflow(s.loss_scale_last_overflow);
  return p;
}

zs_trainer_state FromProto(const v1::TrainerState& p) {
  zs_trainer_state s;
  s.step = p.step();
  s.updates = p.updates();
  s.data_epoch = p.data_epoch();
  s.data_shard = p.data_shard();
  s.data_offset = p.data_offset();
  s.seed = p.seed();
  s.loss_scale = p.loss_scale();
  s.loss_scale_hysteresis = p.loss_scale_hysteresis();
  s.loss_scale_iteration = p.loss_scale_iteration();
  s.loss_scale_last_overflow = p.loss_scale_last_overflow();
  return s;
}

zs_server_stats FromProto(const v1::GetStatsResponse& p) {
  zs_server_stats s;
  std::memset(&s, 0, sizeof(s));
  s.shard_index = p.shard_index();
  s.num_shards = p.num_shards();
  s.step = p.step();
  s.optimizer_steps = p.optimizer_steps();
  s.epoch = p.epoch();
  if (p.has_spec()) {
    absl::StatusOr<PartitionPlan> plan = PlanForSpec(p.spec());
    if (plan.ok() && p.shard_index() < plan->num_servers()) {
      const Range r = plan->ServerRange(p.shard_index());
      s.owned_offset = r.begin;
      s.owned_count = r.size();
    }
  }
  s.bytes_held = p.bytes_held();
  s.bytes_held_rss = p.bytes_held_rss();
  s.contributions_applied = p.contributions_applied();
  s.duplicates_ignored = p.duplicates_ignored();
  s.requests_rejected = p.requests_rejected();
  s.bytes_pushed = p.bytes_pushed();
  s.bytes_gathered = p.bytes_gathered();
  s.last_step_seconds = p.last_step_seconds();
  s.optimizer_elements_per_second = p.optimizer_elements_per_second();
  s.incarnation = p.incarnation();
  s.restored_step = p.restored_step();
  s.checkpoints_written = p.checkpoints_written();
  const int n = std::min<int>(p.checkpoint_steps_size(), 16);
  for (int i = 0; i < n; ++i) s.checkpoint_steps[i] = p.checkpoint_steps(i);
  s.num_checkpoint_steps = static_cast<uint32_t>(n);
  s.awaiting_restore = p.awaiting_restore() ? 1 : 0;
  CopyString(p.storage(), s.storage);
  s.trainer_state = FromProto(p.trainer_state());
  return s;
}

zs_member_info FromProto(const v1::Member& m) {
  zs_member_info out;
  std::memset(&out, 0, sizeof(out));
  out.member_id = m.member_id();
  out.rank = m.rank();
  out.local_rank = m.local_rank();
  out.local_size = m.local_size();
  CopyString(m.worker_name(), out.worker_name);
  CopyString(m.node(), out.node);
  CopyString(m.address(), out.address);
  return out;
}

}  // namespace zeroshard::capi
