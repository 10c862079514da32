// The C API's version and error functions, and everything on a zs_client:
// connect, register, layout, write, push, gather, stats, checkpoint,
// restore (client/zeroshard.h).
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/capi/client_handle.h"
#include "client/capi/convert.h"
#include "client/capi/handles.h"
#include "client/zeroshard.h"
#include "common/model_spec.h"
#include "common/status_macros.h"

namespace zeroshard::capi {
namespace {

// The live client of handle `c`; errors are blamed on it from now on.
absl::StatusOr<std::shared_ptr<ClientHandle>> Client(const zs_client* c,
                                                     Blame* blame) {
  ZS_ASSIGN_OR_RETURN(std::shared_ptr<ClientHandle> client,
                      Lookup<ClientHandle>(c));
  *blame = client;
  return client;
}

}  // namespace
}  // namespace zeroshard::capi

using zeroshard::PartitionPlan;
using zeroshard::Range;
using zeroshard::capi::Blame;
using zeroshard::capi::CheckBuffer;
using zeroshard::capi::CheckRange;
using zeroshard::capi::ClientHandle;
using zeroshard::capi::DTypeBytes;
using zeroshard::capi::NotNull;
using zeroshard::capi::Run;
namespace v1 = zeroshard::v1;

extern "C" {

const char* zs_version(void) { return ZS_VERSION; }

int zs_api_version(void) { return ZS_API_VERSION; }

const char* zs_status_name(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code < 0 || code > 16) return "UNKNOWN_CODE";
  return kNames[code];
}

const char* zs_last_error(void) { return zeroshard::capi::LastError(); }

void zs_connect_options_init(zs_connect_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->deadline_seconds = 60;
  o->max_attempts = 10;
}

int zs_connect(const zs_connect_options* options, zs_client** out) {
  return Run("zs_connect", [&](Blame*) -> absl::Status {
    ZS_RETURN_IF_ERROR(NotNull(options, "options"));
    ZS_RETURN_IF_ERROR(NotNull(out, "out"));
    if (options->job_id != nullptr) {
      if (std::strlen(options->job_id) > 128) {
        return absl::InvalidArgumentError("job_id is over 128 bytes");
      }
      ZS_RETURN_IF_ERROR(
          zeroshard::capi::CheckUtf8(options->job_id, "options->job_id"));
    }
    ZS_ASSIGN_OR_RETURN(zeroshard::ClientOptions copts,
                        zeroshard::capi::ToClientOptions(*options));
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<zeroshard::ShardClient> client,
                        zeroshard::ShardClient::Connect(std::move(copts)));
    auto handle = std::make_shared<ClientHandle>(
        std::move(client), options->job_id ? options->job_id : "");
    *out = reinterpret_cast<zs_client*>(
        zeroshard::capi::Register(std::move(handle)));
    return absl::OkStatus();
  });
}

int zs_close(zs_client* client) {
  return Run("zs_close", [&](Blame*) {
    return zeroshard::capi::Remove(client, ClientHandle::kKind).status();
  });
}

size_t zs_client_error(const zs_client* client, char* buf, size_t size) {
  return zeroshard::capi::CopyErrorOf(client, ClientHandle::kKind, buf, size);
}

void zs_param_group_init(zs_param_group* g) {
  if (g == nullptr) return;
  g->beta1 = 0.9;
  g->beta2 = 0.999;
  g->eps = 1e-8;
  g->weight_decay = 0;
  g->lr_scale = 1;
  g->no_bias_correction = 0;
}

void zs_model_init(zs_model* m) {
  if (m == nullptr) return;
  std::memset(m, 0, sizeof(*m));
  m->alignment = 64;
  m->contributions_per_step = 1;
  m->serving_dtype = ZS_DTYPE_BF16;
}

int zs_register(zs_client* c, const zs_model* model) {
  return Run("zs_register", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(model, "model"));
    ZS_ASSIGN_OR_RETURN(
        v1::ModelSpec spec,
        zeroshard::capi::ToModelSpec(*model, client->job_id(),
                                     client->client()->num_servers()));
    absl::MutexLock lock(client->register_mu());
    if (client->registered()) {
      const std::string diff =
          zeroshard::DescribeSpecDifference(client->client()->spec(), spec);
      if (!diff.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("this client has another model already (", diff,
                         "); a client takes one model: connect another"));
      }
    }
    ZS_RETURN_IF_ERROR(client->client()->RegisterModel(spec));
    client->set_registered();
    return absl::OkStatus();
  });
}

