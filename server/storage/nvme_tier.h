// NvmeTier: optimizer state in files under --nvme-path (ZeRO-Infinity's
// NVMe offload, run on the shard server), RAM bounded by a fixed number of
// buffers whatever the model size.
//
// Files (formats in manifest.h), in directory options.path:
//   MANIFEST                 commit record: generation, steps, CRC tables
//   p.G m.G v.G serve.G      the state of generation G (immutable once
//                            committed, so snapshots hard-link them)
//   grad                     gradient accumulator (kDisk only; not durable:
//                            recreated as zeros by Open)
//
// The step (Step): sub-groups of sub_group_size elements flow through
// buffer_count buffers: while AdamW runs on sub-group i (on the thread pool),
// the I/O threads read sub-group i+1.. (p, m, v, g) and write sub-group i-1
// (p, m, v, serve) back. Each chunk read is checked against its CRC-32C.
//
// Crash consistency: a step never writes the committed generation G. It
// writes every sub-group's results to new files of generation G+1, fsyncs
// them, then replaces MANIFEST atomically (write MANIFEST.tmp, fsync,
// rename, fsync the directory) — the commit point — and only then deletes
// generation G. A failure or crash at any point before the rename leaves
// MANIFEST naming G, whose files are untouched: the step can be retried and
// a restarted server opens G. Files of generations the manifest does not name
// are garbage, removed on Open and after each commit. Disk use is therefore
// 2 × 14 bytes per element (two generations of p, m, v, serve) + 4 for grad.
// WriteMaster (parameter initialisation) edits G in place: it first marks
// the manifest dirty, and Flush/Step/Snapshot clear the mark, so a crash in
// the middle is reported by Open (FAILED_PRECONDITION) instead of serving a
// half-written model.
//
// Snapshot(dir): Flush, then hard-link the committed generation's files into
// dir (they are immutable: later steps write new generations), falling back
// to Env::CopyFile (reflink, else copy_file_range: in-kernel, never through
// this process's RAM) across file systems, then write dir/MANIFEST. After a
// snapshot the next WriteMaster first copies G to G+1 (the linked files must
// stay unchanged).
//
// Memory: buffer_count × sub_group_size × 18 bytes (14 with kRam grads,
// which then need 4 bytes per element more), the read cache
// (read_cache_bytes), one scratch chunk per Read*/Write* call in progress,
// up to 2 × kGradWriterChunks + 1 chunks per GradWriter open, and 16 bytes
// of CRC per block_size chunk per array. Stats() reports it.
//
// Threading: as in tier.h. Read* hold a shared lock on the committed
// generation; Step takes the exclusive lock only to switch generations.
#ifndef ZEROSHARD_SERVER_STORAGE_NVME_TIER_H_
#define ZEROSHARD_SERVER_STORAGE_NVME_TIER_H_

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "server/storage/array_file.h"
#include "server/storage/buffer.h"
#include "server/storage/grad_writer.h"
#include "server/storage/io_engine.h"
#include "server/storage/manifest.h"
#include "server/storage/read_cache.h"
#include "server/storage/tier.h"

namespace zeroshard {
namespace storage {

enum class GradLocation { kRam, kDisk };

// Field names follow DeepSpeed's config: aio.{block_size, queue_depth,
// intra_op_parallelism}, zero_optimization.sub_group_size,
// offload_optimizer.{buffer_count, buffer_size}.
struct NvmeOptions {
  std::string path;  // --nvme-path: a directory (created by Create)
  // Bytes per I/O request and per checksummed chunk; a multiple of 4096.
  uint64_t block_size = 1 << 20;
  int queue_depth = 32;          // requests in flight per I/O thread
  int intra_op_parallelism = 1;  // I/O threads
  // Elements per optimizer sub-group; 2 × sub_group_size must be a multiple
  // of block_size (so sub-groups start on chunk boundaries in every array).
  uint64_t sub_group_size = 1 << 21;
  int buffer_count = 4;  // sub-group buffers in the pipeline, >= 3
  // Elements per buffer; 0 = sub_group_size. Must be >= sub_group_size.
  uint64_t buffer_size = 0;
  uint64_t read_cache_bytes = 64 << 20;  // serving-copy chunk cache
  GradLocation grads = GradLocation::kDisk;
  Env* env = nullptr;          // null: DefaultEnv()
  ThreadPool* pool = nullptr;  // AdamW/CRC threads; null: the step thread
};

class NvmeTier : public StorageTier {
 public:
  // A new tier in options.path (one directory level is created; its parent
  // must exist). ALREADY_EXISTS if it holds a MANIFEST;
  // RESOURCE_EXHAUSTED if the file system lacks the space of two generations
  // plus gradients; INVALID_ARGUMENT for bad options or layout.
  static absl::StatusOr<std::unique_ptr<NvmeTier>> Create(
      const NvmeOptions& options, const TierLayout& layout);
  // The tier committed in options.path (layout from its manifest).
  // NOT_FOUND if there is none; DATA_LOSS naming the file for a corrupt
  // manifest or a missing, truncated or foreign state file;
  // FAILED_PRECONDITION if a WriteMaster was interrupted or block_size or
  // sub_group_size do not fit the files.
  static absl::StatusOr<std::unique_ptr<NvmeTier>> Open(
      const NvmeOptions& options);
  // Open if options.path holds a tier (FAILED_PRECONDITION unless its layout
  // equals `layout`), else Create.
  static absl::StatusOr<std::unique_ptr<NvmeTier>> OpenOrCreate(
      const NvmeOptions& options, const TierLayout& layout);
  ~NvmeTier() override;

