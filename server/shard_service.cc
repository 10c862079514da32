#include "server/shard_service.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/client_text.h"
#include "common/env/env.h"
#include "common/model_spec.h"
#include "server/auth/rejected_reactor.h"
#include "server/data_plane.h"
#include "server/unary_adapter.h"

namespace zeroshard {
namespace {

constexpr char kRegister[] = "/zeroshard.v1.ShardService/RegisterModel";
constexpr char kWrite[] = "/zeroshard.v1.ShardService/WriteParameters";
constexpr char kStats[] = "/zeroshard.v1.ShardService/GetStats";
constexpr char kGather[] = "/zeroshard.v1.ShardService/Gather";
constexpr char kPush[] = "/zeroshard.v1.ShardService/PushGradients";
constexpr char kPrepare[] = "/zeroshard.v1.ShardService/PrepareStep";
constexpr char kCommit[] = "/zeroshard.v1.ShardService/CommitStep";
constexpr char kCheckpoint[] = "/zeroshard.v1.ShardService/Checkpoint";
constexpr char kRestore[] = "/zeroshard.v1.ShardService/Restore";

uint64_t ResidentBytes() {
  std::istringstream statm(
      ReadSmallFile(DefaultEnv(), "/proc/self/statm").value_or(""));
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

// The newest ledger entries that fit in one message (beside the rest of
// `resp`, filled before), oldest first; ledger_first_step says where they
// start.
void AddLedger(const StoreStats& s, v1::GetStatsResponse* resp) {
  size_t budget =
      kMaxChunkBytes - std::min(resp->ByteSizeLong(), kMaxChunkBytes);
  size_t first = s.ledger.size();
  std::vector<v1::CommitRecord> records;
  while (first > 0) {
    const LedgerEntry& e = s.ledger[first - 1];
    v1::CommitRecord r;
    r.set_step(e.step);
    r.set_epoch(e.epoch);
    r.set_contributions(e.contributions);
    r.set_skipped(e.skipped);
    const size_t bytes = r.ByteSizeLong() + 4;  // tag and length
    if (bytes > budget) break;
    budget -= bytes;
    records.push_back(std::move(r));
    --first;
  }
  resp->set_ledger_first_step(first == 0 ? s.ledger_first_step
                                         : s.ledger[first].step);
  for (auto r = records.rbegin(); r != records.rend(); ++r) {
    *resp->add_ledger() = std::move(*r);
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      BoundedMessage(status.message()));
}

std::function<grpc::Status()> ShardServiceImpl::Refuse(grpc::ServerContext* ctx,
                                                       const char* method) {
  return [this, ctx, method] {
    store_->CountRejected();
    return Admit(ctx, method);
  };
}

#define ZS_SERVE_UNARY(Name, method)                                      \
  grpc::Status ShardServiceImpl::Streamed##Name(                          \
      grpc::ServerContext* ctx,                                           \
      grpc::ServerUnaryStreamer<v1::Name##Request, v1::Name##Response>*   \
          stream) {                                                       \
    return ServeUnary<v1::Name##Request, v1::Name##Response>(             \
        method, ctx, stream, Refuse(ctx, method),                         \
        [this](grpc::ServerContext* c, const v1::Name##Request* req,      \
               v1::Name##Response* resp) { return Name(c, req, resp); }); \
  }
ZS_SERVE_UNARY(RegisterModel, kRegister)
ZS_SERVE_UNARY(GetStats, kStats)
ZS_SERVE_UNARY(PrepareStep, kPrepare)
ZS_SERVE_UNARY(CommitStep, kCommit)
ZS_SERVE_UNARY(Checkpoint, kCheckpoint)
ZS_SERVE_UNARY(Restore, kRestore)
#undef ZS_SERVE_UNARY

grpc::Status ShardServiceImpl::Admit(const grpc::ServerContextBase* ctx,
                                     const char* method,
                                     const std::string* job) const {
  if (guard_ == nullptr) return grpc::Status::OK;
  const security::Principal* who = nullptr;
  grpc::Status s = guard_->Admit(*ctx, method, &who);
  if (!s.ok() || job == nullptr) return s;
  return guard_->CheckRequestJob(*ctx, method, who, *job);
}

grpc::Status ShardServiceImpl::RegisterModel(
    grpc::ServerContext* ctx, const v1::RegisterModelRequest* req,
    v1::RegisterModelResponse* resp) {
  if (grpc::Status a = Admit(ctx, kRegister, &req->spec().job_id()); !a.ok()) {
    return a;
  }
  if (guard_ != nullptr) {
    grpc::Status a = guard_->CheckModelSize(*ctx, req->spec(),
                                            store_->options().shard_index);
    if (!a.ok()) return a;
  }
  auto result = store_->RegisterModel(req->spec());
  if (!result.ok()) return ToGrpcStatus(result.status());
  resp->set_created(result->created);
  resp->set_total_elements(result->total);
  resp->set_plan_hash(result->plan_hash);
  resp->set_step(result->step);
  for (size_t k = 0; k < result->ranges.size(); ++k) {
    v1::ShardRange* r = resp->add_ranges();
    r->set_shard_index(static_cast<uint32_t>(k));
    r->set_offset(result->ranges[k].begin);
    r->set_length(result->ranges[k].size());
  }
  *resp->mutable_owned() = resp->ranges(store_->options().shard_index);
  return grpc::Status::OK;
}

grpc::Status ShardServiceImpl::WriteParameters(
    grpc::ServerContext* ctx,
    grpc::ServerReader<v1::WriteParametersRequest>* reader,
    v1::WriteParametersResponse* resp) {
  if (grpc::Status a = Admit(ctx, kWrite); !a.ok()) return a;
  v1::WriteParametersRequest msg;
  if (!reader->Read(&msg) || !msg.has_header()) {
    store_->CountRejected();
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat(kWrite,
                                     ": the first message must carry a header "
                                     "(or it was malformed)"));
  }
  const v1::WriteHeader header = msg.header();
  if (grpc::Status a = Admit(ctx, kWrite, &header.job_id()); !a.ok()) {
    return a;
  }
  absl::Status s = store_->CheckWrite(header);
  if (!s.ok()) return ToGrpcStatus(s);
  // Staged: nothing is written unless the whole stream is good. At most
  // the announced length (inside the owned range), grown as data arrives.
  std::vector<std::string> chunks;
  uint64_t written = 0;
  bool first = true;
  do {
    if (!first && msg.has_header()) {
      store_->CountRejected();
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "only the first message may carry a header");
    }
    const std::string& data = msg.data();
    if (data.size() > kMaxChunkBytes || data.size() % 4 != 0 ||
        data.size() / 4 > header.length() - written) {
      store_->CountRejected();
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("chunk of ", data.size(),
                       " bytes is oversized, not whole fp32 elements, or "
                       "past the announced length ",
                       header.length(), "; nothing was written"));
    }
    if (!data.empty()) {
      written += data.size() / 4;
      chunks.push_back(std::move(*msg.mutable_data()));
    }
    first = false;
  } while (reader->Read(&msg));
  if (written != header.length()) {
    store_->CountRejected();
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat(kWrite, ": stream ended after ", written, " of ",
                     header.length(),
                     " elements (or a message was malformed); nothing was "
                     "written"));
  }
  s = store_->WriteParameters(header, chunks);
  if (!s.ok()) return ToGrpcStatus(s);
  resp->set_elements_written(written);
  return grpc::Status::OK;
}

