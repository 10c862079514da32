// Seeds for the service fuzzer (service_fuzzer.h): inputs that drive a
// whole step through the real handlers, so that mutations start deep in
// the protocol rather than at "no model registered".
#include <cstdint>
#include <string>
#include <vector>

#include "proto/zeroshard.pb.h"
#include "tests/fuzz/service_fuzzer.h"

namespace zeroshard::fuzz {
namespace {

// Method indexes of service_fuzzer.cc's table.
enum : uint8_t {
  kRegister = 0,
  kWrite,
  kCheckpoint,
  kRestore,
  kStats,
  kGather,
  kPush,
  kPrepare,
  kCommit,
  kJoin,
  kHeartbeat,
  kLeave,
  kRendezvous,
  kFinalizeLast,  // Checkpoint phase 2 with the last phase-1 answer
};

class InputWriter {
 public:
  explicit InputWriter(uint8_t config) { bytes_.push_back(config); }
  InputWriter& Call(uint8_t method, const std::vector<std::string>& messages) {
    bytes_.push_back(static_cast<char>(method));
    bytes_.push_back(static_cast<char>(messages.size()));
    for (const std::string& m : messages) {
      const size_t n = m.size() & 0xffff;
      bytes_.push_back(static_cast<char>(n & 0xff));
      bytes_.push_back(static_cast<char>(n >> 8));
      bytes_.append(m, 0, n);
    }
    return *this;
  }
  InputWriter& Call(uint8_t method, const google::protobuf::Message& m) {
    return Call(method, std::vector<std::string>{m.SerializeAsString()});
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

constexpr char kJob[] = "fz";

// 8 x 16 + 16 + 40 = 184 elements in two groups; K servers.
v1::ModelSpec Spec(uint32_t k) {
  v1::ModelSpec spec;
  spec.set_job_id(kJob);
  spec.set_num_servers(k);
  spec.set_alignment(16);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(1);
  for (double wd : {0.1, 0.0}) {
    v1::ParamGroup* g = spec.add_param_groups();
    g->set_beta1(0.9);
    g->set_beta2(0.999);
    g->set_eps(1e-8);
    g->set_weight_decay(wd);
    g->set_lr_scale(1.0);
  }
  struct T {
    const char* name;
    std::vector<int64_t> shape;
    uint32_t group;
  };
  for (const T& t :
       std::vector<T>{{"w", {8, 16}, 0}, {"b", {16}, 1}, {"e", {40}, 0}}) {
    v1::TensorSpec* ts = spec.add_tensors();
    ts->set_name(t.name);
    for (int64_t d : t.shape) ts->add_shape(d);
    ts->set_param_group(t.group);
  }
  return spec;
}

std::string Floats(uint64_t n, float value) {
  std::vector<float> v(n, value);
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

// Shard 0 of K = 1 owns everything.
constexpr uint64_t kTotal = 128 + 16 + 40;

std::vector<std::string> WriteMessages(uint64_t offset, uint64_t length,
                                       float value) {
  v1::WriteParametersRequest head;
  v1::WriteHeader* h = head.mutable_header();
  h->set_job_id(kJob);
  h->set_offset(offset);
  h->set_length(length);
  h->set_dtype(v1::DTYPE_FP32);
  v1::WriteParametersRequest data;
  data.set_data(Floats(length, value));
  return {head.SerializeAsString(), data.SerializeAsString()};
}

std::vector<std::string> PushMessages(uint64_t epoch, uint64_t step,
                                      uint64_t offset, uint64_t length,
                                      const std::string& key) {
  v1::PushGradientsRequest head;
  v1::PushHeader* h = head.mutable_header();
  h->set_job_id(kJob);
  h->set_epoch(epoch);
  h->set_step(step);
  h->set_offset(offset);
  h->set_length(length);
  h->set_dtype(v1::DTYPE_FP32);
  h->set_idempotency_key(key);
  v1::PushGradientsRequest data;
  data.set_data(Floats(length, 0.25f));
  return {head.SerializeAsString(), data.SerializeAsString()};
}

v1::GatherRequest Gather(uint64_t offset, uint64_t length, v1::DType dtype) {
  v1::GatherRequest g;
  g.set_job_id(kJob);
  g.set_offset(offset);
  g.set_length(length);
  g.set_dtype(dtype);
  return g;
}

InputWriter& Step(InputWriter& w, uint64_t epoch, uint64_t step) {
  w.Call(kPush,
         PushMessages(epoch, step, 0, kTotal, "k" + std::to_string(step)));
  v1::PrepareStepRequest prepare;
  prepare.set_job_id(kJob);
  prepare.set_epoch(epoch);
  prepare.set_step(step);
  w.Call(kPrepare, prepare);
  v1::CommitStepRequest commit;
  commit.set_job_id(kJob);
  commit.set_epoch(epoch);
  commit.set_step(step);
  commit.set_clip_coef(1.0f);
  commit.set_lr(1e-3);
  commit.mutable_trainer_state()->set_step(step + 1);
  return w.Call(kCommit, commit);
}

}  // namespace

std::vector<std::string> SeedInputs() {
  std::vector<std::string> seeds;
  v1::RegisterModelRequest reg1;
  *reg1.mutable_spec() = Spec(1);
  v1::GetStatsRequest stats;
  stats.set_job_id(kJob);
  stats.set_ledger(true);

  {  // Two whole steps, a checkpoint (both phases) and a restore.
    InputWriter w(0);
    w.Call(kRegister, reg1).Call(kWrite, WriteMessages(0, kTotal, 0.5f));
    w.Call(kGather, Gather(0, kTotal, v1::DTYPE_FP32));
    Step(w, 0, 0);
    Step(w, 0, 1);
    v1::CheckpointRequest ckpt;
    ckpt.set_job_id(kJob);
    ckpt.set_step(2);
    ckpt.set_tag("t");
    w.Call(kCheckpoint, ckpt).Call(kFinalizeLast, ckpt);
    v1::RestoreRequest restore;
    restore.set_job_id(kJob);
    restore.set_step(2);
    restore.set_epoch(1);
    w.Call(kRestore, restore).Call(kStats, stats);
    w.Call(kGather, Gather(16, 64, v1::DTYPE_BF16));
    // Several ranges in one request (GatherRequest.more).
    v1::GatherRequest more = Gather(0, 16, v1::DTYPE_FP32);
    for (uint64_t at : {64, 32}) {
      v1::GatherRange* m = more.add_more();
      m->set_offset(at);
      m->set_length(16);
    }
    w.Call(kGather, more);
    seeds.push_back(w.bytes());
  }
  {  // Misuse: a write stream whose second chunk is too long, a push with a
     // newer epoch and a truncated payload, a huge epoch, a stale step.
    InputWriter w(0);
    w.Call(kRegister, reg1);
    std::vector<std::string> write = WriteMessages(0, 32, 1.0f);
    write.push_back(write[1]);
    w.Call(kWrite, write);
    std::vector<std::string> push = PushMessages(1, 0, 0, kTotal, "a");
    push[1].resize(push[1].size() / 2);
    w.Call(kPush, push);
    w.Call(kPush, PushMessages(~uint64_t{0}, 0, 0, 16, "b"));
    w.Call(kPush, PushMessages(0, 5, 0, 16, "c"));
    Step(w, 0, 0).Call(kStats, stats);
    seeds.push_back(w.bytes());
  }
  {  // Two shards: this server is shard 1 of K = 2.
    InputWriter w(1 | (1 << 1));
    v1::RegisterModelRequest reg2;
    *reg2.mutable_spec() = Spec(2);
    w.Call(kRegister, reg2).Call(kStats, stats);
    w.Call(kGather, Gather(96, 88, v1::DTYPE_FP32));
    w.Call(kPush, PushMessages(0, 0, 96, 88, "x"));
    seeds.push_back(w.bytes());
  }
  {  // Membership: join two workers, heartbeat, rendezvous, leave.
    InputWriter w(0);
    v1::JoinRequest join;
    join.set_job_id(kJob);
    join.set_worker_name("w0");
    join.set_address("127.0.0.1:1");
    join.set_local_size(1);
    join.set_node("n0");
    w.Call(kJoin, join);
    join.set_worker_name("w1");
    w.Call(kJoin, join);
    v1::HeartbeatRequest beat;
    beat.set_job_id(kJob);
    beat.set_member_id(1);
    w.Call(kHeartbeat, beat);
    v1::RendezvousRequest rdv;
    rdv.set_job_id(kJob);
    rdv.set_member_id(1);
    rdv.set_epoch(2);
    rdv.set_blob("addr");
    w.Call(kRendezvous, rdv);
    v1::LeaveRequest leave;
    leave.set_job_id(kJob);
    leave.set_member_id(2);
    w.Call(kLeave, leave);
    seeds.push_back(w.bytes());
  }
  {  // Malformed bodies to every method: truncated varints, wrong wire
     // types, empty streams, extra messages.
    InputWriter w(0);
    for (uint8_t m = kRegister; m <= kRendezvous; ++m) {
      w.Call(m, std::vector<std::string>{std::string("\x0a\xff\xff", 3)});
      w.Call(m, std::vector<std::string>{});
      w.Call(m, std::vector<std::string>{"\x08", std::string(3, '\x12')});
    }
    seeds.push_back(w.bytes());
  }
  return seeds;
}

}  // namespace zeroshard::fuzz
