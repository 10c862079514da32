// zeroshard-worker-for-tests: zeroshard-worker (worker_cli.h) with the
// failure points of the launcher's tests; testonly, never shipped
// (no_test_hooks_test.sh checks that zeroshard-worker has none).
//
//   ZEROSHARD_TEST_FAIL_AT="R:K"   rank R exits with status 5 right after
//                                  step K (tests/launcher_test.sh)
//
// `zeroshard train --worker_binary=PATH` runs it instead of zeroshard-worker.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "worker/train/worker_cli.h"

namespace {

// The ZEROSHARD_TEST_FAIL_AT rank and step; {-1, -1} when unset or bad.
struct FailAt {
  int rank = -1;
  long long step = -1;
};

FailAt ReadFailAt() {
  FailAt f;
  const char* v = std::getenv("ZEROSHARD_TEST_FAIL_AT");
  if (v == nullptr || std::sscanf(v, "%d:%lld", &f.rank, &f.step) != 2) {
    return FailAt{};
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const FailAt fail_at = ReadFailAt();
  zeroshard::train::WorkerHooks hooks;
  hooks.after_step = [fail_at](int rank,
                               const zeroshard::engine::StepStats& s) {
    if (rank != fail_at.rank || s.step != fail_at.step) return;
    std::fprintf(stderr, "rank %d: ZEROSHARD_TEST_FAIL_AT: exiting 5\n", rank);
    std::fflush(stderr);
    _exit(5);  // not 3, a permanent error (elastic::kExitPermanent)
  };
  return zeroshard::train::WorkerMain(argc, argv, hooks);
}
