// NvmeTier: opening, creating, element-range reads and writes, snapshots.
// The pipelined step is in nvme_step.cc.
#include "server/storage/nvme_tier.h"

#include <cstdio>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/storage/adamw_pass.h"

namespace zeroshard {
namespace storage {

constexpr char kManifestName[] = "MANIFEST";

NvmeTier::NvmeTier(const NvmeOptions& options, const TierLayout& layout)
    : options_(options),
      layout_(layout),
      env_(options.env != nullptr ? options.env : DefaultEnv()) {}

absl::Status NvmeTier::CheckOptions(const NvmeOptions& o) {
  if (o.path.empty()) {
    return absl::InvalidArgumentError(
        "the NVMe tier needs a path (--nvme-path)");
  }
  if (o.block_size < kIoAlign || o.block_size % kIoAlign != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block_size ", o.block_size, " must be a multiple of ", kIoAlign));
  }
  if (o.sub_group_size == 0 || (2 * o.sub_group_size) % o.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sub_group_size ", o.sub_group_size,
        " must be a positive multiple of block_size / 2 = ", o.block_size / 2,
        " elements"));
  }
  if (o.buffer_count < 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer_count ", o.buffer_count,
                     " must be >= 3 (read ahead, compute, write back)"));
  }
  if (o.buffer_size != 0 && o.buffer_size < o.sub_group_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer_size ", o.buffer_size,
        " elements is smaller than sub_group_size ", o.sub_group_size));
  }
  if (o.queue_depth < 1 || o.intra_op_parallelism < 1) {
    return absl::InvalidArgumentError(
        "queue_depth and intra_op_parallelism must be >= 1");
  }
  return absl::OkStatus();
}

std::string NvmeTier::FileName(ArrayKind kind, uint64_t generation) const {
  if (kind == kGrad) return JoinPath(options_.path, "grad");
  return JoinPath(options_.path,
                  absl::StrCat(ArrayName(kind), ".", generation));
}

ArrayHeader NvmeTier::HeaderFor(ArrayKind kind, uint64_t generation) const {
  ArrayHeader h;
  h.kind = kind;
  h.generation = generation;
  h.size = layout_.size;
  h.block_size = options_.block_size;
  return h;
}

absl::Status NvmeTier::CheckRange(uint64_t offset, uint64_t n) const {
  if (offset > layout_.size || n > layout_.size - offset) {
    return absl::InvalidArgumentError(
        absl::StrCat("range [", offset, ", ", offset + n,
                     ") is outside the tier's [0, ", layout_.size, ")"));
  }
  return absl::OkStatus();
}

absl::Status NvmeTier::Init() {
  ZS_ASSIGN_OR_RETURN(engine_,
                      IoEngine::Create(env_, options_.intra_op_parallelism,
                                       options_.queue_depth));
  cache_ = std::make_unique<ReadCache>(options_.read_cache_bytes,
                                       options_.block_size, &account_);
  if (options_.grads == GradLocation::kRam) {
    ZS_ASSIGN_OR_RETURN(grad_ram_,
                        AlignedBuffer::Allocate(layout_.size * 4, &account_,
                                                "the gradient accumulator"));
    return absl::OkStatus();
  }
  const std::string path = FileName(kGrad, 0);
  if (env_->FileExists(path)) ZS_RETURN_IF_ERROR(env_->RemoveFile(path));
  ZS_ASSIGN_OR_RETURN(grad_file_,
                      ArrayFile::Create(env_, path, HeaderFor(kGrad, 0)));
  grad_file_->ZeroAll();
  direct_ = direct_ && grad_file_->file()->direct();
  return absl::OkStatus();
}

Manifest NvmeTier::MakeManifest(bool dirty) const {
  Manifest m;
  m.layout = layout_;
  m.sub_group_size = options_.sub_group_size;
  m.block_size = options_.block_size;
  m.generation = generation_;
  m.steps = steps_;
  m.dirty = dirty;
  for (int k = 0; k < kStateArrays; ++k) m.crcs[k] = files_[k]->crcs();
  return m;
}

