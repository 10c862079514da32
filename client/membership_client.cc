#include "client/membership_client.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace {

// How often a failing lease keeper may write to stderr.
constexpr absl::Duration kWarningInterval = absl::Seconds(10);

}  // namespace

absl::StatusOr<std::unique_ptr<MembershipClient>> MembershipClient::Create(
    ShardClient* client, MembershipClientOptions options) {
  if (client == nullptr) {
    return absl::InvalidArgumentError("MembershipClient needs a ShardClient");
  }
  if (options.job_id.empty() || options.worker_name.empty()) {
    return absl::InvalidArgumentError(
        "MembershipClientOptions need a job_id and a worker_name");
  }
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "MembershipClientOptions.rpc_timeout <= 0");
  }
  return std::unique_ptr<MembershipClient>(
      new MembershipClient(client, std::move(options)));
}

MembershipClient::MembershipClient(ShardClient* client,
                                   MembershipClientOptions options)
    : client_(client),
      options_(std::move(options)),
      server_(absl::StrCat("shard 0 (", client->options().addresses[0], ")")),
      stub_(v1::MembershipService::NewStub(client->Channel(0, 0))) {}

MembershipClient::~MembershipClient() {
  absl::MutexLock lock(&control_mu_);
  StopKeeper();
}

absl::Status MembershipClient::Call(
    const char* what, absl::Duration timeout, bool keeper,
    const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  // A restarting shard 0 delays the call (within its deadline) instead of
  // failing it at once.
  ctx.set_wait_for_ready(true);
  if (keeper) {
    absl::MutexLock lock(&keeper_mu_);
    if (stop_) return absl::CancelledError("the lease keeper is stopping");
    keeper_call_ = &ctx;
  }
  const grpc::Status status = rpc(&ctx);
  if (keeper) {
    absl::MutexLock lock(&keeper_mu_);
    keeper_call_ = nullptr;
  }
  return FromGrpcStatus(
      status, absl::StrCat(what, " of job ", options_.job_id, " on ", server_));
}

absl::Status MembershipClient::Join() {
  absl::MutexLock lock(&control_mu_);
  StopKeeper();
  const uint64_t old_id = member_id_.exchange(0);
  if (old_id != 0 && !expired()) {
    // Best effort: a live old member would hold every rendezvous of the
    // job until its lease ran out.
    v1::LeaveRequest req;
    req.set_job_id(options_.job_id);
    req.set_member_id(old_id);
    v1::LeaveResponse resp;
    Call("Leave", options_.rpc_timeout, false, [&](grpc::ClientContext* ctx) {
      return stub_->Leave(ctx, req, &resp);
    }).IgnoreError();
  }
  v1::JoinRequest req;
  req.set_job_id(options_.job_id);
  req.set_worker_name(options_.worker_name);
  req.set_address(options_.address);
  req.set_local_rank(options_.local_rank);
  req.set_local_size(options_.local_size);
  req.set_node(options_.node);
  v1::JoinResponse resp;
  ZS_RETURN_IF_ERROR(Call(
      "Join", options_.rpc_timeout, false,
      [&](grpc::ClientContext* ctx) { return stub_->Join(ctx, req, &resp); }));
  if (resp.member_id() == 0 || resp.lease_ms() == 0) {
    return absl::InternalError(
        absl::StrCat("Join of job ", options_.job_id, " on ", server_,
                     " answered member id ", resp.member_id(), ", lease ",
                     resp.lease_ms(), " ms"));
  }
  {
    absl::MutexLock world_lock(&world_mu_);
    lease_ = absl::Milliseconds(resp.lease_ms());
  }
  Observe(resp.world(), /*reset=*/true);
  expired_.store(false, std::memory_order_release);
  member_id_.store(resp.member_id());
  StartKeeper();
  return absl::OkStatus();
}

absl::Status MembershipClient::Leave(const std::string& failure) {
  absl::MutexLock lock(&control_mu_);
  StopKeeper();
  const uint64_t id = member_id_.exchange(0);
  if (id == 0) return absl::OkStatus();
  v1::LeaveRequest req;
  req.set_job_id(options_.job_id);
  req.set_member_id(id);
  req.set_failure(failure);
  v1::LeaveResponse resp;
  const absl::Status status = Call(
      "Leave", options_.rpc_timeout, false,
      [&](grpc::ClientContext* ctx) { return stub_->Leave(ctx, req, &resp); });
  if (absl::IsNotFound(status)) return absl::OkStatus();
  ZS_RETURN_IF_ERROR(status);
  Observe(resp.world());
  return absl::OkStatus();
}

