#include "worker/collective/ucx_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace collective {
namespace {

constexpr absl::Duration kCloseTimeout = absl::Seconds(5);

absl::Status UcsError(ucs_status_t s, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", ucs_status_string(s)));
}

class UcxTransport : public Transport {
 public:
  UcxTransport(int rank, int size) : rank_(rank), size_(size) {}
  ~UcxTransport() override;

  absl::Status Init(Bootstrap& bootstrap, const UcxTransportOptions& options);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string PeerName(int peer) const override {
    return absl::StrCat("rank ", peer, " (", peers_[peer].where, ")");
  }
  void Send(int peer, uint64_t tag, const void* data, size_t bytes,
            Completion* done) override;
  void Recv(int peer, uint64_t tag, void* data, size_t bytes,
            Completion* done) override;
  bool Progress() override;
  void WaitForEvent(absl::Duration timeout) override;
  void Wake() override;
  absl::Status PeerStatus(int peer) override;
  void Abort() override;

 private:
  struct Peer {
    UcxTransport* self = nullptr;
    int rank = 0;
    std::string where;  // "host pid N"
    ucp_ep_h ep = nullptr;
    std::string failure;  // set by the error handler
  };
  struct Request {
    UcxTransport* self;
    int peer;
    Completion* done;
    void* req = nullptr;
    ucp_tag_recv_info_t info{};
  };

  static void OnSend(void* request, ucs_status_t status, void* user_data);
  static void OnRecv(void* request, ucs_status_t status,
                     const ucp_tag_recv_info_t* info, void* user_data);
  static void OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);
  void Finish(Request* r, ucs_status_t status, size_t bytes);
  absl::Status StatusFor(int peer, ucs_status_t status) const;
  void CloseEndpoints(bool force);

  const int rank_;
  const int size_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int ucx_fd_ = -1;
  int wake_fd_ = -1;
  std::vector<Peer> peers_;
  std::list<Request> requests_;  // in flight or finished, not yet freed
  bool progressed_ = false;      // a callback ran
};

UcxTransport::~UcxTransport() {
  // After a peer failed, the worker and context are left to the process's
  // exit: UCX 1.13's ucp_worker_destroy asserts (abort) when a TCP
  // endpoint to the dead peer still has a wireup reply pending (seen about
  // once in 20 runs of ucx_multiprocess_test's DeadPeer case). A leak per
  // failure is the price (an elastic worker re-forming its group).
  const bool failed =
      std::any_of(peers_.begin(), peers_.end(),
                  [](const Peer& p) { return !p.failure.empty(); });
  if (worker_ != nullptr) {
    CloseEndpoints(/*force=*/false);
    if (failed) {
      if (wake_fd_ >= 0) close(wake_fd_);
      return;
    }
    ucp_worker_destroy(worker_);
  }
  if (context_ != nullptr) ucp_cleanup(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

absl::Status UcxTransport::Init(Bootstrap& bootstrap,
                                const UcxTransportOptions& options) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return absl::InternalError("eventfd failed");
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) return UcsError(s, "ucp_config_read");
  // TCP segments of 64 KiB out and 256 KiB in instead of UCX's 8 and 64:
  // fewer sends and receives per message across nodes (docs/benchmarks.md).
  // UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE in the environment win. A
  // transport's key goes to ucp_config_modify without its prefix (UCX
  // applies it to every transport that has it: here only tcp).
  for (const auto& [name, value] :
       {std::pair<const char*, const char*>{"TX_SEG_SIZE", "64K"},
        {"RX_SEG_SIZE", "256K"}}) {
    if (std::getenv((std::string("UCX_TCP_") + name).c_str()) != nullptr) {
      continue;
    }
    s = ucp_config_modify(config, name, value);
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcsError(s, std::string("ucp_config_modify ") + name);
    }
  }
  if (options.loopback_only && std::getenv("UCX_NET_DEVICES") == nullptr) {
    s = ucp_config_modify(config, "NET_DEVICES", "lo");
    if (s != UCS_OK) {
      ucp_config_release(config);
      return UcsError(s, "ucp_config_modify NET_DEVICES");
    }
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) return UcsError(s, "ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) return UcsError(s, "ucp_worker_create");
  s = ucp_worker_get_efd(worker_, &ucx_fd_);
  if (s != UCS_OK) return UcsError(s, "ucp_worker_get_efd");

  ucp_address_t* address = nullptr;
  size_t address_len = 0;
  s = ucp_worker_get_address(worker_, &address, &address_len);
  if (s != UCS_OK) return UcsError(s, "ucp_worker_get_address");
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // blob = "<host> pid <pid>" '\0' <UCX worker address>
  std::string blob = absl::StrCat(host, " pid ", getpid());
  blob.push_back('\0');
  blob.append(reinterpret_cast<const char*>(address), address_len);
  ucp_worker_release_address(worker_, address);
  ZS_ASSIGN_OR_RETURN(std::vector<std::string> blobs,
                      bootstrap.AllGather(blob));

  peers_.resize(size_);
  for (int p = 0; p < size_; ++p) {
    Peer& peer = peers_[p];
    const size_t nul = blobs[p].find('\0');
    if (nul == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", p, " sent a malformed bootstrap blob"));
    }
    peer.self = this;
    peer.rank = p;
    peer.where = blobs[p].substr(0, nul);
    if (p == rank_) continue;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address =
        reinterpret_cast<const ucp_address_t*>(blobs[p].data() + nul + 1);
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxTransport::OnPeerError;
    ep.err_handler.arg = &peer;
    s = ucp_ep_create(worker_, &ep, &peer.ep);
    if (s != UCS_OK) {
      return UcsError(s, absl::StrCat("ucp_ep_create to ", PeerName(p)));
    }
  }
  return absl::OkStatus();
}