absl::Status NvmeTier::WriteManifest(const Manifest& m) {
  return WriteFileAtomic(env_, JoinPath(options_.path, kManifestName),
                         EncodeManifest(m));
}

void NvmeTier::CollectGarbage() {
  const uint64_t keep = generation();
  absl::StatusOr<std::vector<std::string>> names = env_->ListDir(options_.path);
  if (!names.ok()) return;
  for (const std::string& name : *names) {
    bool garbage = name == std::string(kManifestName) + ".tmp";
    for (int k = 0; k < kStateArrays && !garbage; ++k) {
      const std::string prefix = absl::StrCat(ArrayName(ArrayKind(k)), ".");
      uint64_t g;
      garbage = name.rfind(prefix, 0) == 0 &&
                absl::SimpleAtoi(name.substr(prefix.size()), &g) && g != keep;
    }
    if (!garbage) continue;
    absl::Status s = env_->RemoveFile(JoinPath(options_.path, name));
    if (!s.ok()) {
      std::fprintf(stderr, "storage: %s\n", s.ToString().c_str());
    }
  }
}

absl::StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Create(
    const NvmeOptions& options, const TierLayout& layout) {
  ZS_RETURN_IF_ERROR(CheckOptions(options));
  ZS_RETURN_IF_ERROR(ValidateLayout(layout));
  if (layout.size == 0) {
    return absl::InvalidArgumentError("the NVMe tier needs >= 1 element");
  }
  std::unique_ptr<NvmeTier> t(new NvmeTier(options, layout));
  Env* env = t->env_;
  ZS_RETURN_IF_ERROR(env->CreateDir(options.path));
  if (env->FileExists(JoinPath(options.path, kManifestName))) {
    return absl::AlreadyExistsError(absl::StrCat(
        options.path, " already holds an NVMe tier (MANIFEST); open it"));
  }
  uint64_t need = 0;
  for (int k = 0; k < kStateArrays; ++k) {
    need += 2 * (kHeaderBytes +
                 PaddedBytes(layout.size, ElementBytes(ArrayKind(k))));
  }
  if (options.grads == GradLocation::kDisk) {
    need += kHeaderBytes + PaddedBytes(layout.size, 4);
  }
  ZS_ASSIGN_OR_RETURN(uint64_t free_bytes, env->FreeBytes(options.path));
  if (free_bytes < need) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options.path, " has ", free_bytes, " bytes free; the NVMe tier needs ",
        need, " (two generations of p, m, v, serve plus gradients)"));
  }
  t->CollectGarbage();  // leftovers of an earlier, uncommitted Create
  ZS_RETURN_IF_ERROR(t->Init());
  absl::MutexLock l(&t->mu_);
  t->generation_ = 1;
  for (int k = 0; k < kStateArrays; ++k) {
    const std::string path = t->FileName(ArrayKind(k), 1);
    if (env->FileExists(path)) ZS_RETURN_IF_ERROR(env->RemoveFile(path));
    ZS_ASSIGN_OR_RETURN(
        t->files_[k],
        ArrayFile::Create(env, path, t->HeaderFor(ArrayKind(k), 1)));
    ZS_RETURN_IF_ERROR(t->files_[k]->file()->Sync());
    t->direct_ = t->direct_ && t->files_[k]->file()->direct();
  }
  ZS_RETURN_IF_ERROR(t->WriteManifest(t->MakeManifest(false)));
  t->next_generation_ = 2;
  return t;
}

