// The shard server's Prometheus metrics: what ShardStore::Stats() reports,
// refreshed at every scrape (names below; the HELP texts say the units).
//   zeroshard_server_info{shard,num_shards,storage} 1
//   zeroshard_server_step, zeroshard_server_epoch (gauges)
//   zeroshard_server_optimizer_steps_total
//   zeroshard_server_owned_parameters, zeroshard_server_state_bytes
//   zeroshard_server_received_bytes_total (gradients pushed in),
//   zeroshard_server_sent_bytes_total (parameters gathered out)
//   zeroshard_server_contributions_applied_total,
//   zeroshard_server_duplicates_ignored_total,
//   zeroshard_server_requests_rejected_total
//   zeroshard_server_optimizer_parameters_total (owned parameters per
//   optimizer step: rate() is the optimizer's throughput)
//   zeroshard_server_last_step_seconds and
//   zeroshard_server_optimizer_parameters_per_second (owned parameters /
//   last step's optimizer time; 0 before the first step): the last step's,
//   kept for dashboards that read them; the step-time histogram is the
//   CommitStep latency, grpc_server_handling_seconds{grpc_method=
//   "CommitStep"} (rpc_metrics.h)
//   zeroshard_server_storage_read_bytes_total,
//   zeroshard_server_storage_written_bytes_total,
//   zeroshard_server_last_step_io_wait_seconds (NVMe tier; 0 in RAM)
#ifndef ZEROSHARD_SERVER_SERVER_METRICS_H_
#define ZEROSHARD_SERVER_SERVER_METRICS_H_

#include <cstdint>

#include "common/metrics/registry.h"
#include "server/store/shard_store.h"

namespace zeroshard {

// Adds the metrics above to `registry`; `store` must outlive every Render.
void AddStoreMetrics(const ShardStore* store, uint32_t shard_index,
                     uint32_t num_shards, metrics::Registry* registry);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SERVER_METRICS_H_
