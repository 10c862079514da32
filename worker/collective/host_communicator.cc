#include "worker/collective/host_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "worker/collective/reduce.h"

namespace zeroshard {
namespace collective {
namespace {

constexpr uint32_t kMagic = 0x4c43535a;  // "ZSCL"
constexpr int kMaxRanks = 1 << 20;       // the tag's source field
constexpr int kMaxNodes = 1 << 16;       // the tag's index field
constexpr absl::Duration kMaxEventWait = absl::Milliseconds(50);

// Sent to every peer at the start of every operation.
struct WireHeader {
  uint32_t magic = kMagic;
  uint8_t kind = 0;
  uint8_t dtype = 0;
  uint16_t reserved = 0;
  int32_t root = 0;
  uint32_t world = 0;
  uint32_t alignment = 0;
  uint32_t local_size = 0;
  uint64_t seq = 0;
  uint64_t count = 0;
};
static_assert(sizeof(WireHeader) == 40, "wire header layout");

// ZEROSHARD_COLLECTIVE_TRACE=1: HostCommunicatorOptions::trace.
bool TraceFromEnvironment() {
  const char* v = std::getenv("ZEROSHARD_COLLECTIVE_TRACE");
  return v != nullptr && std::string(v) == "1";
}

// seq (24 bits) | source rank (20) | header flag (1) | step (3) | index (16).
uint64_t MakeTag(uint64_t seq, int src, bool header, int step, uint32_t index) {
  return ((seq & 0xFFFFFF) << 40) | (static_cast<uint64_t>(src) << 20) |
         (static_cast<uint64_t>(header) << 19) |
         (static_cast<uint64_t>(step & 7) << 16) | (index & 0xFFFF);
}

std::string DescribeCall(uint8_t kind, uint64_t count, uint8_t dtype,
                         int32_t root) {
  std::string s =
      absl::StrFormat("%s(count=%d, %s", OpKindName(static_cast<OpKind>(kind)),
                      count, DTypeName(static_cast<DType>(dtype)));
  if (static_cast<OpKind>(kind) == OpKind::kBroadcast) {
    absl::StrAppend(&s, ", root=", root);
  }
  if (static_cast<OpKind>(kind) == OpKind::kAllGatherMany) {
    absl::StrAppend(&s, ", ", root, " segments");
  }
  return s + ")";
}

}  // namespace

struct HostCommunicator::Op {
  OpKind kind;
  char* buf = nullptr;
  uint64_t count = 0;
  DType dtype = DType::kFloat32;
  int root = 0;
  uint64_t seq = 0;
  int step = 0;
  absl::Time deadline;
  // kAllGatherMany: the segments (count is their total; root their
  // number, checked against every peer's). Otherwise empty.
  std::vector<Segment> segments;
  WireHeader header;
  std::vector<WireHeader> peer_headers;

  size_t es() const { return DTypeSize(dtype); }
  std::string Describe() const {
    return absl::StrFormat("%s #%d (count %d, %s)", OpKindName(kind), seq,
                           count, DTypeName(dtype));
  }
};

struct HostCommunicator::Transfer {
  int peer;
  bool send;
  bool header;
  uint64_t tag;
  void* data;
  size_t bytes;
  Completion c;
  bool checked = false;
};

// The transfers of one step of an operation; posted together, all complete
// before the next step. Zero-byte payloads are skipped (both sides know the
// part sizes).
class HostCommunicator::Step {
 public:
  Step(const Op& op, int rank) : op_(op), rank_(rank) {}
  void Send(int peer, uint32_t index, const void* data, size_t bytes) {
    if (bytes == 0) return;
    Add(peer, true, false, index, const_cast<void*>(data), bytes);
  }
  void Recv(int peer, uint32_t index, void* data, size_t bytes) {
    if (bytes == 0) return;
    Add(peer, false, false, index, data, bytes);
  }
  void Headers(int peer, const void* mine, void* theirs) {
    Add(peer, true, true, 0, const_cast<void*>(mine), sizeof(WireHeader));
    Add(peer, false, true, 0, theirs, sizeof(WireHeader));
  }
  std::deque<Transfer>& transfers() { return transfers_; }