absl::StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Open(
    const NvmeOptions& options) {
  ZS_RETURN_IF_ERROR(CheckOptions(options));
  Env* env = options.env != nullptr ? options.env : DefaultEnv();
  const std::string mpath = JoinPath(options.path, kManifestName);
  if (!env->FileExists(mpath)) {
    return absl::NotFoundError(absl::StrCat("no NVMe tier in ", options.path,
                                            ": ", mpath, " does not exist"));
  }
  ZS_ASSIGN_OR_RETURN(std::string bytes, ReadSmallFile(env, mpath));
  ZS_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, mpath));
  if (m.block_size != options.block_size) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.path, " was written with block_size ",
                     m.block_size, "; the options say ", options.block_size));
  }
  if (m.dirty) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.path,
                     ": parameters were being written (WriteMaster) when "
                     "the tier stopped; its state is incomplete"));
  }
  std::unique_ptr<NvmeTier> t(new NvmeTier(options, m.layout));
  {
    absl::MutexLock l(&t->mu_);
    t->generation_ = m.generation;
    t->steps_ = m.steps;
    for (int k = 0; k < kStateArrays; ++k) {
      const ArrayKind kind = ArrayKind(k);
      const std::string path = t->FileName(kind, m.generation);
      absl::StatusOr<std::unique_ptr<ArrayFile>> f = ArrayFile::Open(
          env, path, t->HeaderFor(kind, m.generation), std::move(m.crcs[k]));
      if (absl::IsNotFound(f.status())) {
        return absl::DataLossError(
            absl::StrCat("state file missing: ", f.status().message()));
      }
      if (!f.ok()) return f.status();
      t->files_[k] = std::move(*f);
      t->direct_ = t->direct_ && t->files_[k]->file()->direct();
    }
  }
  t->next_generation_ = m.generation + 1;
  t->CollectGarbage();
  ZS_RETURN_IF_ERROR(t->Init());
  return t;
}

absl::StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::OpenOrCreate(
    const NvmeOptions& options, const TierLayout& layout) {
  Env* env = options.env != nullptr ? options.env : DefaultEnv();
  if (!env->FileExists(JoinPath(options.path, kManifestName))) {
    return Create(options, layout);
  }
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<NvmeTier> t, Open(options));
  const TierLayout& have = t->layout();
  bool same = have.size == layout.size && have.serving == layout.serving &&
              have.groups.size() == layout.groups.size();
  for (size_t i = 0; same && i < have.groups.size(); ++i) {
    same = have.groups[i].begin == layout.groups[i].begin &&
           have.groups[i].end == layout.groups[i].end &&
           have.groups[i].group == layout.groups[i].group;
  }
  if (!same) {
    return absl::FailedPreconditionError(absl::StrCat(
        options.path, " holds a tier of ", have.size, " elements in ",
        have.groups.size(), " spans; the model needs ", layout.size, " in ",
        layout.groups.size()));
  }
  return t;
}

uint64_t NvmeTier::generation() const {
  absl::ReaderMutexLock l(&mu_);
  return generation_;
}

absl::Status NvmeTier::WriteMaster(uint64_t offset, const float* data,
                                   uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  if (n == 0) return absl::OkStatus();
  if (shared_.load()) ZS_RETURN_IF_ERROR(RunPipeline(nullptr));
  absl::MutexLock l(&mu_);
  if (!dirty_) {
    ZS_RETURN_IF_ERROR(WriteManifest(MakeManifest(true)));
    dirty_ = true;
  }
  AlignedBuffer scratch(options_.block_size, &account_);
  ZS_RETURN_IF_ERROR(files_[kP]->EditElems(
      offset, n, true, scratch,
      [&](char* chunk, uint64_t first, uint64_t lo, uint64_t hi) {
        std::memcpy(chunk + lo * 4, data + (first + lo - offset),
                    (hi - lo) * 4);
      }));
  ZS_RETURN_IF_ERROR(files_[kServe]->EditElems(
      offset, n, true, scratch,
      [&](char* chunk, uint64_t first, uint64_t lo, uint64_t hi) {
        ConvertServing(layout_.serving, data + (first + lo - offset),
                       reinterpret_cast<uint16_t*>(chunk) + lo, hi - lo);
      }));
  cache_->Clear();
  return absl::OkStatus();
}

absl::Status NvmeTier::ReadMaster(uint64_t offset, uint64_t n, float* out) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  AlignedBuffer scratch(options_.block_size, &account_);
  absl::ReaderMutexLock l(&mu_);
  return files_[kP]->ReadElems(offset, n, out, scratch);
}