void UcxTransport::OnPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  Peer* peer = static_cast<Peer*>(arg);
  if (peer->failure.empty()) {
    peer->failure =
        absl::StrCat(peer->self->PeerName(peer->rank),
                     " is unreachable: ", ucs_status_string(status));
  }
  peer->self->progressed_ = true;
}

absl::Status UcxTransport::StatusFor(int peer, ucs_status_t status) const {
  switch (status) {
    case UCS_OK:
      return absl::OkStatus();
    case UCS_ERR_MESSAGE_TRUNCATED:
      return absl::InvalidArgumentError(absl::StrCat(
          "message from ", PeerName(peer), " longer than expected"));
    case UCS_ERR_CANCELED:
      return absl::CancelledError("transfer cancelled");
    default:
      return absl::UnavailableError(absl::StrCat(
          "transfer with ", PeerName(peer), ": ", ucs_status_string(status)));
  }
}

void UcxTransport::Finish(Request* r, ucs_status_t status, size_t bytes) {
  r->done->done = true;
  r->done->status = StatusFor(r->peer, status);
  r->done->bytes = bytes;
  progressed_ = true;
}

void UcxTransport::OnSend(void* request, ucs_status_t status, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  r->self->Finish(r, status, 0);
}

void UcxTransport::OnRecv(void* request, ucs_status_t status,
                          const ucp_tag_recv_info_t* info, void* user_data) {
  Request* r = static_cast<Request*>(user_data);
  r->self->Finish(r, status, status == UCS_OK ? info->length : 0);
}

void UcxTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes,
                        Completion* done) {
  if (!peers_[peer].failure.empty() || peers_[peer].ep == nullptr) {
    done->done = true;
    done->status = absl::UnavailableError(
        peers_[peer].failure.empty() ? PeerName(peer) + ": endpoint closed"
                                     : peers_[peer].failure);
    return;
  }
  requests_.push_back(Request{this, peer, done});
  Request* r = &requests_.back();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxTransport::OnSend;
  p.user_data = r;
  ucs_status_ptr_t req =
      ucp_tag_send_nbx(peers_[peer].ep, data, bytes, tag, &p);
  if (UCS_PTR_IS_PTR(req)) {
    r->req = req;
    return;
  }
  Finish(r, UCS_PTR_STATUS(req), 0);
  requests_.pop_back();
}

void UcxTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes,
                        Completion* done) {
  requests_.push_back(Request{this, peer, done});
  Request* r = &requests_.back();
  ucp_request_param_t p{};
  // Always complete through the callback: UCX 1.13 left the length of an
  // immediately completed (unexpected eager) receive at 0.
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                   UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  p.cb.recv = &UcxTransport::OnRecv;
  p.user_data = r;
  p.recv_info.tag_info = &r->info;
  ucs_status_ptr_t req =
      ucp_tag_recv_nbx(worker_, data, bytes, tag, ~uint64_t{0}, &p);
  if (UCS_PTR_IS_PTR(req)) {
    r->req = req;
    return;
  }
  const ucs_status_t s = UCS_PTR_STATUS(req);
  Finish(r, s, s == UCS_OK ? r->info.length : 0);
  requests_.pop_back();
}

bool UcxTransport::Progress() {
  progressed_ = false;
  while (ucp_worker_progress(worker_) != 0) progressed_ = true;
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->done->done) {
      ucp_request_free(it->req);
      it = requests_.erase(it);
    } else {
      ++it;
    }
  }
  return progressed_;
}

void UcxTransport::WaitForEvent(absl::Duration timeout) {
  const ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) return;  // events pending: progress again
  pollfd fds[2] = {{ucx_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  const int ms = static_cast<int>(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(timeout)));
  if (poll(fds, 2, ms) > 0 && (fds[1].revents & POLLIN)) {
    uint64_t drain;
    ssize_t n = read(wake_fd_, &drain, sizeof(drain));
    (void)n;
  }
}

void UcxTransport::Wake() {
  const uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

absl::Status UcxTransport::PeerStatus(int peer) {
  if (peers_[peer].failure.empty()) return absl::OkStatus();
  return absl::UnavailableError(peers_[peer].failure);
}

void UcxTransport::CloseEndpoints(bool force) {
  std::vector<ucs_status_ptr_t> closing;
  for (Peer& peer : peers_) {
    if (peer.ep == nullptr) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    // A failed endpoint can only be force-closed.
    p.flags = (force || !peer.failure.empty()) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t req = ucp_ep_close_nbx(peer.ep, &p);
    if (UCS_PTR_IS_PTR(req)) closing.push_back(req);
    peer.ep = nullptr;
  }
  const absl::Time deadline = absl::Now() + kCloseTimeout;
  for (ucs_status_ptr_t req : closing) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS &&
           absl::Now() < deadline) {
      ucp_worker_progress(worker_);
    }
    // Released also when still in progress (a peer that does not answer
    // the close, e.g. an idle one): UCX frees it when it ends, and
    // ucp_worker_destroy asserts that no request is left unreleased.
    ucp_request_free(req);
  }
}

void UcxTransport::Abort() {
  for (Request& r : requests_) {
    if (!r.done->done) ucp_request_cancel(worker_, r.req);
  }
  CloseEndpoints(/*force=*/true);
  const absl::Time deadline = absl::Now() + kCloseTimeout;
  while (absl::Now() < deadline) {
    Progress();
    if (requests_.empty()) break;
  }
  // Whatever UCX did not finish is reported as cancelled; UCX no longer
  // touches caller memory once the endpoints are closed.
  for (Request& r : requests_) {
    if (!r.done->done) {
      r.done->done = true;
      r.done->status = absl::CancelledError("transport aborted");
    }
  }
  requests_.clear();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> CreateUcxTransport(
    Bootstrap& bootstrap, const UcxTransportOptions& options) {
  auto t = std::make_unique<UcxTransport>(bootstrap.rank(), bootstrap.size());
  ZS_RETURN_IF_ERROR(t->Init(bootstrap, options));
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace collective
}  // namespace zeroshard
