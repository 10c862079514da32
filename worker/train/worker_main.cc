// zeroshard-worker: one rank of a ZeRO training run of GPT-2 (worker_cli.h
// for its command line, worker_run.h for the run). The production binary:
// no test hooks (zeroshard-worker-for-tests has them).
#include "worker/train/worker_cli.h"

int main(int argc, char** argv) {
  return zeroshard::train::WorkerMain(argc, argv, {});
}
