// The zs_member_* functions of the C API (client/zeroshard.h): a worker's
// membership of its job through MembershipClient.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/capi/client_handle.h"
#include "client/capi/convert.h"
#include "client/capi/handles.h"
#include "client/capi/member_handle.h"
#include "client/zeroshard.h"
#include "common/status_macros.h"

namespace zeroshard::capi {
namespace {

// Runs `body(MembershipClient*)` on the live member `m`.
template <class F>
int OnMember(const char* function, const zs_member* m, F&& body) {
  return Run(function, [&](Blame* blame) -> absl::Status {
    ZS_ASSIGN_OR_RETURN(std::shared_ptr<MemberHandle> member,
                        Lookup<MemberHandle>(m));
    *blame = member;
    return body(member->membership());
  });
}

absl::StatusOr<MembershipClientOptions> ToMemberOptions(
    const ClientHandle& client, const zs_member_options& o) {
  MembershipClientOptions out;
  out.job_id = client.job_id();
  if (out.job_id.empty() && client.registered()) {
    out.job_id = client.client()->spec().job_id();
  }
  if (out.job_id.empty()) {
    return absl::InvalidArgumentError(
        "the client has no job_id: give zs_connect_options.job_id");
  }
  if (o.worker_name == nullptr || o.worker_name[0] == '\0') {
    return absl::InvalidArgumentError("options->worker_name is empty");
  }
  ZS_RETURN_IF_ERROR(CheckUtf8(o.worker_name, "options->worker_name"));
  out.worker_name = o.worker_name;
  if (o.node != nullptr) {
    ZS_RETURN_IF_ERROR(CheckUtf8(o.node, "options->node"));
    out.node = o.node;
  }
  if (o.address != nullptr) {
    ZS_RETURN_IF_ERROR(CheckUtf8(o.address, "options->address"));
    out.address = o.address;
  }
  if (o.local_size < 1 || o.local_rank >= o.local_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("options->local_rank ", o.local_rank, " of local_size ",
                     o.local_size, ": give local_size >= 1, local_rank below"));
  }
  out.local_rank = o.local_rank;
  out.local_size = o.local_size;
  if (!(std::isfinite(o.rpc_timeout_seconds) && o.rpc_timeout_seconds > 0 &&
        o.rpc_timeout_seconds <= 3600)) {
    return absl::InvalidArgumentError(
        absl::StrCat("options->rpc_timeout_seconds is ", o.rpc_timeout_seconds,
                     "; give a value in (0, 3600]"));
  }
  out.rpc_timeout = absl::Seconds(o.rpc_timeout_seconds);
  return out;
}

}  // namespace
}  // namespace zeroshard::capi

using zeroshard::MembershipClient;
using zeroshard::capi::MemberHandle;
using zeroshard::capi::OnMember;

extern "C" {

void zs_member_options_init(zs_member_options* o) {
  if (o == nullptr) return;
  std::memset(o, 0, sizeof(*o));
  o->local_size = 1;
  o->rpc_timeout_seconds = 10;
}

int zs_member_create(zs_client* c, const zs_member_options* options,
                     zs_member** out) {
  using zeroshard::capi::ClientHandle;
  return zeroshard::capi::Run(
      "zs_member_create", [&](zeroshard::capi::Blame*) -> absl::Status {
        ZS_ASSIGN_OR_RETURN(std::shared_ptr<ClientHandle> client,
                            zeroshard::capi::Lookup<ClientHandle>(c));
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(options, "options"));
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(out, "out"));
        ZS_ASSIGN_OR_RETURN(
            zeroshard::MembershipClientOptions mo,
            zeroshard::capi::ToMemberOptions(*client, *options));
        ZS_ASSIGN_OR_RETURN(
            std::unique_ptr<MembershipClient> membership,
            MembershipClient::Create(client->client(), std::move(mo)));
        auto member = std::make_shared<MemberHandle>(std::move(client),
                                                     std::move(membership));
        *out = reinterpret_cast<zs_member*>(
            zeroshard::capi::Register(std::move(member)));
        return absl::OkStatus();
      });
}

int zs_member_close(zs_member* member) {
  return zeroshard::capi::Run("zs_member_close", [&](zeroshard::capi::Blame*) {
    return zeroshard::capi::Remove(member, MemberHandle::kKind).status();
  });
}

size_t zs_member_error(const zs_member* member, char* buf, size_t size) {
  return zeroshard::capi::CopyErrorOf(member, MemberHandle::kKind, buf, size);
}

int zs_member_join(zs_member* m, uint64_t* member_id) {
  return OnMember("zs_member_join", m,
                  [&](MembershipClient* membership) -> absl::Status {
                    ZS_RETURN_IF_ERROR(membership->Join());
                    if (member_id != nullptr) {
                      *member_id = membership->member_id();
                    }
                    return absl::OkStatus();
                  });
}

int zs_member_heartbeat(zs_member* m) {
  return OnMember("zs_member_heartbeat", m, [&](MembershipClient* membership) {
    return membership->Refresh().status();
  });
}

int zs_member_leave(zs_member* m) {
  return OnMember("zs_member_leave", m, [&](MembershipClient* membership) {
    return membership->Leave();
  });
}

int zs_member_world(zs_member* m, zs_world* world, zs_member_info* members,
                    size_t capacity) {
  return OnMember(
      "zs_member_world", m, [&](MembershipClient* membership) -> absl::Status {
        ZS_RETURN_IF_ERROR(zeroshard::capi::NotNull(world, "world"));
        if (members == nullptr && capacity > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("members is NULL with capacity ", capacity,
                           " (give capacity 0 to ask the count)"));
        }
        const zeroshard::v1::WorldView view = membership->world();
        const size_t n = static_cast<size_t>(view.members_size());
        std::memset(world, 0, sizeof(*world));
        world->epoch = view.epoch();
        world->step = view.step();
        world->member_id = membership->member_id();
        world->expired = membership->expired() ? 1 : 0;
        world->num_members = n;
        if (capacity < n) {
          return absl::OutOfRangeError(absl::StrCat(
              "room for ", capacity, " members, but the world has ", n));
        }
        for (size_t i = 0; i < n; ++i) {
          members[i] =
              zeroshard::capi::FromProto(view.members(static_cast<int>(i)));
        }
        std::sort(members, members + n,
                  [](const zs_member_info& a, const zs_member_info& b) {
                    return a.rank < b.rank;
                  });
        return absl::OkStatus();
      });
}

}  // extern "C"
