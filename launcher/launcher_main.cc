// zeroshard: runs a job on this machine.
//
//   zeroshard train --config ds_config.json --data tokens.bin [flags]
//   zeroshard config check ds_config.json [flags]
//   zeroshard run [flags] [--] PROGRAM [ARGS...]
//
// `train` (train.h) trains GPT-2 with ZeRO: shard servers, W
// zeroshard-worker processes, progress, metrics and a report.
//
// Exit codes: 0 success, 1 the job failed, 2 bad command line.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/version.h"
#include "launcher/config_check.h"
#include "launcher/run_script.h"
#include "launcher/train.h"

namespace zeroshard {
namespace {

int Main(int argc, char** argv) {
  const char* usage =
      "Usage: zeroshard COMMAND [flags]\n\n"
      "Commands:\n"
      "  train          train GPT-2 with ZeRO: shard servers and workers on\n"
      "                 this machine, progress, metrics and a report\n"
      "                 (zeroshard train --help)\n"
      "  run            run a training program (a PyTorch script calling\n"
      "                 zeroshard.initialize) on W ranks of this machine,\n"
      "                 with shard servers started for it\n"
      "                 (zeroshard run --help)\n"
      "  config check   resolve a DeepSpeed config as train would and print\n"
      "                 every key, its value and its source\n"
      "                 (zeroshard config check --help)\n";
  if (argc < 2 || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "-h" || std::string(argv[1]) == "help") {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "train") return RunTrain(argc, argv);
  if (command == "config") return RunConfigCommand(argc, argv);
  if (command == "run") return RunScript(argc, argv);
  ExitWithError("zeroshard",
                absl::StrCat("unknown command '", command, "'\n", usage));
}

}  // namespace
}  // namespace zeroshard

int main(int argc, char** argv) {
  zeroshard::ExitIfVersionFlag(argc, argv, "zeroshard");
  return zeroshard::Main(argc, argv);
}
