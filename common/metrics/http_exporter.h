// An HTTP endpoint for Prometheus scrapes (cpp-httplib from Debian behind
// this small class):
//   GET /metrics   Registry::Render(), "text/plain; version=0.0.4"
//   GET /healthz   "ok"
// anything else is 404.
//
//   ZS_ASSIGN_OR_RETURN(auto http,
//                       metrics::HttpExporter::Start("0.0.0.0", 9090,
//                       &registry));
//   printf("metrics on http://%s/metrics\n", http->address().c_str());
//
// Serves from its own threads (two) until destroyed; the registry must
// outlive it. Threads it starts inherit the caller's signal mask.
#ifndef ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_
#define ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics/registry.h"

namespace httplib {
class Server;
}

namespace zeroshard::metrics {

class HttpExporter {
 public:
  // Listens on host:port (port 0 picks a free one). UNAVAILABLE naming the
  // address when it cannot listen; INVALID_ARGUMENT for a port outside
  // [0, 65535].
  static absl::StatusOr<std::unique_ptr<HttpExporter>> Start(
      const std::string& host, int port, Registry* registry);
  ~HttpExporter();  // stops serving and joins the threads

  int port() const { return port_; }
  std::string address() const;  // host:port

 private:
  HttpExporter() = default;
  std::string host_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace zeroshard::metrics

#endif  // ZEROSHARD_COMMON_METRICS_HTTP_EXPORTER_H_