grpc::Status ShardServiceImpl::GetStats(grpc::ServerContext* ctx,
                                        const v1::GetStatsRequest* req,
                                        v1::GetStatsResponse* resp) {
  if (grpc::Status a = Admit(ctx, kStats, &req->job_id()); !a.ok()) return a;
  const StoreStats s = store_->Stats(req->ledger());
  resp->set_shard_index(store_->options().shard_index);
  resp->set_num_shards(store_->options().num_shards);
  resp->set_step(s.step);
  resp->set_optimizer_steps(s.optimizer_steps);
  resp->set_owned_elements(s.owned.size());
  resp->set_bytes_held(s.bytes_held);
  resp->set_contributions_applied(s.contributions_applied);
  resp->set_duplicates_ignored(s.duplicates_ignored);
  resp->set_requests_rejected(s.requests_rejected);
  resp->set_bytes_pushed(s.bytes_pushed);
  resp->set_bytes_gathered(s.bytes_gathered);
  resp->set_last_step_seconds(s.last_step_seconds);
  resp->set_optimizer_elements_per_second(
      s.last_step_seconds > 0 ? s.owned.size() / s.last_step_seconds : 0);
  resp->set_epoch(s.epoch);
  resp->set_elements_applied(s.elements_applied);
  resp->set_bytes_held_rss(ResidentBytes());
  resp->set_storage(s.storage);
  resp->set_storage_bytes_read(s.storage_bytes_read);
  resp->set_storage_bytes_written(s.storage_bytes_written);
  resp->set_last_step_io_wait_seconds(s.last_step_io_wait_seconds);
  resp->set_last_step_io_bytes_per_second(s.last_step_io_bytes_per_second);
  resp->set_incarnation(s.incarnation);
  for (uint64_t step : s.checkpoint_steps) resp->add_checkpoint_steps(step);
  resp->set_restored_step(s.restored_step);
  resp->set_checkpoints_written(s.checkpoints_written);
  store_->SpecInto(resp->mutable_spec());
  *resp->mutable_trainer_state() = s.trainer_state;
  resp->set_awaiting_restore(s.awaiting_restore);
  if (req->ledger()) AddLedger(s, resp);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ShardServiceImpl::Gather(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request) {
  if (grpc::Status a = Admit(ctx, kGather); !a.ok()) {
    return new RejectedReactor<grpc::ServerWriteReactor<grpc::ByteBuffer>>(a);
  }
  return NewGatherReactor(store_, request, ctx, &idle_, shared_);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ShardServiceImpl::PushGradients(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  if (grpc::Status a = Admit(ctx, kPush); !a.ok()) {
    return new RejectedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>(a);
  }
  return NewPushReactor(store_, response, ctx, &idle_, shared_);
}

grpc::Status ShardServiceImpl::PrepareStep(grpc::ServerContext* ctx,
                                           const v1::PrepareStepRequest* req,
                                           v1::PrepareStepResponse* resp) {
  if (grpc::Status a = Admit(ctx, kPrepare, &req->job_id()); !a.ok()) {
    return a;
  }
  auto r = store_->Prepare(req->job_id(), req->epoch(), req->step());
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->set_complete(r->complete);
  resp->set_received_elements(r->received_elements);
  resp->set_expected_elements(r->expected_elements);
  resp->set_sum_squares(r->sum_squares);
  resp->set_overflow(r->overflow);
  return grpc::Status::OK;
}

grpc::Status ShardServiceImpl::CommitStep(grpc::ServerContext* ctx,
                                          const v1::CommitStepRequest* req,
                                          v1::CommitStepResponse* resp) {
  if (grpc::Status a = Admit(ctx, kCommit, &req->job_id()); !a.ok()) return a;
  auto r = store_->Commit(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->set_applied(r->applied);
  resp->set_already_committed(r->already_committed);
  resp->set_step(r->step);
  return grpc::Status::OK;
}

grpc::Status ShardServiceImpl::Checkpoint(grpc::ServerContext* ctx,
                                          const v1::CheckpointRequest* req,
                                          v1::CheckpointResponse* resp) {
  if (grpc::Status a = Admit(ctx, kCheckpoint, &req->job_id()); !a.ok()) {
    return a;
  }
  // The tag goes into the manifest and into operators' logs and tools.
  if (req->tag().size() > 256 ||
      std::any_of(req->tag().begin(), req->tag().end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("Checkpoint: tag \"",
                                     absl::CHexEscape(req->tag().substr(0, 64)),
                                     "\" has a control character or is over "
                                     "256 bytes"));
  }
  auto r = store_->Checkpoint(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

grpc::Status ShardServiceImpl::Restore(grpc::ServerContext* ctx,
                                       const v1::RestoreRequest* req,
                                       v1::RestoreResponse* resp) {
  if (grpc::Status a = Admit(ctx, kRestore, &req->job_id()); !a.ok()) {
    return a;
  }
  auto r = store_->Restore(*req);
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = *std::move(r);
  return grpc::Status::OK;
}

}  // namespace zeroshard
