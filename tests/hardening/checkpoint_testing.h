// Helpers of the checkpoint probes of issue 23 (section B of
// tests/hardening/BUILD): a fleet of real zeroshard-server processes with
// --checkpoint_dir in a fresh directory, training steps and checkpoints
// driven through ShardClient, whole-model gathers, the raw ShardService
// stub (for requests ShardClient would never send), and byte-level edits of
// checkpoint files.
//
// Threading: one test thread. Errors: gtest failures (ASSERT in the
// helpers that return void; callers check HasFatalFailure()).
#ifndef ZEROSHARD_TESTS_HARDENING_CHECKPOINT_TESTING_H_
#define ZEROSHARD_TESTS_HARDENING_CHECKPOINT_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/shard_client.h"
#include "fleet/local_fleet.h"
#include "proto/zeroshard.grpc.pb.h"

namespace zeroshard::testing {

// $TEST_TMPDIR/<name> (or /tmp/<name>-<pid>), emptied.
std::string FreshDir(const std::string& name);

struct CkptJob {
  std::string root;  // the test's directory
  std::string ckpt;  // root/ckpt: the servers' --checkpoint_dir
  std::vector<std::string> flags;
  std::unique_ptr<LocalFleet> fleet;
  std::unique_ptr<ShardClient> client;
  uint64_t total = 0;  // elements of the model
};

// Starts `k` servers with --checkpoint_dir=root/ckpt (plus `extra`), logs
// under root; `binary` (empty: the real server) may be a wrapper script.
std::unique_ptr<CkptJob> StartCkptJob(const std::string& name, uint32_t k,
                                      std::vector<std::string> extra = {},
                                      const std::string& binary = "");

// Registers `spec` and writes seeded initial weights.
void RegisterAndInit(CkptJob& job, const v1::ModelSpec& spec);
// Pushes a seeded gradient for `step` at `epoch`, prepares and commits.
void TrainStep(CkptJob& job, uint64_t step, uint64_t epoch = 0);
// Checkpoints committed step `step` (both phases).
void CheckpointStep(CkptJob& job, uint64_t step);
// fp32 masters of the whole model (`step`, if not null, gets the step).
std::vector<float> GatherAll(CkptJob& job, uint64_t* step = nullptr);

// The raw stub of server k (plaintext fleet).
std::unique_ptr<v1::ShardService::Stub> RawStub(CkptJob& job, uint32_t k);
// Restore of one server through the raw stub.
grpc::Status RawRestore(CkptJob& job, uint32_t k, uint64_t step, uint64_t epoch,
                        v1::RestoreResponse* resp = nullptr);

// root/ckpt/step-S/shard-k-of-K.ckpt, root/ckpt/step-S.
std::string StepDir(const CkptJob& job, uint64_t step);
std::string ShardPath(const CkptJob& job, uint64_t step, uint32_t k,
                      uint32_t num);

// Whole files.
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& bytes);
// Bytes of a shard file before its payload (magic, header, header CRC).
uint64_t PayloadStart(const std::string& file_bytes);

// A line of `log` containing `text`, or "".
std::string FindLine(const std::string& log, const std::string& text);

}  // namespace zeroshard::testing

#endif  // ZEROSHARD_TESTS_HARDENING_CHECKPOINT_TESTING_H_
