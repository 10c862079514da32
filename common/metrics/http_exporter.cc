#include "common/metrics/http_exporter.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"

namespace zeroshard::metrics {

absl::StatusOr<std::unique_ptr<HttpExporter>> HttpExporter::Start(
    const std::string& host, int port, Registry* registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics port ", port, " is not in [0, 65535]"));
  }
  std::unique_ptr<HttpExporter> e(new HttpExporter());
  e->host_ = host;
  e->server_ = std::make_unique<httplib::Server>();
  e->server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  // httplib's default also sets SO_REUSEPORT, which would let a second
  // process share a busy port silently: SO_REUSEADDR only.
  e->server_->set_socket_options([](socket_t sock) {
    const int one = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  e->server_->Get("/metrics",
                  [registry](const httplib::Request&, httplib::Response& res) {
                    res.set_content(registry->Render(),
                                    "text/plain; version=0.0.4; charset=utf-8");
                  });
  e->server_->Get("/healthz",
                  [](const httplib::Request&, httplib::Response& res) {
                    res.set_content("ok\n", "text/plain");
                  });
  const int bound = port == 0
                        ? e->server_->bind_to_any_port(host)
                        : (e->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port,
                     " (address in use or not available)"));
  }
  e->port_ = bound;
  httplib::Server* server = e->server_.get();
  auto done = std::make_shared<std::atomic<bool>>(false);
  e->thread_ = std::thread([server, done] {
    server->listen_after_bind();
    done->store(true);
  });
  // stop() is a no-op until the server runs: wait for it here so that the
  // destructor's stop() always ends the listen loop.
  while (!server->is_running() && !done->load()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (done->load()) {
    return absl::UnavailableError(
        absl::StrCat("metrics server on ", host, ":", bound, " stopped"));
  }
  return e;
}

HttpExporter::~HttpExporter() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string HttpExporter::address() const {
  return absl::StrCat(host_, ":", port_);
}

}  // namespace zeroshard::metrics
