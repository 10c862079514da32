// NvmeTier's optimizer step: the sub-group pipeline and the commit.
//
// Sub-group i uses buffer i % buffer_count. Iteration i: issue the reads of
// sub-groups up to i + buffer_count - 2 (each first waits for its buffer's
// previous write-back, sub-group i - 2 or older), wait for the reads of i,
// verify their CRCs, run AdamW on i (thread pool), compute the CRCs of the
// results and issue their writes to the new generation. The I/O threads
// move data meanwhile, so reading ahead, computing and writing back overlap.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/storage/adamw_pass.h"
#include "server/storage/nvme_tier.h"

namespace zeroshard {
namespace storage {

NvmeTier::~NvmeTier() = default;

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Chunks [j0, j1) of `f` holding sub-group [first, first + count).
void ChunkRange(const ArrayFile& f, uint64_t first, uint64_t count,
                uint64_t* j0, uint64_t* j1) {
  const uint64_t c = f.header().block_size;
  const uint64_t end_bytes =
      std::min(PaddedBytes(f.header().size, f.elem()),
               AlignUp((first + count) * f.elem(), kIoAlign));
  *j0 = first * f.elem() / c;
  *j1 = (end_bytes + c - 1) / c;
}

// Runs fn(i) for i in [0, n) on the pool (or inline) and returns the first
// error by index.
absl::Status ParallelStatus(ThreadPool* pool, size_t n,
                            const std::function<absl::Status(size_t)>& fn) {
  std::vector<absl::Status> out(n);
  auto run = [&](size_t i) { out[i] = fn(i); };
  if (pool == nullptr) {
    for (size_t i = 0; i < n; ++i) run(i);
  } else {
    pool->ParallelFor(n, run);
  }
  for (absl::Status& s : out) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status NvmeTier::Step(const std::vector<AdamWHyper>& hypers) {
  if (hypers.size() != layout_.num_groups()) {
    return absl::InvalidArgumentError(
        absl::StrCat(hypers.size(), " hyperparameter sets for ",
                     layout_.num_groups(), " parameter groups"));
  }
  return RunPipeline(&hypers);
}

absl::Status NvmeTier::RunPipeline(const std::vector<AdamWHyper>* hypers) {
  const Clock::time_point start = Clock::now();
  const uint64_t moved_before =
      engine_->bytes_read() + engine_->bytes_written();
  const uint64_t n = layout_.size;
  const uint64_t sg = options_.sub_group_size;
  const uint64_t groups = (n + sg - 1) / sg;
  const uint64_t nb = static_cast<uint64_t>(options_.buffer_count);
  const bool disk_grads = grad_file_ != nullptr && hypers != nullptr;
  if (buffers_.empty()) {
    const uint64_t elems = std::max(options_.buffer_size, sg);
    std::vector<std::unique_ptr<SubBuffer>> made;
    for (uint64_t b = 0; b < nb; ++b) {
      auto sb = std::make_unique<SubBuffer>();
      for (int k = 0; k < 5; ++k) {
        if (k == kGrad && grad_file_ == nullptr) continue;
        ZS_ASSIGN_OR_RETURN(
            sb->arrays[k],
            AlignedBuffer::Allocate(elems * ElementBytes(ArrayKind(k)),
                                    &account_, "a step pipeline buffer"));
      }
      made.push_back(std::move(sb));
    }
    buffers_ = std::move(made);  // all or none
  }
  std::array<ArrayFile*, kStateArrays> cur;
  uint64_t steps;
  {
    absl::ReaderMutexLock l(&mu_);
    for (int k = 0; k < kStateArrays; ++k) cur[k] = files_[k].get();
    steps = steps_;
  }
  const uint64_t gen = next_generation_++;
  std::array<std::unique_ptr<ArrayFile>, kStateArrays> next;
  auto remove_new = [&] {
    for (int k = 0; k < kStateArrays; ++k) {
      if (next[k] == nullptr) continue;
      const std::string path = next[k]->path();
      next[k].reset();
      env_->RemoveFile(path).IgnoreError();
    }
  };
  for (int k = 0; k < kStateArrays; ++k) {
    absl::StatusOr<std::unique_ptr<ArrayFile>> f = ArrayFile::Create(
        env_, FileName(ArrayKind(k), gen), HeaderFor(ArrayKind(k), gen));
    if (!f.ok()) {
      remove_new();
      return f.status();
    }
    next[k] = std::move(*f);
  }

  double io_wait = 0;
  auto wait = [&](IoBatch& b) {
    const Clock::time_point t0 = Clock::now();
    absl::Status s = b.Wait();
    io_wait += Seconds(t0, Clock::now());
    return s;
  };
  // The chunks sub-group i reads (p, m, v and disk grads) and where they
  // land in its buffer. Chunks marked zero are not read: they are
  // zero-filled here.
  struct Chunk {
    const ArrayFile* f;
    uint64_t j;
    char* data;
  };
  auto chunks_to_read = [&](uint64_t i) {
    SubBuffer& b = *buffers_[i % nb];
    const uint64_t first = i * sg, count = std::min(sg, n - first);
    std::vector<Chunk> chunks;
    for (int k : {kP, kM, kV, kGrad}) {
      if (k == kGrad && !disk_grads) continue;
      const ArrayFile& f = k == kGrad ? *grad_file_ : *cur[k];
      uint64_t j0, j1;
      ChunkRange(f, first, count, &j0, &j1);
      for (uint64_t j = j0; j < j1; ++j) {
        char* dst = b.arrays[k].data() + (j - j0) * f.header().block_size;
        if (f.zero(j)) {
          std::memset(dst, 0, f.chunk_len(j));
        } else {
          chunks.push_back(Chunk{&f, j, dst});
        }
      }
    }
    return chunks;
  };
  // Starts the reads of sub-group i once its buffer's write-back is done.
  auto issue_reads = [&](uint64_t i) -> absl::Status {
    SubBuffer& b = *buffers_[i % nb];
    ZS_RETURN_IF_ERROR(wait(b.writes));
    std::vector<IoRequest> reqs;
    for (const Chunk& c : chunks_to_read(i)) {
      reqs.push_back(IoRequest{IoOp::kRead, c.f->file(), c.f->chunk_offset(c.j),
                               c.data, c.f->chunk_len(c.j), 0});
    }
    engine_->Submit(reqs, &b.reads);
    return absl::OkStatus();
  };
  // Verifies the chunks read for sub-group i.
  auto verify = [&](uint64_t i) -> absl::Status {
    const std::vector<Chunk> chunks = chunks_to_read(i);
    return ParallelStatus(options_.pool, chunks.size(), [&](size_t x) {
      return chunks[x].f->Verify(chunks[x].j, chunks[x].data);
    });
  };
  // AdamW (or a plain copy) on sub-group i, then its write-back.
  auto compute_and_write = [&](uint64_t i) {
    SubBuffer& b = *buffers_[i % nb];
    const uint64_t first = i * sg, count = std::min(sg, n - first);
    float* p = b.arrays[kP].as<float>();
    uint16_t* serve = b.arrays[kServe].as<uint16_t>();
    // Elements outside every span keep p; their serving copy is recomputed
    // from p, which equals the stored one (tier.h invariant).
    uint64_t e = first;
    for (const GroupSpan& s : layout_.groups) {
      if (hypers == nullptr || s.end <= first) continue;
      if (s.begin >= first + count) break;
      const uint64_t b0 = std::max(s.begin, first);
      if (b0 > e)
        ConvertServing(layout_.serving, p + (e - first), serve + (e - first),
                       b0 - e);
      e = std::min(s.end, first + count);
    }
    if (e < first + count) {
      ConvertServing(layout_.serving, p + (e - first), serve + (e - first),
                     first + count - e);
    }
    if (hypers != nullptr) {
      const float* g = disk_grads ? b.arrays[kGrad].as<float>()
                                  : grad_ram_.as<float>() + first;
      AdamWWindow(layout_, *hypers, first, first + count, p, g,
                  b.arrays[kM].as<float>(), b.arrays[kV].as<float>(), serve,
                  options_.pool);
    }
    uint64_t j0, j1;
    ChunkRange(*next[kServe], first, count, &j0, &j1);
    const uint64_t serve_bytes =
        (j1 - j0 - 1) * options_.block_size + next[kServe]->chunk_len(j1 - 1);
    std::memset(reinterpret_cast<char*>(serve) + count * 2, 0,
                serve_bytes - count * 2);
    struct Item {
      ArrayFile* f;
      uint64_t j;
      char* data;
    };
    std::vector<Item> items;
    for (int k = 0; k < kStateArrays; ++k) {
      ArrayFile& f = *next[k];
      ChunkRange(f, first, count, &j0, &j1);
      for (uint64_t j = j0; j < j1; ++j) {
        items.push_back(
            Item{&f, j, b.arrays[k].data() + (j - j0) * options_.block_size});
      }
    }
    // Record() touches distinct CRC slots of files without zero marks.
    ParallelStatus(options_.pool, items.size(), [&](size_t x) {
      items[x].f->Record(items[x].j, items[x].data);
      return absl::OkStatus();
    }).IgnoreError();
    std::vector<IoRequest> reqs;
    for (const Item& it : items) {
      reqs.push_back(IoRequest{IoOp::kWrite, it.f->file(),
                               it.f->chunk_offset(it.j), it.data,
                               it.f->chunk_len(it.j), 0});
    }
    engine_->Submit(reqs, &b.writes);
  };

  absl::Status status;
  uint64_t next_read = 0;
  for (uint64_t i = 0; i < groups && status.ok(); ++i) {
    for (; status.ok() && next_read < groups && next_read <= i + nb - 2;
         ++next_read) {
      status = issue_reads(next_read);
    }
    if (!status.ok()) break;
    status = wait(buffers_[i % nb]->reads);
    if (status.ok()) status = verify(i);
    if (status.ok()) compute_and_write(i);
  }
  // Drain: nothing may be in flight when buffers are reused or files close.
  for (auto& b : buffers_) {
    absl::Status r = wait(b->reads);
    absl::Status w = wait(b->writes);
    if (status.ok()) status = r.ok() ? w : r;
  }
  for (int k = 0; k < kStateArrays && status.ok(); ++k) {
    const Clock::time_point t0 = Clock::now();
    status = next[k]->file()->Sync();
    io_wait += Seconds(t0, Clock::now());
  }
  if (!status.ok()) {
    remove_new();
    return status;
  }
  Manifest m;
  m.layout = layout_;
  m.sub_group_size = sg;
  m.block_size = options_.block_size;
  m.generation = gen;
  m.steps = steps + (hypers != nullptr ? 1 : 0);
  for (int k = 0; k < kStateArrays; ++k) m.crcs[k] = next[k]->crcs();
  // The commit point. On failure the new files stay: the rename may have
  // happened; Open and the next commit collect whichever set is garbage.
  ZS_RETURN_IF_ERROR(WriteManifest(m));
  {
    absl::MutexLock l(&mu_);
    for (int k = 0; k < kStateArrays; ++k) files_[k] = std::move(next[k]);
    generation_ = gen;
    steps_ = m.steps;
    dirty_ = false;
    shared_.store(false);
    cache_->Clear();
  }
  CollectGarbage();
  const Clock::time_point end = Clock::now();
  absl::MutexLock l(&stats_mu_);
  last_step_seconds_ = Seconds(start, end);
  last_io_wait_ = io_wait;
  last_step_bytes_ =
      engine_->bytes_read() + engine_->bytes_written() - moved_before;
  return absl::OkStatus();
}

}  // namespace storage
}  // namespace zeroshard
