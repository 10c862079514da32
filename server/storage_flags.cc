#include "server/storage_flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env/env.h"
#include "common/env/files.h"
#include "common/status_macros.h"

namespace zeroshard {

void AddStorageFlags(FlagSet* flags, StorageFlags* f) {
  flags->String("storage", &f->storage,
                "Where the optimizer state lives: ram, or nvme (files under "
                "--nvme_path, RAM bounded by the pipeline buffers).");
  flags->String(
      "nvme_path", &f->nvme_path,
      "With --storage=nvme: an existing writable directory; shard "
      "k keeps its state in DIR/shard-k (locked while running). "
      "State left by a previous run is refused, unless --checkpoint_dir "
      "is given: then it is discarded and the checkpoint restored.");
  flags->Int64("aio_block_size", &f->aio_block_size,
               "Bytes per I/O request and checksummed chunk (multiple of "
               "4096).");
  flags->Int64("aio_queue_depth", &f->aio_queue_depth,
               "I/O requests in flight per I/O thread.");
  flags->Int64("aio_intra_op_parallelism", &f->aio_intra_op_parallelism,
               "I/O threads.");
  flags->Int64("sub_group_size", &f->sub_group_size,
               "Elements per optimizer sub-group (2 x sub_group_size must be "
               "a multiple of --aio_block_size).");
  flags->Int64("buffer_count", &f->buffer_count,
               "Sub-group buffers in the step pipeline (>= 3).");
  flags->Int64("buffer_size", &f->buffer_size,
               "Elements per pipeline buffer; 0 = --sub_group_size.");
  flags->Int64("read_cache_bytes", &f->read_cache_bytes,
               "Serving-copy read cache (gathers) in bytes.");
  flags->Bool("grads_on_disk", &f->grads_on_disk,
              "Keep the gradient accumulator in a file, and with several "
              "contributions per step each further one in DIR/shard-k.slots "
              "(else in RAM, 4 bytes per element and contribution).");
}

namespace {

// Each numeric flag in its range, whatever --storage says (a flag given
// with a nonsense value is refused even where it has no effect).
absl::Status CheckStorageNumbers(const StorageFlags& f) {
  struct Range {
    const char* flag;
    int64_t value, lo, hi;
  };
  constexpr int64_t kMax = int64_t{1} << 50;
  for (const Range& r : {
           Range{"aio_block_size", f.aio_block_size, 1, 1ll << 30},
           Range{"aio_queue_depth", f.aio_queue_depth, 1, 4096},
           Range{"aio_intra_op_parallelism", f.aio_intra_op_parallelism, 1,
                 256},
           Range{"sub_group_size", f.sub_group_size, 1, kMax},
           Range{"buffer_count", f.buffer_count, 1, 1024},
           Range{"buffer_size", f.buffer_size, 0, kMax},
           Range{"read_cache_bytes", f.read_cache_bytes, 0, kMax},
       }) {
    if (r.value < r.lo || r.value > r.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", r.flag, " ", r.value, " is not in [", r.lo, ", ", r.hi, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckStorageFlags(const StorageFlags& f, uint32_t shard_index,
                               bool* nvme, storage::NvmeOptions* options) {
  *nvme = f.storage == "nvme";
  if (f.storage != "ram" && !*nvme) {
    return absl::InvalidArgumentError(
        absl::StrCat("--storage must be ram or nvme, not '", f.storage, "'"));
  }
  if (absl::Status s = CheckStorageNumbers(f); !s.ok()) return s;
  if (!*nvme) {
    if (!f.nvme_path.empty()) {
      return absl::InvalidArgumentError("--nvme_path needs --storage=nvme");
    }
    return absl::OkStatus();
  }
  if (f.nvme_path.empty()) {
    return absl::InvalidArgumentError("--storage=nvme needs --nvme_path");
  }
  struct stat st;
  if (stat(f.nvme_path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nvme_path ", f.nvme_path, " does not exist"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nvme_path ", f.nvme_path, " is not a directory"));
  }
  if (access(f.nvme_path.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--nvme_path ", f.nvme_path, " is not writable"));
  }
  options->path = absl::StrCat(f.nvme_path, "/shard-", shard_index);
  options->block_size = static_cast<uint64_t>(f.aio_block_size);
  options->queue_depth = static_cast<int>(f.aio_queue_depth);
  options->intra_op_parallelism = static_cast<int>(f.aio_intra_op_parallelism);
  options->sub_group_size = static_cast<uint64_t>(f.sub_group_size);
  options->buffer_count = static_cast<int>(f.buffer_count);
  options->buffer_size = static_cast<uint64_t>(f.buffer_size);
  options->read_cache_bytes = static_cast<uint64_t>(f.read_cache_bytes);
  options->grads = f.grads_on_disk ? storage::GradLocation::kDisk
                                   : storage::GradLocation::kRam;
  absl::Status s = storage::NvmeTier::CheckOptions(*options);
  if (!s.ok()) return absl::InvalidArgumentError(s.message());
  return absl::OkStatus();
}

absl::Status MakeWritableDir(const std::string& flag, const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  absl::Status s = zeroshard::MakeWritableDir(DefaultEnv(), dir);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, " ", dir, ": ", s.message()));
}

absl::StatusOr<std::unique_ptr<storage::DirLock>> PrepareStateDir(
    const storage::NvmeOptions& options, const std::string& restore_from,
    const std::string& checkpoint_dir,
    const std::function<void(const std::string&)>& log) {
  Env* env = DefaultEnv();
  ZS_RETURN_IF_ERROR(env->CreateDir(options.path));
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<storage::DirLock> lock,
                      storage::DirLock::Acquire(options.path));
  if (!env->FileExists(absl::StrCat(options.path, "/MANIFEST"))) return lock;
  if (!restore_from.empty()) {
    ZS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                        env->ListDir(options.path));
    for (const std::string& name : names) {
      if (name == "LOCK") continue;
      ZS_RETURN_IF_ERROR(env->RemoveFile(JoinPath(options.path, name)));
    }
    ZS_RETURN_IF_ERROR(env->SyncDir(options.path));
    log(absl::StrCat("discarded the previous state in ", options.path,
                     " (the newest checkpoint or shutdown snapshot in ",
                     restore_from, " is restored instead)"));
    return lock;
  }
  auto tier = storage::NvmeTier::Open(options);
  if (!tier.ok()) {
    return absl::Status(tier.status().code(),
                        absl::StrCat("state in ", options.path,
                                     " is "
                                     "unusable: ",
                                     tier.status().message()));
  }
  absl::Status verified = (*tier)->Verify();
  if (!verified.ok()) {
    return absl::Status(verified.code(), absl::StrCat("state in ", options.path,
                                                      " is "
                                                      "corrupt: ",
                                                      verified.message()));
  }
  if (!checkpoint_dir.empty()) {
    // A crash before the first checkpoint: this state is all there is.
    return absl::FailedPreconditionError(absl::StrCat(
        options.path, " holds the state of a previous run (",
        (*tier)->Stats().steps, " optimizer steps) and --checkpoint_dir ",
        checkpoint_dir,
        " holds no checkpoint or shutdown snapshot of this shard to restore "
        "instead: nothing was removed; move it away (or use another "
        "--nvme_path) to start this shard afresh"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      options.path, " holds the state of a previous run (",
      (*tier)->Stats().steps,
      " optimizer steps): move it away, use another --nvme_path, or give "
      "--checkpoint_dir to restart from a checkpoint"));
}

void UseNvmeTier(const storage::NvmeOptions& options, StoreOptions* store) {
  store->storage_name = "nvme";
  // Several contributions per step: slots 1.. beside the tier's gradient.
  if (options.grads == storage::GradLocation::kDisk) {
    store->grad_slot_dir = options.path + ".slots";
  }
  store->make_tier = [options](const storage::TierLayout& layout,
                               ThreadPool* pool)
      -> absl::StatusOr<std::unique_ptr<storage::StorageTier>> {
    storage::NvmeOptions o = options;
    o.pool = pool;
    auto tier = storage::NvmeTier::Create(o, layout);
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<storage::StorageTier>(std::move(*tier));
  };
}

}  // namespace zeroshard
