#include "server/server_metrics.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard {

void AddStoreMetrics(const ShardStore* store, uint32_t shard_index,
                     uint32_t num_shards, metrics::Registry* registry) {
  using metrics::Counter;
  using metrics::Gauge;
  metrics::Registry& r = *registry;
  const std::string storage = store->Stats().storage;
  r.GetGauge("zeroshard_server_info", "This shard server: labels only.",
             {{"shard", std::to_string(shard_index)},
              {"num_shards", std::to_string(num_shards)},
              {"storage", storage}})
      ->Set(1);
  // Each metric mirrors one number of StoreStats.
  struct Mirror {
    const char* name;
    const char* help;
    bool counter;
    double (*get)(const StoreStats&);
  };
  static constexpr Mirror kMirrors[] = {
      {"zeroshard_server_step", "Last committed step of the job on this shard.",
       false, [](const StoreStats& s) { return double(s.step); }},
      {"zeroshard_server_epoch", "Current job epoch.", false,
       [](const StoreStats& s) { return double(s.epoch); }},
      {"zeroshard_server_optimizer_steps_total",
       "Optimizer updates run (skipped steps not counted).", true,
       [](const StoreStats& s) { return double(s.optimizer_steps); }},
      {"zeroshard_server_owned_parameters",
       "Parameters in this shard's owned range.", false,
       [](const StoreStats& s) { return double(s.owned.size()); }},
      {"zeroshard_server_state_bytes",
       "Bytes of model state held in memory (master, moments, gradients, "
       "serving copy).",
       false, [](const StoreStats& s) { return double(s.bytes_held); }},
      {"zeroshard_server_received_bytes_total",
       "Gradient payload bytes received by pushes.", true,
       [](const StoreStats& s) { return double(s.bytes_pushed); }},
      {"zeroshard_server_sent_bytes_total",
       "Parameter payload bytes sent by gathers.", true,
       [](const StoreStats& s) { return double(s.bytes_gathered); }},
      {"zeroshard_server_contributions_applied_total",
       "Gradient contributions applied.", true,
       [](const StoreStats& s) { return double(s.contributions_applied); }},
      {"zeroshard_server_duplicates_ignored_total",
       "Repeated contributions acknowledged and ignored.", true,
       [](const StoreStats& s) { return double(s.duplicates_ignored); }},
      {"zeroshard_server_requests_rejected_total",
       "Requests rejected with an error status.", true,
       [](const StoreStats& s) { return double(s.requests_rejected); }},
      {"zeroshard_server_last_step_seconds",
       "Optimizer time of the last committed step.", false,
       [](const StoreStats& s) { return s.last_step_seconds; }},
      {"zeroshard_server_optimizer_parameters_per_second",
       "Optimizer throughput of the last step: owned parameters / step time.",
       false,
       [](const StoreStats& s) {
         return s.last_step_seconds > 0
                    ? double(s.owned.size()) / s.last_step_seconds
                    : 0.0;
       }},
      {"zeroshard_server_storage_read_bytes_total",
       "Bytes read by the storage tier (NVMe).", true,
       [](const StoreStats& s) { return double(s.storage_bytes_read); }},
      {"zeroshard_server_storage_written_bytes_total",
       "Bytes written by the storage tier (NVMe).", true,
       [](const StoreStats& s) { return double(s.storage_bytes_written); }},
      {"zeroshard_server_last_step_io_wait_seconds",
       "Time the last step waited for storage I/O.", false,
       [](const StoreStats& s) { return s.last_step_io_wait_seconds; }},
  };
  std::vector<std::function<void(double)>> setters;
  for (const Mirror& m : kMirrors) {
    if (m.counter) {
      Counter* c = r.GetCounter(m.name, m.help);
      setters.push_back([c](double v) { c->Set(v); });
    } else {
      Gauge* g = r.GetGauge(m.name, m.help);
      setters.push_back([g](double v) { g->Set(v); });
    }
  }
  // The optimizer's work as a counter (rate() is its throughput): owned
  // parameters for each optimizer step since the last scrape.
  Counter* parameters = r.GetCounter(
      "zeroshard_server_optimizer_parameters_total",
      "Parameters updated by the optimizer (owned parameters per step).");
  auto counted_steps = std::make_shared<uint64_t>(0);  // under Render's lock
  r.AddCollector([store, setters, parameters, counted_steps] {
    const StoreStats s = store->Stats();
    for (size_t i = 0; i < setters.size(); ++i) setters[i](kMirrors[i].get(s));
    if (s.optimizer_steps > *counted_steps) {
      parameters->Add(double(s.optimizer_steps - *counted_steps) *
                      double(s.owned.size()));
    }
    *counted_steps = s.optimizer_steps;
  });
}

}  // namespace zeroshard
