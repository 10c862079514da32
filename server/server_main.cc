// zeroshard-server: serves one shard of a job's model state over gRPC.
//
//   zeroshard-server --shard-index=0 --num-shards=2 --port=7000
//
// Prints "zeroshard-server: shard I/K listening on HOST:PORT" once ready
// (and writes the port to --port-file when given, for launchers and tests
// that pass --port=0). --storage=nvme --nvme_path=DIR keeps the optimizer
// state in DIR/shard-k (see server/storage_flags.h); a bad path exits 2, a
// locked, corrupt or previously used state directory exits 1, each with one
// line naming the path. SIGTERM or SIGINT: health turns NOT_SERVING, a step
// the job already prepared may still be committed (new pushes are refused,
// so any other step is abandoned), RPCs in flight get the rest of
// --grace_seconds, then with --checkpoint_dir the last committed step is
// kept in a shutdown snapshot that the next start restores (the job then
// resumes there instead of rolling back to a checkpoint), and the process
// exits 0 (1 if the snapshot could not be written).
//
// Every flag is checked before gRPC starts: a bad one (a number out of
// range, a --checkpoint_dir that cannot be created or written, a TLS key that
// does not parse or match the certificate, a key or token file others may
// read) exits 2 with one line naming the flag, and nothing listens.
// Without --max_state_bytes the limit of the model state follows what the
// process may use (common/memory_limit.h), logged at start.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/env/env.h"
#include "common/fault/fault_spec.h"
#include "common/flags.h"
#include "common/hostname.h"
#include "common/malloc_tuning.h"
#include "common/memory_limit.h"
#include "common/metrics/http_exporter.h"
#include "common/metrics/process_metrics.h"
#include "common/metrics/rpc_metrics.h"
#include "common/model_spec.h"
#include "common/mutex_checks.h"
#include "common/version.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/auth/request_guard.h"
#include "server/auth/server_security.h"
#include "server/checkpoint/checkpointer.h"
#include "server/fault_interceptor.h"
#include "server/health_port.h"
#include "server/membership/membership.h"
#include "server/membership_service.h"
#include "server/pod_ordinal.h"
#include "server/server_metrics.h"
#include "server/shard_service.h"
#include "server/storage_flags.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace {

int Main(int argc, char** argv) {
  std::string host = "127.0.0.1";
  int64_t port = 0;
  std::string port_file;
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  int64_t threads = 2;
  int64_t grpc_threads = 16;
  double grace_seconds = 2.0;
  int64_t metrics_port = -1;
  int64_t health_port = -1;
  bool shard_index_from_hostname = false;
  FlagSet flags("zeroshard-server",
                "zeroshard-server [flags]\n\n"
                "Serves one shard of a job's fp32 master weights and AdamW "
                "state over gRPC\n(service zeroshard.v1.ShardService, plus "
                "grpc.health.v1.Health (by\n"
                "service name too) and server reflection; shard 0 also\n"
                "zeroshard.v1.MembershipService).");
  flags.String("host", &host,
               "Address to listen on (0.0.0.0 for every interface).");
  flags.Int64("port", &port,
              "TCP port; 0 picks a free one. A port another process listens "
              "on is refused, never shared.");
  flags.String("port_file", &port_file,
               "If set, write the chosen port to this file once listening.");
  flags.Uint32("shard_index", &shard_index, "This server's shard index k.");
  flags.Uint32("num_shards", &num_shards, "Number of shard servers K.");
  flags.Int64("threads", &threads,
              "Optimizer threads (AdamW, norms), including the RPC thread.");
  flags.Int64("grpc_threads", &grpc_threads,
              "Most control-plane RPCs handled at once (gRPC sync-server "
              "threads; Gather and PushGradients run as callbacks).");
  flags.Double("grace_seconds", &grace_seconds,
               "On SIGTERM, how long the step in flight may take to be "
               "committed (half of it) and RPCs in flight to finish (the "
               "rest), before the shutdown snapshot is written.");
  flags.Int64("metrics_port", &metrics_port,
              "Prometheus metrics over HTTP on --host at this port "
              "(GET /metrics); 0 picks a free one; -1: off.");
  flags.Int64("health_port", &health_port,
              "Plaintext port on --host serving only grpc.health.v1.Health "
              "(Kubernetes gRPC probes cannot use TLS); -1: off.");
  bool reflection = true;
  flags.Bool("reflection", &reflection,
             "Serve grpc.reflection.v1alpha.ServerReflection on --port (the "
             "services' schema, for grpcurl-style tools); the health port "
             "never does.");
  flags.Bool("shard_index_from_hostname", &shard_index_from_hostname,
             "Take --shard_index from the trailing -<ordinal> of the host "
             "name (a Kubernetes StatefulSet pod).");
  std::string fault_spec_flag;
  flags.String("fault_spec", &fault_spec_flag,
               "Fault injection for tests (common/fault/fault_spec.h): e.g. "
               "'seed=7,lose=0.05,dup=0.05,delay=0.05:20ms,"
               "lose_at=CommitStep#3'. A server can lose (answer replaced by "
               "UNAVAILABLE after the handler ran), dup (the same) or delay "
               "answers. Empty: $ZEROSHARD_SERVER_FAULTS, else none.");
  std::string checkpoint_dir;
  flags.String("checkpoint_dir", &checkpoint_dir,
               "Directory of this job's checkpoints (created if missing). "
               "At start the server restores the newest complete checkpoint "
               "found there (any number of servers may have written it); "
               "Checkpoint and Restore RPCs write and read it.");
  int64_t keep_checkpoints = 0;
  flags.Int64("keep_checkpoints", &keep_checkpoints,
              "Keep the newest N complete checkpoints in --checkpoint_dir: "
              "each new one removes the older ones (shutdown snapshots are "
              "kept). 0: keep every checkpoint.");
  int64_t lease_ms = 10000;
  flags.Int64("lease_ms", &lease_ms,
              "Membership lease (shard 0 hosts zeroshard.v1.MembershipService):"
              " a worker that sends no heartbeat for this many ms leaves its "
              "group. In [100, 600000].");
  double stream_idle_timeout_seconds = 60;
  flags.Double("stream_idle_timeout_seconds", &stream_idle_timeout_seconds,
               "A Gather or PushGradients stream that makes no progress for "
               "this long is cancelled (a push's range is released); 0: "
               "never. In [0, 86400].");
  bool shared_memory = true;
  flags.Bool("shared_memory", &shared_memory,
             "Serve Gather and PushGradients through shared memory to "
             "clients on this host that offer it (docs/shared_memory.md): "
             "the bytes skip gRPC and the TCP stack. false: every byte "
             "travels on the stream.");
  StorageFlags storage_flags;
  AddStorageFlags(&flags, &storage_flags);
  ServerSecurityFlags security_flags;
  AddServerSecurityFlags(&flags, &security_flags);
  std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) {
    ExitWithError(flags.program(),
                  absl::StrCat("unexpected argument '", rest[0], "'"));
  }
  if (shard_index_from_hostname) {
    if (flags.WasSet("shard_index")) {
      ExitWithError(flags.program(),
                    "give --shard_index or --shard_index_from_hostname, not "
                    "both");
    }
    absl::StatusOr<uint32_t> ordinal = PodOrdinal(LocalHostname());
    if (!ordinal.ok()) {
      ExitWithError(flags.program(), std::string(ordinal.status().message()));
    }
    shard_index = *ordinal;
  }
  if (health_port < -1 || health_port > 65535) {
    ExitWithError(flags.program(), absl::StrCat("--health_port ", health_port,
                                                " is not in [-1, 65535]"));
  }
  if (metrics_port < -1 || metrics_port > 65535) {
    ExitWithError(flags.program(), absl::StrCat("--metrics_port ", metrics_port,
                                                " is not in [-1, 65535]"));
  }
  if (num_shards == 0)
    ExitWithError(flags.program(), "--num_shards must be >= 1");
  if (shard_index >= num_shards) {
    ExitWithError(flags.program(),
                  absl::StrCat("--shard_index ", shard_index,
                               " must be below --num_shards ", num_shards));
  }
  if (port < 0 || port > 65535) {
    ExitWithError(flags.program(),
                  absl::StrCat("--port ", port, " is not in [0, 65535]"));
  }
  if (keep_checkpoints < 0 || keep_checkpoints > 1000000) {
    ExitWithError(flags.program(),
                  absl::StrCat("--keep_checkpoints ", keep_checkpoints,
                               " is not in [0, 1000000]"));
  }
  if (lease_ms < 100 || lease_ms > 600000) {
    ExitWithError(flags.program(), absl::StrCat("--lease_ms ", lease_ms,
                                                " is not in [100, 600000]"));
  }
  if (!(stream_idle_timeout_seconds >= 0 &&
        stream_idle_timeout_seconds <= 86400)) {
    ExitWithError(flags.program(),
                  "--stream_idle_timeout_seconds must be in "
                  "[0, 86400]");
  }
  if (threads < 1 || threads > 1024) {
    ExitWithError(flags.program(),
                  absl::StrCat("--threads ", threads, " is not in [1, 1024]"));
  }
  if (grpc_threads < 2 || grpc_threads > 4096) {
    ExitWithError(flags.program(), absl::StrCat("--grpc_threads ", grpc_threads,
                                                " is not in [2, 4096]"));
  }
  if (!(grace_seconds >= 0 && grace_seconds <= 3600)) {  // NaN fails too
    ExitWithError(flags.program(),
                  absl::StrCat("--grace_seconds ", grace_seconds,
                               " is not in [0, 3600]"));
  }
  if (host.empty()) ExitWithError(flags.program(), "--host must not be empty");
  if (!port_file.empty()) {
    const std::string dir = DirOf(port_file);
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        access(dir.c_str(), W_OK | X_OK) != 0) {
      ExitWithError(flags.program(),
                    absl::StrCat("--port_file ", port_file, ": ", dir,
                                 " is not a writable directory"));
    }
  }
  absl::StatusOr<fault::FaultSpec> fault_spec = fault::FaultSpecFromFlagOrEnv(
      fault_spec_flag, "ZEROSHARD_SERVER_FAULTS", fault::Side::kServer);
  if (!fault_spec.ok()) {
    ExitWithError(flags.program(), std::string(fault_spec.status().message()));
  }
  auto faults = std::make_shared<fault::FaultInjector>(*fault_spec);
  bool nvme = false;
  storage::NvmeOptions nvme_options;
  absl::Status storage_ok =
      CheckStorageFlags(storage_flags, shard_index, &nvme, &nvme_options);
  if (!storage_ok.ok()) {
    ExitWithError(flags.program(), std::string(storage_ok.message()));
  }
  // Files and numbers of the security flags, before anything starts.
  absl::StatusOr<ServerSecurity> security = LoadServerSecurity(security_flags);
  if (!security.ok()) {
    ExitWithError(flags.program(), std::string(security.status().message()));
  }
  // Last, as it creates the directory when missing (the others change
  // nothing).
  if (absl::Status s = MakeWritableDir("checkpoint_dir", checkpoint_dir);
      !s.ok()) {
    ExitWithError(flags.program(), std::string(s.message()));
  }
  // Every flag is good: warnings may be printed now.
  for (const std::string& w : security->warnings) {
    std::fprintf(stderr, "zeroshard-server: %s\n", w.c_str());
  }
  std::unique_ptr<storage::DirLock> checkpoint_lock;  // held until exit
  if (!checkpoint_dir.empty()) {
    auto lock = storage::DirLock::AcquireCheckpointDir(
        checkpoint_dir, shard_index, absl::Seconds(10));
    if (!lock.ok()) {
      ExitWithError(flags.program(), std::string(lock.status().message()), 1);
    }
    checkpoint_lock = std::move(*lock);
  }
  std::unique_ptr<storage::DirLock> state_lock;  // held until exit
  if (nvme) {
    // The old state is discarded only for something to restore.
    const bool restorable = Checkpointer(DefaultEnv(), checkpoint_dir,
                                         shard_index, num_shards, nullptr)
                                .HasRestorable();
    auto lock =
        PrepareStateDir(nvme_options, restorable ? checkpoint_dir : "",
                        checkpoint_dir, [](const std::string& line) {
                          std::printf("zeroshard-server: %s\n", line.c_str());
                          std::fflush(stdout);
                        });
    if (!lock.ok()) {
      ExitWithError(flags.program(), std::string(lock.status().message()), 1);
    }
    state_lock = std::move(*lock);
  }

  // What the process may use: the default of --max_state_bytes and
  // --max_inflight_bytes (half of it).
  StateLimit memory_limit;
  if (std::optional<StateLimit> l = ChooseStateLimit(ReadMemoryLimits())) {
    memory_limit = *l;
  } else {
    memory_limit.source = "no limit found";
  }
  if (security_flags.max_inflight_bytes == -1 && memory_limit.limit > 0) {
    security_flags.max_inflight_bytes = std::max<int64_t>(
        64ll << 20, static_cast<int64_t>(memory_limit.limit / 2));
  }

  // Stream chunks are ~1 MiB buffers allocated per message: keep them on
  // the heap so the pages are reused (see common/malloc_tuning.h).
  TuneMallocForTransfers();
  SkipMutexDeadlockChecks();

  // Block termination signals in every thread; one thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Hold one gRPC library reference for the life of the process (after the
  // mask, so gRPC's threads inherit it): exit then never runs
  // grpc_shutdown, which can wait ~10 s on an internal poller thread.
  grpc_init();
  // After the mask: credentials start gRPC's threads, which must not take
  // SIGTERM themselves.
  std::shared_ptr<grpc::ServerCredentials> credentials =
      MakeServerCredentials(security_flags, &*security);

  StoreOptions options;
  options.shard_index = shard_index;
  options.num_shards = num_shards;
  options.threads = static_cast<int>(threads);
  if (nvme) UseNvmeTier(nvme_options, &options);
  options.checkpoint_dir = checkpoint_dir;
  options.keep_checkpoints = static_cast<uint32_t>(keep_checkpoints);
  ShardStore store(options);
  absl::StatusOr<uint64_t> restored =
      store.RestoreNewest([](const std::string& line) {
        std::printf("zeroshard-server: %s\n", line.c_str());
        std::fflush(stdout);
      });
  if (!restored.ok()) {
    ExitWithError(
        flags.program(),
        absl::StrCat("cannot restore from --checkpoint_dir ", checkpoint_dir,
                     ": ", restored.status().message()),
        1);
  }
  int64_t max_state_bytes = security_flags.max_state_bytes;
  if (max_state_bytes == -1) {
    max_state_bytes = nvme ? 0 : static_cast<int64_t>(memory_limit.bytes);
    if (!nvme && memory_limit.limit > 0) {
      std::printf(
          "zeroshard-server: --max_state_bytes %lld (%s: %s %s less a %s "
          "margin)\n",
          static_cast<long long>(max_state_bytes),
          HumanBytes(memory_limit.bytes).c_str(), memory_limit.source.c_str(),
          HumanBytes(memory_limit.limit).c_str(),
          HumanBytes(memory_limit.margin).c_str());
    }
  } else if (max_state_bytes == 0 ||
             static_cast<uint64_t>(max_state_bytes) > memory_limit.bytes) {
    // Allowed (allocations are checked), but said.
    const std::string given =
        max_state_bytes == 0 ? "0 (no limit)" : absl::StrCat(max_state_bytes);
    std::printf(
        "zeroshard-server: --max_state_bytes %s allows more than this "
        "process may use (%s: %s %s less a %s margin); a model larger than "
        "that is refused when its memory is\n",
        given.c_str(), HumanBytes(memory_limit.bytes).c_str(),
        memory_limit.source.c_str(), HumanBytes(memory_limit.limit).c_str(),
        HumanBytes(memory_limit.margin).c_str());
  }
  std::fflush(stdout);
  RequestGuard guard(
      std::move(security->tokens), [&store] { return store.job_id(); },
      static_cast<uint64_t>(max_state_bytes));
  SharedSegments shared_segments;
  ShardServiceImpl service(&store, &guard,
                           absl::Seconds(stream_idle_timeout_seconds),
                           shared_memory ? &shared_segments : nullptr);
  MembershipOptions membership_options;
  membership_options.lease_ms = lease_ms;
  membership_options.committed_step = [&store] { return store.Stats().step; };
  membership_options.log = [](const std::string& line) {
    std::printf("zeroshard-server: %s\n", line.c_str());
    std::fflush(stdout);
  };
  Membership membership(membership_options);
  MembershipServiceImpl membership_service(&membership, &guard);
  metrics::Registry registry;
  metrics::AddProcessMetrics(&registry);
  AddStoreMetrics(&store, shard_index, num_shards, &registry);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default: a second server started on a busy
  // port would listen beside the first and take half its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(host, ":", port), credentials,
                           &bound_port);
  builder.RegisterService(&service);
  if (shard_index == 0) builder.RegisterService(&membership_service);
  // Health by service name and reflection, so grpcurl-style tools work.
  std::vector<std::string> service_names = {
      v1::ShardService::service_full_name()};
  if (shard_index == 0) {
    service_names.push_back(v1::MembershipService::service_full_name());
  }
  SetServerReflection(&builder, reflection);
  // Interceptors run on every call, in this order, before any handler
  // (authentication, fault injection, ...); each feature appends its own.
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(metrics::ServerLatencyInterceptorFactory(&registry));
  if (!fault_spec->empty()) {  // after authentication
    interceptors.push_back(NewServerFaultInterceptorFactory(faults));
  }
  if (!interceptors.empty()) {
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  // One chunk (<= 1 MiB) plus its header; larger messages are refused by
  // gRPC with RESOURCE_EXHAUSTED before any handler sees them.
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + 4096));
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + 4096));
  // As a receiver of pushes: frames of up to 1 MiB (default 16 KiB) and a
  // fixed 8 MiB window per stream, no BDP probe (see SetTransferArgs in
  // client/shard_client.cc, the same settings for gathers).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_FRAME_SIZE, 1 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  // HTTP/2 keepalive: a client that stops answering pings for 20 s loses
  // its connection, so its streams end and their ranges are released.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  grpc::ResourceQuota quota("zeroshard-server");
  quota.SetMaxThreads(static_cast<int>(grpc_threads));
  ApplyServerLimits(security_flags, &builder, &quota);
  builder.SetResourceQuota(quota);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    ExitWithError(flags.program(),
                  absl::StrCat("cannot listen on ", host, ":", port,
                               " (address in use or not available)"),
                  1);
  }
  std::unique_ptr<metrics::HttpExporter> metrics_http;
  if (metrics_port >= 0) {
    auto http = metrics::HttpExporter::Start(
        host, static_cast<int>(metrics_port), &registry);
    if (!http.ok()) {
      ExitWithError(flags.program(), std::string(http.status().message()), 1);
    }
    metrics_http = std::move(*http);
    std::printf("zeroshard-server: metrics on http://%s/metrics\n",
                metrics_http->address().c_str());
  }
  std::unique_ptr<HealthPort> health;
  if (health_port >= 0) {
    auto started =
        HealthPort::Start(host, static_cast<int>(health_port), service_names);
    if (!started.ok()) {
      ExitWithError(flags.program(), std::string(started.status().message()),
                    1);
    }
    health = std::move(*started);
    health->SetServing(true);
    std::printf("zeroshard-server: health on %s:%d\n", host.c_str(),
                health->port());
  }
  AddHealthNames(server.get(), service_names, true);
  server->GetHealthCheckService()->SetServingStatus(true);
  if (!port_file.empty()) {
    absl::Status s = WriteFileAtomic(DefaultEnv(), port_file,
                                     absl::StrCat(bound_port, "\n"));
    if (!s.ok()) {
      ExitWithError(flags.program(),
                    absl::StrCat("cannot write --port_file: ", s.message()), 1);
    }
  }
  std::printf("zeroshard-server: shard %u/%u listening on %s:%d\n", shard_index,
              num_shards, host.c_str(), bound_port);
  if (shard_index == 0) {
    std::printf("zeroshard-server: membership service, lease %lld ms\n",
                static_cast<long long>(lease_ms));
  }
  std::fflush(stdout);

  int signo = 0;
  sigwait(&signals, &signo);
  std::printf("zeroshard-server: %s received, shutting down\n",
              signo == SIGTERM ? "SIGTERM" : "SIGINT");
  std::fflush(stdout);
  server->GetHealthCheckService()->SetServingStatus(false);
  if (health != nullptr) health->SetServing(false);
  // Finish the step if the job already prepared it, else abandon it (new
  // pushes and prepares answer UNAVAILABLE); then let RPCs finish.
  const int64_t grace_ms = static_cast<int64_t>(grace_seconds * 1000);
  if (!store.Drain(absl::Milliseconds(grace_ms / 2))) {
    std::printf(
        "zeroshard-server: the prepared step was not committed within "
        "%.1f s; it is abandoned\n",
        grace_seconds / 2);
  }
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(grace_ms - grace_ms / 2));
  server->Wait();
  int exit_code = 0;
  absl::StatusOr<std::string> snapshot = store.WriteShutdownSnapshot();
  if (!snapshot.ok()) {
    std::fprintf(stderr,
                 "zeroshard-server: cannot write the shutdown snapshot (%s); "
                 "the next start restores the newest checkpoint\n",
                 std::string(snapshot.status().message()).c_str());
    exit_code = 1;
  } else if (!snapshot->empty()) {
    std::printf(
        "zeroshard-server: step %llu kept in the shutdown snapshot %s\n",
        static_cast<unsigned long long>(store.Stats().step), snapshot->c_str());
  }
  if (!fault_spec->empty()) {
    std::printf("zeroshard-server: %s\n", faults->Summary().c_str());
  }
  std::printf("zeroshard-server: stopped\n");
  std::fflush(stdout);
  return exit_code;
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  zeroshard::ExitIfVersionFlag(argc, argv, "zeroshard-server");
  return zeroshard::Main(argc, argv);
}
