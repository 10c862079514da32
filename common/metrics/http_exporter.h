// An HTTP endpoint for Prometheus scrapes:
//   GET /metrics   Registry::Render(), "text/plain; version=0.0.4"
//   GET /healthz   "ok"
// HEAD of either, 404 for other paths, 405 for other methods, 400 for a
// malformed request, 431 for a request head over 8 KiB. Every response
// closes its connection (no keep-alive).
//
//   ZS_ASSIGN_OR_RETURN(auto http,
//                       metrics::HttpExporter::Start("0.0.0.0", 9090,
//                       &registry));
//   printf("metrics on http://%s/metrics\n", http->address().c_str());
//
// One thread serves every connection with non-blocking sockets and poll(),
// so no client can hold it: a connection must deliver its whole request
// head within `head_timeout` of being accepted (a client trickling a byte
// at a time gains nothing) and take its response within `write_timeout`,
// or it is closed; at `max_connections` open ones the oldest is closed to
// admit a new one. The registry is rendered on that thread.
//
// Serves until destroyed; the registry must outlive it. The thread inherits
// the caller's signal mask; writes never raise SIGPIPE.
#ifndef ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_
#define ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/metrics/registry.h"

namespace zeroshard::metrics {

struct HttpExporterOptions {
  absl::Duration head_timeout = absl::Seconds(5);    // from accept
  absl::Duration write_timeout = absl::Seconds(10);  // from the full head
  int max_connections = 64;                          // >= 1
};

class HttpExporter {
 public:
  // Listens on host:port (port 0 picks a free one). UNAVAILABLE naming the
  // address when it cannot listen; INVALID_ARGUMENT for a port outside
  // [0, 65535] or options out of range.
  static absl::StatusOr<std::unique_ptr<HttpExporter>> Start(
      const std::string& host, int port, Registry* registry,
      const HttpExporterOptions& options = {});
  ~HttpExporter();  // stops serving, closes every connection, joins

  int port() const { return port_; }
  std::string address() const;  // host:port

  // Responses cut off so far because the client did not take them within
  // `write_timeout` (their connections closed). Any thread.
  int64_t responses_cut() const { return responses_cut_.load(); }

 private:
  HttpExporter() = default;
  void Serve();  // the serving thread

  std::string host_;
  int port_ = 0;
  Registry* registry_ = nullptr;
  HttpExporterOptions options_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop Serve
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> responses_cut_{0};
  std::thread thread_;
};

}  // namespace zeroshard::metrics

#endif  // ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_
