#include "launcher/config_check.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/flags.h"
#include "launcher/save_path.h"
#include "worker/config/ds_config.h"
#include "worker/config/resolved_table.h"
#include "worker/train/train_flags.h"

namespace zeroshard {
namespace {

const char kProg[] = "zeroshard config check";

int Fail(const std::vector<std::string>& warnings, const std::string& error) {
  for (const std::string& w : warnings) {
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
  std::fprintf(stderr, "%s: error: %s\n", kProg, error.c_str());
  return 2;
}

}  // namespace

int RunConfigCommand(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  const char usage[] =
      "Usage: zeroshard config check ds.json [flags] (zeroshard config "
      "check --help)\n";
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::printf(
        "%s\nResolves a DeepSpeed config as `zeroshard train` would and "
        "prints every\nkey, its value and where it came from.\n",
        usage);
    return 0;
  }
  if (sub != "check") {
    std::fprintf(stderr, "zeroshard config: %s\n%s",
                 sub.empty() ? "a subcommand is needed"
                             : ("unknown subcommand '" + sub + "'").c_str(),
                 usage);
    return 2;
  }
  train::TrainFlags f;
  uint32_t workers = 2;
  FlagSet flags(
      kProg,
      "zeroshard config check ds.json [flags]\n\n"
      "Resolves a DeepSpeed config as `zeroshard train` would with the same\n"
      "flags and prints every key, its value and where it came from (file,\n"
      "auto<-flag, auto<-model, default, derived). Exit 0 when it resolves,\n"
      "2 with the error otherwise. Starts nothing; reads no data (--save's\n"
      "directory is checked as train checks it).");
  train::AddTrainFlags(&flags, &f);
  flags.Uint32("workers", &workers, "worker processes W (the world size)");
  auto rest = flags.Parse(argc, argv, 3);
  if (flags.help_requested()) {
    std::fputs(flags.Usage().c_str(), stdout);
    return 0;
  }
  if (!rest.ok()) return Fail({}, std::string(rest.status().message()));
  if (rest->size() > 1 || (rest->size() == 1 && !f.config.empty())) {
    return Fail({}, "give one config file (ds.json or --config)");
  }
  if (rest->size() == 1) f.config = (*rest)[0];
  if (f.config.empty()) return Fail({}, "give the config file: ds.json");
  if (workers < 1 || workers > 256) {
    return Fail({}, "--workers must be in [1, 256]");
  }
  // As train checks it up front (the data files are not looked at here).
  if (absl::Status s = CheckSavePath(f.save, {}); !s.ok()) {
    return Fail({}, std::string(s.message()));
  }
  std::vector<std::string> warnings;
  absl::StatusOr<config::EngineConfig> c =
      train::ParseConfigForFlags(f, static_cast<int>(workers), &warnings);
  if (!c.ok()) return Fail(warnings, std::string(c.status().message()));
  // What the engine makes of it for this model (e.g. ZeroOptions' rules).
  absl::StatusOr<train::TrainSpec> spec =
      train::TrainSpecFromFlags(f, *c, &warnings);
  if (!spec.ok()) return Fail(warnings, std::string(spec.status().message()));
  std::printf("%s for %u workers: OK\n%s\n", f.config.c_str(), workers,
              config::DescribeEngineConfig(*c).c_str());
  std::fputs(config::RenderResolvedTable(c->resolved, false).c_str(), stdout);
  const std::vector<std::string> server_flags = config::NvmeServerFlags(*c);
  if (!server_flags.empty()) {
    std::printf("servers: %s\n", absl::StrJoin(server_flags, " ").c_str());
  }
  for (const std::string& w : warnings) std::printf("warning: %s\n", w.c_str());
  return 0;
}

}  // namespace zeroshard