v1::WorldView MembershipClient::world() const {
  absl::MutexLock lock(&world_mu_);
  return world_;
}

std::string MembershipClient::job_failure() const {
  absl::MutexLock lock(&world_mu_);
  return world_.failure();
}

absl::Duration MembershipClient::lease() const {
  absl::MutexLock lock(&world_mu_);
  return lease_;
}

void MembershipClient::Observe(const v1::WorldView& view, bool reset) {
  absl::MutexLock lock(&world_mu_);
  if (!reset && view.epoch() < world_.epoch()) return;
  world_ = view;
  epoch_.store(view.epoch(), std::memory_order_release);
}

absl::Status MembershipClient::MemberCall(
    const char* what, absl::Duration timeout, bool keeper,
    const std::function<grpc::Status(grpc::ClientContext*, uint64_t)>& rpc) {
  const uint64_t id = member_id();
  if (id == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": not a member of job ", options_.job_id, ": Join first"));
  }
  const absl::Status status =
      Call(what, timeout, keeper,
           [&](grpc::ClientContext* ctx) { return rpc(ctx, id); });
  if (absl::IsNotFound(status) && member_id() == id) {
    expired_.store(true, std::memory_order_release);
  }
  return status;
}

absl::StatusOr<v1::WorldView> MembershipClient::Heartbeat(
    absl::Duration timeout, bool keeper) {
  v1::HeartbeatResponse resp;
  ZS_RETURN_IF_ERROR(MemberCall("Heartbeat", timeout, keeper,
                                [&](grpc::ClientContext* ctx, uint64_t id) {
                                  v1::HeartbeatRequest req;
                                  req.set_job_id(options_.job_id);
                                  req.set_member_id(id);
                                  return stub_->Heartbeat(ctx, req, &resp);
                                }));
  Observe(resp.world());
  return resp.world();
}

absl::StatusOr<v1::WorldView> MembershipClient::Refresh() {
  return Heartbeat(options_.rpc_timeout, /*keeper=*/false);
}

absl::StatusOr<v1::RendezvousResponse> MembershipClient::Rendezvous(
    uint64_t epoch, const std::string& blob, uint32_t wait_ms) {
  v1::RendezvousResponse resp;
  ZS_RETURN_IF_ERROR(MemberCall(
      "Rendezvous", options_.rpc_timeout + absl::Milliseconds(wait_ms),
      /*keeper=*/false, [&](grpc::ClientContext* ctx, uint64_t id) {
        v1::RendezvousRequest req;
        req.set_job_id(options_.job_id);
        req.set_member_id(id);
        req.set_epoch(epoch);
        req.set_blob(blob);
        req.set_wait_ms(wait_ms);
        return stub_->Rendezvous(ctx, req, &resp);
      }));
  Observe(resp.world());
  return resp;
}

void MembershipClient::StartKeeper() {
  {
    absl::MutexLock lock(&keeper_mu_);
    stop_ = false;
  }
  keeper_ = std::thread([this] { KeepLease(); });
}

void MembershipClient::StopKeeper() {
  {
    absl::MutexLock lock(&keeper_mu_);
    stop_ = true;
    if (keeper_call_ != nullptr) keeper_call_->TryCancel();
  }
  if (keeper_.joinable()) keeper_.join();
}

void MembershipClient::KeepLease() {
  const absl::Duration period = std::max(lease() / 3, absl::Milliseconds(1));
  const absl::Duration timeout = std::min(options_.rpc_timeout, period);
  absl::Time last_warning = absl::InfinitePast();
  for (;;) {
    {
      absl::MutexLock lock(&keeper_mu_);
      if (keeper_mu_.AwaitWithTimeout(absl::Condition(&stop_), period)) {
        return;
      }
    }
    const uint64_t id = member_id();
    const absl::StatusOr<v1::WorldView> view = Heartbeat(timeout, true);
    if (view.ok() || absl::IsCancelled(view.status())) continue;
    if (expired()) {
      std::fprintf(stderr,
                   "zeroshard membership: member %llu (%s) is out of the "
                   "group: %s\n",
                   static_cast<unsigned long long>(id),
                   options_.worker_name.c_str(),
                   view.status().ToString().c_str());
      return;
    }
    const absl::Time now = absl::Now();
    if (now - last_warning >= kWarningInterval) {
      last_warning = now;
      std::fprintf(stderr,
                   "zeroshard membership: heartbeat of member %llu (%s) "
                   "failed, retrying every %s: %s\n",
                   static_cast<unsigned long long>(id),
                   options_.worker_name.c_str(),
                   absl::FormatDuration(period).c_str(),
                   view.status().ToString().c_str());
    }
  }
}

}  // namespace zeroshard