absl::Status NvmeTier::WriteMoments(uint64_t offset, const float* m,
                                    const float* v, uint64_t n) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  if (n == 0) return absl::OkStatus();
  if (shared_.load()) ZS_RETURN_IF_ERROR(RunPipeline(nullptr));
  absl::MutexLock l(&mu_);
  if (!dirty_) {  // as WriteMaster: an interrupted write is detected
    ZS_RETURN_IF_ERROR(WriteManifest(MakeManifest(true)));
    dirty_ = true;
  }
  AlignedBuffer scratch(options_.block_size, &account_);
  const std::pair<ArrayKind, const float*> arrays[] = {{kM, m}, {kV, v}};
  for (const auto& [kind, src] : arrays) {
    ZS_RETURN_IF_ERROR(files_[kind]->EditElems(
        offset, n, true, scratch,
        [&](char* chunk, uint64_t first, uint64_t lo, uint64_t hi) {
          std::memcpy(chunk + lo * 4, src + (first + lo - offset),
                      (hi - lo) * 4);
        }));
    ZS_RETURN_IF_ERROR(files_[kind]->file()->Sync());
  }
  return absl::OkStatus();
}

absl::Status NvmeTier::ReadMoments(uint64_t offset, uint64_t n, float* m,
                                   float* v) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  AlignedBuffer scratch(options_.block_size, &account_);
  absl::ReaderMutexLock l(&mu_);
  ZS_RETURN_IF_ERROR(files_[kM]->ReadElems(offset, n, m, scratch));
  return files_[kV]->ReadElems(offset, n, v, scratch);
}

absl::Status NvmeTier::ReadServing(uint64_t offset, uint64_t n, uint16_t* out,
                                   uint64_t* step) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  absl::ReaderMutexLock l(&mu_);
  const ArrayFile& f = *files_[kServe];
  const uint64_t per = f.chunk_elems();
  for (uint64_t e = offset; e < offset + n;) {
    const uint64_t j = e / per;
    const uint64_t lo = e - j * per;
    const uint64_t hi = std::min(per, offset + n - j * per);
    ZS_ASSIGN_OR_RETURN(std::shared_ptr<const AlignedBuffer> chunk,
                        cache_->Get(generation_, f, j));
    std::memcpy(out + (e - offset), chunk->as<uint16_t>() + lo, (hi - lo) * 2);
    e = j * per + hi;
  }
  if (step != nullptr) *step = steps_;
  return absl::OkStatus();
}

absl::Status NvmeTier::EditGrad(uint64_t offset, const float* data, uint64_t n,
                                bool add) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  if (grad_file_ == nullptr) {
    float* g = grad_ram_.as<float>() + offset;
    if (add) {
      for (uint64_t i = 0; i < n; ++i) g[i] += data[i];
    } else {
      std::memcpy(g, data, n * 4);
    }
    return absl::OkStatus();
  }
  AlignedBuffer scratch(options_.block_size, &account_);
  absl::MutexLock l(&grad_mu_);
  return grad_file_->EditElems(
      offset, n, !add, scratch,
      [&](char* chunk, uint64_t first, uint64_t lo, uint64_t hi) {
        float* g = reinterpret_cast<float*>(chunk);
        const float* src = data + (first + lo - offset);
        if (add) {
          for (uint64_t i = lo; i < hi; ++i) g[i] += src[i - lo];
        } else {
          std::memcpy(g + lo, src, (hi - lo) * 4);
        }
      });
}

absl::Status NvmeTier::WriteGrad(uint64_t offset, const float* data,
                                 uint64_t n) {
  return EditGrad(offset, data, n, false);
}

absl::Status NvmeTier::AddGrad(uint64_t offset, const float* data, uint64_t n) {
  return EditGrad(offset, data, n, true);
}