 private:
  void Add(int peer, bool send, bool header, uint32_t index, void* data,
           size_t bytes) {
    const int src = send ? rank_ : peer;
    transfers_.push_back(Transfer{
        peer, send, header, MakeTag(op_.seq, src, header, op_.step, index),
        data, bytes, Completion{}});
  }
  const Op& op_;
  const int rank_;
  std::deque<Transfer> transfers_;
};

HostCommunicator::HostCommunicator(std::unique_ptr<Transport> transport,
                                   HostCommunicatorOptions options)
    : rank_(transport->rank()),
      size_(transport->size()),
      options_(options),
      trace_(options.trace || TraceFromEnvironment()),
      transport_(std::move(transport)) {}

absl::StatusOr<std::unique_ptr<HostCommunicator>> HostCommunicator::Create(
    std::unique_ptr<Transport> transport, HostCommunicatorOptions options) {
  if (transport == nullptr) {
    return absl::InvalidArgumentError("HostCommunicator: no transport");
  }
  const int w = transport->size();
  if (w < 1 || w >= kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostCommunicator: world size ", w, " out of range"));
  }
  if (options.part_alignment < 1) {
    return absl::InvalidArgumentError(
        "HostCommunicator: part_alignment must be >= 1");
  }
  if (options.local_size < 1 || w % options.local_size != 0 ||
      w / options.local_size >= kMaxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostCommunicator: local_size ", options.local_size,
                     " does not divide world size ", w));
  }
  std::unique_ptr<HostCommunicator> c(
      new HostCommunicator(std::move(transport), options));
  c->local_size_ = options.local_size == 1 ? w : options.local_size;
  Transport* t = c->transport_.get();
  c->queue_ = std::make_unique<OpQueue>([t] { t->Wake(); });
  return c;
}

HostCommunicator::~HostCommunicator() { queue_->Shutdown(); }

CollectiveOp HostCommunicator::AllReduce(void* buf, uint64_t count,
                                         DType dtype) {
  return Issue(OpKind::kAllReduce, buf, count, dtype, 0);
}
CollectiveOp HostCommunicator::ReduceScatter(void* buf, uint64_t count,
                                             DType dtype) {
  return Issue(OpKind::kReduceScatter, buf, count, dtype, 0);
}
CollectiveOp HostCommunicator::AllGather(void* buf, uint64_t count,
                                         DType dtype) {
  return Issue(OpKind::kAllGather, buf, count, dtype, 0);
}
CollectiveOp HostCommunicator::Broadcast(void* buf, uint64_t count, DType dtype,
                                         int root) {
  return Issue(OpKind::kBroadcast, buf, count, dtype, root);
}
CollectiveOp HostCommunicator::Barrier() {
  return Issue(OpKind::kBarrier, nullptr, 0, DType::kFloat32, 0);
}

CollectiveOp HostCommunicator::Issue(OpKind kind, void* buf, uint64_t count,
                                     DType dtype, int root) {
  return IssueMany(kind, {Segment{buf, count}}, dtype, root);
}

CollectiveOp HostCommunicator::IssueMany(OpKind kind,
                                         const std::vector<Segment>& segments,
                                         DType dtype, int root) {
  if (dtype != DType::kFloat32 && dtype != DType::kBfloat16) {
    return CollectiveOp::Finished(
        absl::InvalidArgumentError("collective: unknown dtype"));
  }
  uint64_t count = 0;
  for (const Segment& s : segments) {
    if (s.count > 0 && s.buf == nullptr) {
      return CollectiveOp::Finished(absl::InvalidArgumentError(absl::StrCat(
          OpKindName(kind), ": null buffer for ", s.count, " elements")));
    }
    count += s.count;
  }
  if (root < 0 || root >= size_) {
    return CollectiveOp::Finished(absl::InvalidArgumentError(absl::StrCat(
        OpKindName(kind), ": root ", root, " not in [0, ", size_, ")")));
  }
  auto op = std::make_shared<Op>();
  op->kind = kind;
  op->dtype = dtype;
  op->count = count;
  if (kind == OpKind::kAllGatherMany) {
    op->segments = segments;
    root = static_cast<int>(segments.size());  // checked as the root is
  } else {
    op->buf = static_cast<char*>(segments[0].buf);
  }
  op->root = root;
  op->header.kind = static_cast<uint8_t>(kind);
  op->header.dtype = static_cast<uint8_t>(dtype);
  op->header.root = root;
  op->header.world = static_cast<uint32_t>(size_);
  op->header.alignment = options_.part_alignment;
  op->header.local_size = static_cast<uint32_t>(local_size_);
  op->header.count = count;
  return Submit(std::move(op));
}

