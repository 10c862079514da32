#include "worker/train/worker_cli.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/fault/fault_spec.h"
#include "common/flags.h"
#include "common/malloc_tuning.h"
#include "common/mutex_checks.h"
#include "common/version.h"
#include "worker/elastic/error_class.h"

namespace zeroshard::train {
namespace {

constexpr char kProgram[] = "zeroshard-worker";

// Declares the worker's own flags; --fault_spec goes to `fault_spec`.
void AddWorkerFlags(FlagSet* flags, WorkerOptions* o, std::string* fault_spec) {
  flags->String("servers", &o->servers,
                "shard servers, comma-separated (default: the config's)");
  flags->String("port_file", &o->port_file, "rank 0 writes its port here");
  flags->Bool("stats", &o->stats, "every rank prints its step stats");
  flags->String("fault_spec", fault_spec,
                "fault injection for tests (common/fault/fault_spec.h), e.g. "
                "'seed=7,drop=0.05,dup=0.05,delay=0.05:20ms,"
                "fail_at=AllReduce#3': RPCs to the servers can be dropped, "
                "failed, lost, duplicated or delayed, collectives failed or "
                "delayed; empty: $ZEROSHARD_FAULTS, else none");
  flags->String("metrics_file", &o->metrics_file,
                "JSON-lines step records of this rank (%r: the rank)");
  flags->String("metrics_host", &o->metrics_host,
                "address of the metrics endpoint (0.0.0.0: every interface)");
  flags->Int64("metrics_port", &o->metrics_port,
               "Prometheus metrics over HTTP at this port (GET /metrics); 0 "
               "picks a free one; -1: off");
  AddElasticFlags(flags, &o->elastic);
}

}  // namespace

int WorkerMain(int argc, char** argv, const WorkerHooks& hooks) {
  ExitIfVersionFlag(argc, argv, kProgram);
  TuneMallocForTransfers();
  SkipMutexDeadlockChecks();
  WorkerOptions o;
  std::string fault_spec;
  FlagSet flags(kProgram,
                "zeroshard-worker --config ds_config.json [flags]\n\nOne rank "
                "of a ZeRO run of GPT-2. Rank from ZEROSHARD_RANK, "
                "ZEROSHARD_WORLD_SIZE, ZEROSHARD_COORD (as zeroshard train "
                "sets them) or RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT "
                "(torchrun, PyTorchJob); --elastic: from the servers.");
  AddTrainFlags(&flags, &o.train);
  AddWorkerFlags(&flags, &o, &fault_spec);
  std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) {
    ExitWithError(kProgram,
                  absl::StrCat("unexpected argument '", rest[0], "'"));
  }
  if (absl::Status s = ValidateTrainFlags(o.train); !s.ok()) {
    ExitWithError(kProgram, std::string(s.message()));
  }
  auto faults = fault::FaultSpecFromFlagOrEnv(fault_spec, "ZEROSHARD_FAULTS",
                                              fault::Side::kWorker);
  if (!faults.ok()) {
    ExitWithError(kProgram, std::string(faults.status().message()));
  }
  o.faults = *faults;
  // Before any thread starts (gRPC, UCX, metrics).
  if (o.elastic.elastic) HandleStopSignals();
  const absl::Status st = RunWorker(o, hooks);
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, st.ToString().c_str());
    return elastic::WorkerExitCode(st);
  }
  return 0;
}

}  // namespace zeroshard::train