int zs_attach(zs_client* c) {
  return Run("zs_attach", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    absl::MutexLock lock(client->register_mu());
    if (client->registered()) return absl::OkStatus();
    ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats,
                        client->client()->Stats());
    const v1::ModelSpec& spec = stats[0].spec();
    if (!stats[0].has_spec()) {
      return absl::FailedPreconditionError(
          "no model is registered on shard 0: zs_register it first");
    }
    for (size_t k = 1; k < stats.size(); ++k) {
      const std::string diff =
          zeroshard::DescribeSpecDifference(spec, stats[k].spec());
      if (!diff.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "shard ", k, " holds another model than shard 0 (", diff, ")"));
      }
    }
    if (!client->job_id().empty() && spec.job_id() != client->job_id()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the servers hold job '", spec.job_id(), "', not '",
                       client->job_id(), "'"));
    }
    ZS_RETURN_IF_ERROR(client->client()->UseSpec(spec));
    client->set_registered();
    return absl::OkStatus();
  });
}

int zs_num_servers(zs_client* c, uint32_t* num_servers) {
  return Run("zs_num_servers", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(num_servers, "num_servers"));
    *num_servers = client->client()->num_servers();
    return absl::OkStatus();
  });
}

int zs_model_size(zs_client* c, uint64_t* total) {
  return Run("zs_model_size", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(total, "total_elements"));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    *total = plan->total();
    return absl::OkStatus();
  });
}

int zs_tensor_range(zs_client* c, const char* name, uint64_t* offset,
                    uint64_t* count) {
  return Run("zs_tensor_range", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(name, "name"));
    ZS_RETURN_IF_ERROR(NotNull(offset, "offset"));
    ZS_RETURN_IF_ERROR(NotNull(count, "count"));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    ZS_ASSIGN_OR_RETURN(size_t index, plan->FindTensor(name));
    const Range r = plan->tensors()[index].range;
    *offset = r.begin;
    *count = r.size();
    return absl::OkStatus();
  });
}

int zs_server_range(zs_client* c, uint32_t server, uint64_t* offset,
                    uint64_t* count) {
  return Run("zs_server_range", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(offset, "offset"));
    ZS_RETURN_IF_ERROR(NotNull(count, "count"));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    if (server >= plan->num_servers()) {
      return absl::OutOfRangeError(absl::StrCat(
          "server ", server, " of ", plan->num_servers(), " servers"));
    }
    const Range r = plan->ServerRange(server);
    *offset = r.begin;
    *count = r.size();
    return absl::OkStatus();
  });
}

int zs_slice(zs_client* c, uint32_t parts, uint32_t index, uint64_t* offset,
             uint64_t* count) {
  return Run("zs_slice", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(offset, "offset"));
    ZS_RETURN_IF_ERROR(NotNull(count, "count"));
    if (parts == 0 || index >= parts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "part ", index, " of ", parts, ": give parts >= 1, index < parts"));
    }
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    const Range r = plan->WorkerSlice(parts, index);
    *offset = r.begin;
    *count = r.size();
    return absl::OkStatus();
  });
}

int zs_write_parameters(zs_client* c, uint64_t offset, uint64_t count,
                        const float* data, size_t data_bytes) {
  return Run("zs_write_parameters", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    ZS_RETURN_IF_ERROR(CheckRange(*plan, offset, count));
    ZS_RETURN_IF_ERROR(CheckBuffer(data, data_bytes, count, 4, "data"));
    if (count == 0) return absl::OkStatus();
    return client->client()->WriteParameters(Range{offset, offset + count},
                                             data);
  });
}