CollectiveOp HostCommunicator::Submit(std::shared_ptr<Op> op) {
  const std::string what =
      absl::StrFormat("%s (count %d, %s)", OpKindName(op->kind), op->count,
                      DTypeName(op->dtype));
  return queue_->Submit(what, [this, op, what](uint64_t seq, OpStats* stats) {
    op->seq = op->header.seq = seq;
    op->deadline = absl::Now() + options_.op_timeout;
    if (!trace_) return Run(*op, stats);
    absl::FPrintF(stderr, "collective: rank %d #%d %s start\n", rank_, seq,
                  what);
    absl::Status s = Run(*op, stats);
    absl::FPrintF(stderr, "collective: rank %d #%d %s\n", rank_, seq,
                  s.ok() ? "ok" : "error: " + s.ToString());
    return s;
  });
}

CollectiveOp HostCommunicator::AllGatherMany(
    const std::vector<Segment>& segments, DType dtype) {
  if (segments.empty()) return CollectiveOp::Finished(absl::OkStatus());
  if (segments.size() == 1) {
    return AllGather(segments[0].buf, segments[0].count, dtype);
  }
  // Step D tags segment s's transfers from node n with s·M + n (16 bits),
  // and the header carries the number of segments as its root.
  const size_t limit = 0xFFFF / static_cast<size_t>(size_ / local_size_);
  if (segments.size() > limit) {
    CollectiveOp last;
    for (size_t i = 0; i < segments.size(); i += limit) {
      last = AllGatherMany(
          std::vector<Segment>(
              segments.begin() + i,
              segments.begin() + std::min(segments.size(), i + limit)),
          dtype);
    }
    return last;
  }
  return IssueMany(OpKind::kAllGatherMany, segments, dtype, 0);
}

absl::Status HostCommunicator::Run(Op& op, OpStats* stats) {
  if (size_ == 1) return absl::OkStatus();  // a sum of one is the value
  Step first(op, rank_);
  op.peer_headers.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) first.Headers(p, &op.header, &op.peer_headers[p]);
  }
  switch (op.kind) {
    case OpKind::kBarrier:
      return RunStep(op, first, stats);
    case OpKind::kReduceScatter:
      return RunReduceScatter(op, first, stats);
    case OpKind::kAllGather:
    case OpKind::kAllGatherMany:
      return RunAllGather(op, first, stats);
    case OpKind::kAllReduce: {
      ZS_RETURN_IF_ERROR(RunReduceScatter(op, first, stats));
      Step none(op, rank_);
      return RunAllGather(op, none, stats);
    }
    case OpKind::kBroadcast: {
      AddScatter(op, first);
      ZS_RETURN_IF_ERROR(RunStep(op, first, stats));
      Step none(op, rank_);
      return RunAllGather(op, none, stats);
    }
  }
  return absl::InternalError("unknown op kind");
}

