#include "server/storage/grad_writer.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace storage {

FileGradWriter::FileGradWriter(ArrayFile* file, IoEngine* engine,
                               absl::Mutex* edge_mu, MemoryAccount* account,
                               uint64_t first, uint64_t n, int batch_chunks)
    : file_(file),
      engine_(engine),
      edge_mu_(edge_mu),
      account_(account),
      first_(first),
      end_(first + n),
      per_(file->chunk_elems()),
      batch_chunks_(static_cast<int>(std::min<uint64_t>(
          std::max(batch_chunks, 1),
          n == 0 ? 1 : (first + n - 1) / per_ - first / per_ + 1))),
      next_(first) {
  for (Stage& s : stages_) {
    s.buf = AlignedBuffer(batch_chunks_ * file_->header().block_size, account);
    s.chunks.reserve(batch_chunks_);
  }
}

FileGradWriter::~FileGradWriter() {
  // The kernel may still be reading the stage buffers.
  for (Stage& s : stages_) s.batch.Wait().IgnoreError();
}

absl::Status FileGradWriter::Append(const float* data, uint64_t count) {
  ZS_RETURN_IF_ERROR(failed_);
  if (count > end_ - next_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient writer: ", count - (end_ - next_),
                     " elements past the end of ", file_->path(), " range [",
                     first_, ", ", end_, ")"));
  }
  const uint64_t block = file_->header().block_size;
  while (count > 0) {
    const uint64_t j = next_ / per_;
    const uint64_t lo = next_ - j * per_;
    const uint64_t stop = std::min(end_, (j + 1) * per_);  // in chunk j
    const uint64_t take = std::min(count, stop - next_);
    Stage& s = stages_[cur_];
    char* slot = s.buf.data() + s.chunks.size() * block;
    std::memcpy(slot + lo * 4, data, take * 4);
    next_ += take;
    data += take;
    count -= take;
    if (next_ == stop) {
      absl::Status st = ChunkDone(j, slot);
      if (!st.ok()) {
        failed_ = st;
        return st;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FileGradWriter::ChunkDone(uint64_t j, char* slot) {
  const uint64_t base = j * per_;
  const uint64_t lo = std::max(first_, base) - base;
  const uint64_t hi = std::min(end_, base + per_) - base;
  const uint64_t valid = std::min(per_, file_->header().size - base);
  if (lo != 0 || hi < valid) return EditEdge(j, slot, lo, hi);
  // Whole chunk: zero its padding (the last chunk's) and stage it.
  std::memset(slot + hi * 4, 0, file_->chunk_len(j) - hi * 4);
  Stage& s = stages_[cur_];
  s.chunks.push_back(j);
  if (static_cast<int>(s.chunks.size()) < batch_chunks_) {
    return absl::OkStatus();
  }
  Submit(s);
  cur_ ^= 1;
  return Drain(stages_[cur_]);  // free the other buffer for staging
}

absl::Status FileGradWriter::EditEdge(uint64_t j, const char* slot, uint64_t lo,
                                      uint64_t hi) {
  if (scratch_.data() == nullptr) {
    scratch_ = AlignedBuffer(file_->header().block_size, account_);
  }
  // Neighbouring ranges share chunk j: read, edit and write it as one step.
  absl::MutexLock l(edge_mu_);
  ZS_RETURN_IF_ERROR(file_->ReadChunk(j, scratch_.data()));
  std::memcpy(scratch_.data() + lo * 4, slot + lo * 4, (hi - lo) * 4);
  return file_->WriteChunk(j, scratch_.data());
}

void FileGradWriter::Submit(Stage& s) {
  if (s.chunks.empty()) return;
  const uint64_t block = file_->header().block_size;
  std::vector<IoRequest> requests;
  requests.reserve(s.chunks.size());
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    const uint64_t j = s.chunks[i];
    requests.push_back(
        IoRequest{IoOp::kWrite, file_->file(), file_->chunk_offset(j),
                  s.buf.data() + i * block, file_->chunk_len(j)});
  }
  engine_->Submit(requests, &s.batch);
  s.in_flight = true;
}

absl::Status FileGradWriter::Drain(Stage& s) {
  if (!s.in_flight) return absl::OkStatus();
  s.in_flight = false;
  absl::Status st = s.batch.Wait();
  if (st.ok()) {
    // Distinct chunks per writer: their CRC entries are not shared.
    const uint64_t block = file_->header().block_size;
    for (size_t i = 0; i < s.chunks.size(); ++i) {
      file_->Record(s.chunks[i], s.buf.data() + i * block);
    }
  }
  s.chunks.clear();
  if (!st.ok()) failed_ = st;
  return st;
}

absl::Status FileGradWriter::Finish() {
  ZS_RETURN_IF_ERROR(failed_);
  if (next_ != end_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient writer for ", file_->path(), " finished ",
                     end_ - next_, " elements short"));
  }
  Submit(stages_[cur_]);
  absl::Status st = Drain(stages_[cur_]);
  absl::Status other = Drain(stages_[cur_ ^ 1]);
  if (st.ok()) st = other;
  return st;
}

}  // namespace storage
}  // namespace zeroshard