absl::StatusOr<std::unique_ptr<GradWriter>> NvmeTier::NewGradWriter(
    uint64_t offset, uint64_t n) {
  if (grad_file_ == nullptr) return StorageTier::NewGradWriter(offset, n);
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  return std::make_unique<FileGradWriter>(grad_file_.get(), engine_.get(),
                                          &grad_mu_, &account_, offset, n,
                                          kGradWriterChunks);
}

absl::Status NvmeTier::ReadGrad(uint64_t offset, uint64_t n, float* out) {
  ZS_RETURN_IF_ERROR(CheckRange(offset, n));
  if (grad_file_ == nullptr) {
    std::memcpy(out, grad_ram_.as<float>() + offset, n * 4);
    return absl::OkStatus();
  }
  AlignedBuffer scratch(options_.block_size, &account_);
  return grad_file_->ReadElems(offset, n, out, scratch);
}

absl::Status NvmeTier::ZeroGrad() {
  if (grad_file_ == nullptr) {
    std::memset(grad_ram_.data(), 0, grad_ram_.size());
  } else {
    grad_file_->ZeroAll();
  }
  return absl::OkStatus();
}

absl::Status NvmeTier::Flush() {
  absl::MutexLock l(&mu_);
  if (!dirty_) return absl::OkStatus();
  ZS_RETURN_IF_ERROR(files_[kP]->file()->Sync());
  ZS_RETURN_IF_ERROR(files_[kServe]->file()->Sync());
  ZS_RETURN_IF_ERROR(WriteManifest(MakeManifest(false)));
  dirty_ = false;
  return absl::OkStatus();
}

absl::Status NvmeTier::Snapshot(const std::string& dir) {
  ZS_RETURN_IF_ERROR(Flush());
  ZS_RETURN_IF_ERROR(env_->CreateDir(dir));
  const std::string mpath = JoinPath(dir, kManifestName);
  if (env_->FileExists(mpath)) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, " already holds a snapshot (MANIFEST)"));
  }
  absl::ReaderMutexLock l(&mu_);
  for (int k = 0; k < kStateArrays; ++k) {
    const std::string& from = files_[k]->path();
    const std::string to =
        JoinPath(dir, absl::StrCat(ArrayName(ArrayKind(k)), ".", generation_));
    absl::Status s = env_->LinkFile(from, to);
    if (s.ok()) {
      shared_.store(true);
    } else if (absl::IsUnimplemented(s)) {
      ZS_RETURN_IF_ERROR(env_->CopyFile(from, to));
    } else {
      return s;
    }
  }
  ZS_RETURN_IF_ERROR(env_->SyncDir(dir));
  return WriteFileAtomic(env_, mpath, EncodeManifest(MakeManifest(false)));
}

absl::Status NvmeTier::Verify() {
  AlignedBuffer scratch(options_.block_size, &account_);
  absl::ReaderMutexLock l(&mu_);
  for (int k = 0; k < kStateArrays; ++k) {
    for (uint64_t j = 0; j < files_[k]->chunks(); ++j) {
      ZS_RETURN_IF_ERROR(files_[k]->ReadChunk(j, scratch.data()));
    }
  }
  return absl::OkStatus();
}

TierStats NvmeTier::Stats() const {
  TierStats s;
  {
    absl::ReaderMutexLock l(&mu_);
    s.steps = steps_;
  }
  s.cache_hits = cache_->hits();
  s.cache_misses = cache_->misses();
  s.bytes_read = engine_->bytes_read() + s.cache_misses * options_.block_size;
  s.bytes_written = engine_->bytes_written();
  {
    absl::MutexLock l(&stats_mu_);
    s.last_step_seconds = last_step_seconds_;
    s.last_step_io_wait_seconds = last_io_wait_;
    s.last_step_bytes = last_step_bytes_;
    s.last_step_bandwidth_bytes_per_s =
        last_step_seconds_ > 0 ? last_step_bytes_ / last_step_seconds_ : 0;
  }
  s.bytes_allocated = account_.current();
  s.peak_bytes_allocated = account_.peak();
  s.direct_io = direct_;
  return s;
}

}  // namespace storage
}  // namespace zeroshard