absl::Status HostCommunicator::RunReduceScatter(Op& op, Step& first,
                                                OpStats* stats) {
  const int g = local_size_, nodes = size_ / g;
  const int node = rank_ / g, local = rank_ % g;
  const size_t es = op.es();
  auto part = [&](int r) { return PartRange(op.count, r); };
  // Step A, inside the node: this rank reduces parts n·G + local, n < M,
  // laid out back to back (off[n]); slot lp of scratch_ holds local rank
  // lp's contributions.
  std::vector<uint64_t> off(nodes + 1, 0);
  for (int n = 0; n < nodes; ++n)
    off[n + 1] = off[n] + part(n * g + local).size();
  const uint64_t slice = off[nodes];
  scratch_.resize(std::max<size_t>(scratch_.size(), g * slice * es));
  char* scratch = scratch_.data();
  Step& a = first;
  for (int lp = 0; lp < g; ++lp) {
    if (lp == local) continue;
    const int peer = node * g + lp;
    for (int n = 0; n < nodes; ++n) {
      const Range theirs = part(n * g + lp);
      a.Send(peer, n, op.buf + theirs.begin * es, theirs.size() * es);
      a.Recv(peer, n, scratch + (lp * slice + off[n]) * es,
             part(n * g + local).size() * es);
    }
  }
  ZS_RETURN_IF_ERROR(RunStep(op, a, stats));
  partial_.resize(std::max<size_t>(partial_.size(), slice));
  std::vector<const void*> inputs(std::max(g, nodes));
  for (int n = 0; n < nodes; ++n) {
    const Range r = part(n * g + local);
    for (int lp = 0; lp < g; ++lp) {
      inputs[lp] = lp == local ? op.buf + r.begin * es
                               : scratch + (lp * slice + off[n]) * es;
    }
    ReduceTree(inputs.data(), g, op.dtype, partial_.data() + off[n],
               DType::kFloat32, r.size());
  }
  // Step B, across nodes between ranks of equal local rank: fp32 partial
  // sums of the reduced slice only.
  const Range mine = part(rank_);
  scratch_.resize(
      std::max<size_t>(scratch_.size(), nodes * mine.size() * sizeof(float)));
  float* received = reinterpret_cast<float*>(scratch_.data());
  Step b(op, rank_);
  for (int n = 0; n < nodes; ++n) {
    if (n == node) continue;
    const int peer = n * g + local;
    b.Send(peer, 0, partial_.data() + off[n],
           part(peer).size() * sizeof(float));
    b.Recv(peer, 0, received + n * mine.size(), mine.size() * sizeof(float));
  }
  ZS_RETURN_IF_ERROR(RunStep(op, b, stats));
  for (int n = 0; n < nodes; ++n) {
    inputs[n] =
        n == node ? partial_.data() + off[node] : received + n * mine.size();
  }
  ReduceTree(inputs.data(), nodes, DType::kFloat32, op.buf + mine.begin * es,
             op.dtype, mine.size());
  return absl::OkStatus();
}

absl::Status HostCommunicator::RunAllGather(Op& op, Step& first,
                                            OpStats* stats) {
  const int g = local_size_, nodes = size_ / g;
  const int node = rank_ / g, local = rank_ % g;
  const size_t es = op.es();
  // The buffers: op.buf alone, or kAllGatherMany's segments, each split
  // by its own count; segment s's transfers carry index s (step C) and
  // s·M + n (step D).
  std::vector<Segment> segs = op.segments;
  if (op.kind != OpKind::kAllGatherMany) segs = {Segment{op.buf, op.count}};
  // Step C, across nodes: gather parts n·G + local.
  Step& c = first;
  for (size_t s = 0; s < segs.size(); ++s) {
    char* buf = static_cast<char*>(segs[s].buf);
    auto part = [&](int r) { return PartRange(segs[s].count, r); };
    const Range mine = part(rank_);
    for (int n = 0; n < nodes; ++n) {
      if (n == node) continue;
      const int peer = n * g + local;
      const Range theirs = part(peer);
      const uint32_t index = static_cast<uint32_t>(s);
      c.Send(peer, index, buf + mine.begin * es, mine.size() * es);
      c.Recv(peer, index, buf + theirs.begin * es, theirs.size() * es);
    }
  }
  ZS_RETURN_IF_ERROR(RunStep(op, c, stats));
  // Step D, inside the node: exchange those M parts with the node peers.
  Step d(op, rank_);
  for (size_t s = 0; s < segs.size(); ++s) {
    char* buf = static_cast<char*>(segs[s].buf);
    auto part = [&](int r) { return PartRange(segs[s].count, r); };
    for (int lp = 0; lp < g; ++lp) {
      if (lp == local) continue;
      const int peer = node * g + lp;
      for (int n = 0; n < nodes; ++n) {
        const Range have = part(n * g + local);
        const Range want = part(n * g + lp);
        const uint32_t index = static_cast<uint32_t>(s * nodes + n);
        d.Send(peer, index, buf + have.begin * es, have.size() * es);
        d.Recv(peer, index, buf + want.begin * es, want.size() * es);
      }
    }
  }
  return RunStep(op, d, stats);
}

void HostCommunicator::AddScatter(Op& op, Step& step) {
  const size_t es = op.es();
  if (rank_ == op.root) {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const Range q = PartRange(op.count, r);
      step.Send(r, 0, op.buf + q.begin * es, q.size() * es);
    }
  } else {
    const Range mine = PartRange(op.count, rank_);
    step.Recv(op.root, 0, op.buf + mine.begin * es, mine.size() * es);
  }
}