int zs_push(zs_client* c, uint64_t offset, uint64_t count, int dtype,
            const void* data, size_t data_bytes, const zs_push_id* id) {
  return Run("zs_push", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(id, "id"));
    if (id->key_prefix == nullptr || id->key_prefix[0] == '\0') {
      return absl::InvalidArgumentError(id->key_prefix == nullptr
                                            ? "id->key_prefix is NULL"
                                            : "id->key_prefix is empty");
    }
    if (std::strlen(id->key_prefix) > 200) {
      return absl::InvalidArgumentError("id->key_prefix is over 200 bytes");
    }
    ZS_RETURN_IF_ERROR(
        zeroshard::capi::CheckUtf8(id->key_prefix, "id->key_prefix"));
    ZS_ASSIGN_OR_RETURN(size_t esize, DTypeBytes(dtype));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    ZS_RETURN_IF_ERROR(CheckRange(*plan, offset, count));
    ZS_RETURN_IF_ERROR(CheckBuffer(data, data_bytes, count, esize, "data"));
    const uint64_t end = offset + count, align = plan->alignment();
    if ((offset % align != 0 && offset != plan->total()) ||
        (end % align != 0 && end != plan->total())) {
      return absl::InvalidArgumentError(
          absl::StrCat("range [", offset, ", ", end,
                       ") must start and end at multiples of the alignment ",
                       align, " (or at the model's end, ", plan->total(), ")"));
    }
    if (count == 0) return absl::OkStatus();
    zeroshard::PushId pid;
    pid.epoch = id->epoch;
    pid.step = id->step;
    pid.slot = id->slot;
    pid.key_prefix = id->key_prefix;
    ZS_RETURN_IF_ERROR(client->client()->Push(
        Range{offset, end}, static_cast<v1::DType>(dtype), data, pid));
    client->RecordPush(id->epoch, id->step);
    return absl::OkStatus();
  });
}

int zs_gather(zs_client* c, uint64_t offset, uint64_t count, int dtype,
              void* out, size_t out_bytes, uint64_t* step) {
  return Run("zs_gather", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_ASSIGN_OR_RETURN(size_t esize, DTypeBytes(dtype));
    ZS_ASSIGN_OR_RETURN(const PartitionPlan* plan, client->Plan());
    ZS_RETURN_IF_ERROR(CheckRange(*plan, offset, count));
    ZS_RETURN_IF_ERROR(CheckBuffer(out, out_bytes, count, esize, "out"));
    if (count == 0) return absl::OkStatus();
    uint64_t got = 0;
    ZS_RETURN_IF_ERROR(client->client()->Gather(Range{offset, offset + count},
                                                static_cast<v1::DType>(dtype),
                                                out, &got));
    if (step != nullptr) *step = got;
    return absl::OkStatus();
  });
}

int zs_stats(zs_client* c, zs_server_stats* out, size_t capacity,
             size_t* count) {
  return Run("zs_stats", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(NotNull(count, "count"));
    const uint32_t n = client->client()->num_servers();
    if (capacity < n) {
      *count = n;
      return absl::OutOfRangeError(absl::StrCat(
          "room for ", capacity, " servers' stats, but there are ", n));
    }
    ZS_RETURN_IF_ERROR(NotNull(out, "out"));
    ZS_ASSIGN_OR_RETURN(std::vector<v1::GetStatsResponse> stats,
                        client->client()->Stats());
    for (size_t k = 0; k < stats.size(); ++k) {
      out[k] = zeroshard::capi::FromProto(stats[k]);
    }
    *count = n;
    return absl::OkStatus();
  });
}

int zs_checkpoint(zs_client* c, uint64_t step, const zs_trainer_state* state,
                  const char* tag) {
  return Run("zs_checkpoint", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(client->Plan().status());
    if (tag != nullptr) {
      ZS_RETURN_IF_ERROR(zeroshard::capi::CheckUtf8(tag, "tag"));
    }
    v1::TrainerState s;
    if (state != nullptr) s = zeroshard::capi::ToProto(*state);
    return client->client()
        ->Checkpoint(step, state != nullptr ? &s : nullptr,
                     tag != nullptr ? tag : "")
        .status();
  });
}

int zs_restore(zs_client* c, uint64_t step, uint64_t epoch,
               zs_trainer_state* state) {
  return Run("zs_restore", [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(auto client, zeroshard::capi::Client(c, blame));
    ZS_RETURN_IF_ERROR(client->Plan().status());
    ZS_ASSIGN_OR_RETURN(v1::TrainerState s,
                        client->client()->Restore(step, epoch));
    if (state != nullptr) *state = zeroshard::capi::FromProto(s);
    return absl::OkStatus();
  });
}

}  // extern "C"