  const TierLayout& layout() const override { return layout_; }
  absl::Status WriteMaster(uint64_t offset, const float* data,
                           uint64_t n) override;
  absl::Status ReadMaster(uint64_t offset, uint64_t n, float* out) override;
  absl::Status ReadMoments(uint64_t offset, uint64_t n, float* m,
                           float* v) override;
  absl::Status WriteMoments(uint64_t offset, const float* m, const float* v,
                            uint64_t n) override;
  absl::Status ReadServing(uint64_t offset, uint64_t n, uint16_t* out,
                           uint64_t* step) override;
  absl::Status WriteGrad(uint64_t offset, const float* data,
                         uint64_t n) override;
  absl::Status AddGrad(uint64_t offset, const float* data, uint64_t n) override;
  absl::Status ReadGrad(uint64_t offset, uint64_t n, float* out) override;
  absl::Status ZeroGrad() override;
  // With kDisk gradients a FileGradWriter (grad_writer.h): RAM
  // 2 × kGradWriterChunks × block_size (+ one chunk) per writer open.
  absl::StatusOr<std::unique_ptr<GradWriter>> NewGradWriter(
      uint64_t offset, uint64_t n) override;
  static constexpr int kGradWriterChunks = 4;
  absl::Status Step(const std::vector<AdamWHyper>& hypers) override;
  absl::Status Flush() override;
  absl::Status Snapshot(const std::string& dir) override;
  TierStats Stats() const override;

  // Reads and verifies every chunk of the committed generation; DATA_LOSS
  // naming the first corrupt file.
  absl::Status Verify();
  uint64_t generation() const ABSL_LOCKS_EXCLUDED(mu_);
  const NvmeOptions& options() const { return options_; }

  // INVALID_ARGUMENT naming the first option out of its documented range
  // (what Create and Open check first).
  static absl::Status CheckOptions(const NvmeOptions& options);

 private:
  NvmeTier(const NvmeOptions& options, const TierLayout& layout);
  absl::Status Init();  // engine, grads, cache
  absl::Status CheckRange(uint64_t offset, uint64_t n) const;
  std::string FileName(ArrayKind kind, uint64_t generation) const;
  ArrayHeader HeaderFor(ArrayKind kind, uint64_t generation) const;
  Manifest MakeManifest(bool dirty) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status WriteManifest(const Manifest& m);
  // Removes array files of generations other than the committed one.
  void CollectGarbage() ABSL_LOCKS_EXCLUDED(mu_);
  // Copies (hypers == nullptr) or steps the committed generation into a new
  // one and commits it (nvme_step.cc).
  absl::Status RunPipeline(const std::vector<AdamWHyper>* hypers);
  absl::Status EditGrad(uint64_t offset, const float* data, uint64_t n,
                        bool add);

  const NvmeOptions options_;
  const TierLayout layout_;
  Env* const env_;
  MemoryAccount account_;
  std::unique_ptr<IoEngine> engine_;
  std::unique_ptr<ReadCache> cache_;
  bool direct_ = true;

  mutable absl::Mutex mu_;  // the committed generation
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<std::unique_ptr<ArrayFile>, kStateArrays> files_
      ABSL_GUARDED_BY(mu_);
  // Set by WriteMaster until the manifest is rewritten clean.
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  // The committed generation is hard-linked by a snapshot.
  std::atomic<bool> shared_{false};
  uint64_t next_generation_ = 0;  // never reused, even after a failed step

  // Gradients: a file (kDisk) or an array (kRam). Caller-serialised, except
  // that GradWriters of disjoint ranges run concurrently: edits of chunks
  // they share (and EditGrad's) take grad_mu_.
  std::unique_ptr<ArrayFile> grad_file_;
  absl::Mutex grad_mu_;
  AlignedBuffer grad_ram_;
  // Pipeline buffers, allocated at the first step and kept.
  struct SubBuffer {
    std::array<AlignedBuffer, 5> arrays;  // indexed by ArrayKind
    IoBatch reads, writes;
  };
  std::vector<std::unique_ptr<SubBuffer>> buffers_;

  mutable absl::Mutex stats_mu_;
  double last_step_seconds_ ABSL_GUARDED_BY(stats_mu_) = 0;
  double last_io_wait_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t last_step_bytes_ ABSL_GUARDED_BY(stats_mu_) = 0;
};

}  // namespace storage
}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_STORAGE_NVME_TIER_H_