absl::Status HostCommunicator::CheckHeader(const Op& op, int peer,
                                           const void* wire) const {
  WireHeader h;
  std::memcpy(&h, wire, sizeof(h));
  if (h.magic != kMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        op.Describe(), ": ", transport_->PeerName(peer),
        " sent a malformed collective header (not a zeroshard peer?)"));
  }
  const WireHeader& m = op.header;
  const bool root_matters =
      op.kind == OpKind::kBroadcast || op.kind == OpKind::kAllGatherMany;
  if (h.kind != m.kind || h.dtype != m.dtype || h.count != m.count ||
      (root_matters && h.root != m.root) || h.seq != m.seq) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "collective mismatch at op #%d: rank %d called %s, %s called %s "
        "(op #%d)",
        m.seq, rank_, DescribeCall(m.kind, m.count, m.dtype, m.root),
        transport_->PeerName(peer),
        DescribeCall(h.kind, h.count, h.dtype, h.root), h.seq));
  }
  if (h.world != m.world || h.alignment != m.alignment ||
      h.local_size != m.local_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: configuration mismatch with %s: world %d/%d, part_alignment "
        "%d/%d, local_size %d/%d (this rank/peer)",
        op.Describe(), transport_->PeerName(peer), m.world, h.world,
        m.alignment, h.alignment, m.local_size, h.local_size));
  }
  return absl::OkStatus();
}

absl::Status HostCommunicator::RunStep(Op& op, Step& step, OpStats* stats) {
  auto& transfers = step.transfers();
  for (Transfer& t : transfers) {
    if (t.send) {
      transport_->Send(t.peer, t.tag, t.data, t.bytes, &t.c);
    } else {
      transport_->Recv(t.peer, t.tag, t.data, t.bytes, &t.c);
    }
  }
  auto fail = [&](absl::Status s) {
    transport_->Abort();  // nothing refers to the transfers any more
    return s;
  };
  absl::Status deferred;  // a payload error; a header mismatch explains more
  while (true) {
    const bool progressed = transport_->Progress();
    bool all_done = true, headers_pending = false;
    for (Transfer& t : transfers) {
      if (!t.c.done) {
        all_done = false;
        headers_pending |= t.header;
        continue;
      }
      if (t.checked) continue;
      t.checked = true;
      absl::Status s = t.c.status;
      if (!s.ok()) {  // from the transport: say which op
        s = absl::Status(s.code(),
                         absl::StrCat(op.Describe(), ": ", s.message()));
      } else if (!t.send) {
        if (t.header) {
          s = CheckHeader(op, t.peer, t.data);
        } else if (t.c.bytes != t.bytes) {
          s = absl::InvalidArgumentError(absl::StrFormat(
              "%s: %s sent %d bytes, expected %d", op.Describe(),
              transport_->PeerName(t.peer), t.c.bytes, t.bytes));
        }
      }
      if (!s.ok()) {
        if (t.header) return fail(s);
        if (deferred.ok()) deferred = s;
        continue;
      }
      if (!t.header) {
        (t.send ? stats->bytes_sent : stats->bytes_received) += t.bytes;
      }
    }
    if (all_done || (!deferred.ok() && !headers_pending)) break;
    std::vector<int> waiting;
    for (const Transfer& t : transfers) {
      if (t.c.done) continue;
      absl::Status peer = transport_->PeerStatus(t.peer);
      if (!peer.ok()) {
        return fail(absl::UnavailableError(
            absl::StrCat(op.Describe(), ": ", peer.message())));
      }
      if (std::find(waiting.begin(), waiting.end(), t.peer) == waiting.end()) {
        waiting.push_back(t.peer);
      }
    }
    const absl::Time now = absl::Now();
    if (now >= op.deadline) {
      std::sort(waiting.begin(), waiting.end());
      std::vector<std::string> names;
      for (int p : waiting) names.push_back(transport_->PeerName(p));
      return fail(absl::DeadlineExceededError(
          absl::StrFormat("%s timed out after %s waiting for %s", op.Describe(),
                          absl::FormatDuration(options_.op_timeout),
                          absl::StrJoin(names, ", "))));
    }
    if (queue_->stopping()) {
      return fail(
          absl::CancelledError(op.Describe() + ": communicator destroyed"));
    }
    if (!progressed) {
      transport_->WaitForEvent(std::min(op.deadline - now, kMaxEventWait));
    }
  }
  ++op.step;
  if (!deferred.ok()) return fail(deferred);
  return absl::OkStatus();
}

}  // namespace collective
}  // namespace zeroshard
