// Metrics in the Prometheus text exposition format (version 0.0.4): a
// registry of counters, gauges and histograms that a process updates and an
// HTTP endpoint (http_exporter.h) renders on every scrape.
//
//   metrics::Registry registry;
//   metrics::Counter* bytes = registry.GetCounter(
//       "zeroshard_server_received_bytes_total", "Gradient bytes received.");
//   bytes->Add(n);
//   registry.AddCollector([&] { step->Set(store.Stats().step); });
//   std::string text = registry.Render();
//
// A metric family is one name with one help text and one type; each
// distinct label set is one child. Get* returns the same child for the same
// (name, labels) and never null; a name that is not a valid Prometheus name,
// or that is registered again with another type, is a programming error
// (checked: the process aborts with the name). Families render sorted by
// name, children in creation order, so the output is deterministic.
//
// Threads: every method may be called from any thread. Children live as
// long as the registry; the pointers Get* returns stay valid until then.
// Collectors run under the registry's render lock, one Render at a time, and
// must not call Render themselves.
#ifndef ZEROSHARD_COMMON_METRICS_REGISTRY_H_
#define ZEROSHARD_COMMON_METRICS_REGISTRY_H_

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard::metrics {

// Label name/value pairs, in the order they are rendered.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A value that only goes up (or mirrors such a value kept elsewhere).
class Counter {
 public:
  void Add(double delta);
  // For a collector that copies a monotonic count kept elsewhere (e.g. the
  // store's byte counters): sets the value as is.
  void Set(double value);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that can go up and down.
class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into cumulative buckets with upper bounds `bounds`
// (strictly increasing; +Inf is implicit), plus their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_
      ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bounds for RPC latencies in seconds: 100 µs to ~100 s, ×~3 per bucket.
std::vector<double> LatencyBounds();

class Registry {
 public:
  Counter* GetCounter(const std::string& name, const std::string& help,
                      const Labels& labels = {});
  Gauge* GetGauge(const std::string& name, const std::string& help,
                  const Labels& labels = {});
  // `bounds` is used when the child is created (later calls keep it).
  Histogram* GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds,
                          const Labels& labels = {});

  // Runs at the start of every Render, in the order added: refreshes
  // values kept elsewhere (a store's statistics, /proc).
  void AddCollector(std::function<void()> collector);

  // Every family as Prometheus text (content type
  // "text/plain; version=0.0.4").
  std::string Render();

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Child {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<std::unique_ptr<Child>> children;
  };
  Child* GetChild(const std::string& name, const std::string& help, Type type,
                  const Labels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex render_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one Render at a time
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(render_mu_);
  absl::Mutex mu_;
  std::map<std::string, Family> families_ ABSL_GUARDED_BY(mu_);
};

// Formats a sample value as Prometheus does: integers without a fraction,
// +Inf, -Inf, NaN; otherwise the shortest round-trip decimal.
std::string FormatValue(double value);

}  // namespace zeroshard::metrics

#endif  // ZEROSHARD_COMMON_METRICS_REGISTRY_H_
