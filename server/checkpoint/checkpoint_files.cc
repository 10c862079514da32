#include "server/checkpoint/checkpoint_files.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace zeroshard {
namespace checkpoint {
namespace {

constexpr char kShardMagic[8] = {'Z', 'S', 'C', 'K', 'P', 'T', '1', '\n'};
constexpr char kManifestMagic[8] = {'Z', 'S', 'M', 'A', 'N', 'I', '1', '\n'};
constexpr uint32_t kMaxHeaderBytes = 16u << 20;
constexpr char kManifestName[] = "MANIFEST";

// magic ‖ uint32 length ‖ message ‖ CRC-32C(message).
std::string Frame(const char (&magic)[8], const std::string& message) {
  std::string out(magic, 8);
  const uint32_t len = static_cast<uint32_t>(message.size());
  out.append(reinterpret_cast<const char*>(&len), 4);
  out += message;
  const uint32_t crc = Crc32c(message.data(), message.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return out;
}

// The framed message at the start of `file`; its size in *framed.
absl::StatusOr<std::string> Unframe(File* file, const char (&magic)[8],
                                    uint64_t* framed) {
  ZS_ASSIGN_OR_RETURN(uint64_t size, file->Size());
  char head[12];
  if (size < 16) {
    return absl::DataLossError(
        absl::StrCat(file->path(), ": truncated (", size, " bytes)"));
  }
  ZS_RETURN_IF_ERROR(file->Read(0, head, 12));
  if (std::memcmp(head, magic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(file->path(), ": bad magic"));
  }
  uint32_t len;
  std::memcpy(&len, head + 8, 4);
  if (len > kMaxHeaderBytes || 16 + uint64_t{len} > size) {
    return absl::DataLossError(absl::StrCat(file->path(), ": header length ",
                                            len, " does not fit the file"));
  }
  std::string message(len + 4, '\0');
  ZS_RETURN_IF_ERROR(file->Read(12, message.data(), message.size()));
  uint32_t crc;
  std::memcpy(&crc, message.data() + len, 4);
  message.resize(len);
  if (Crc32c(message.data(), len) != crc) {
    return absl::DataLossError(
        absl::StrCat(file->path(), ": header checksum mismatch"));
  }
  *framed = 16 + uint64_t{len};
  return message;
}

// A name no other writer of the same directory uses.
std::string TempName(const std::string& name) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(name, ".tmp-", getpid(), "-", counter.fetch_add(1));
}

// Writes dir/name through a temporary file: `fill` writes the contents
// into the open file; then sync, rename, directory sync.
absl::Status WriteAtomically(Env* env, const std::string& dir,
                             const std::string& name,
                             const std::function<absl::Status(File*)>& fill) {
  const std::string tmp = JoinPath(dir, TempName(name));
  {
    OpenOptions o;
    o.create = true;
    o.exclusive = true;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(tmp, o));
    absl::Status s = fill(f.get());
    if (s.ok()) s = f->Sync();
    if (!s.ok()) {
      (void)env->RemoveFile(tmp);
      return s;
    }
  }
  ZS_RETURN_IF_ERROR(env->RenameFile(tmp, JoinPath(dir, name)));
  return env->SyncDir(dir);
}

absl::Status CheckShards(const v1::CheckpointManifest& m) {
  const uint32_t k = m.spec().num_servers();
  if (k == 0 || static_cast<uint32_t>(m.shards_size()) != k) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest of step ", m.step(), " lists ", m.shards_size(),
                     " shard files for ", k, " servers"));
  }
  std::vector<bool> seen(k, false);
  for (const v1::CheckpointShard& s : m.shards()) {
    if (s.shard_index() >= k || seen[s.shard_index()]) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest of step ", m.step(), ": shard index ",
                       s.shard_index(), " missing, repeated or out of range"));
    }
    seen[s.shard_index()] = true;
  }
  return absl::OkStatus();
}

// The framed manifest at `path`, which must record `step`.
absl::StatusOr<v1::CheckpointManifest> ReadManifest(Env* env,
                                                    const std::string& path,
                                                    uint64_t step) {
  OpenOptions o;
  o.read_only = true;
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f, env->OpenFile(path, o));
  uint64_t framed = 0;
  ZS_ASSIGN_OR_RETURN(std::string bytes,
                      Unframe(f.get(), kManifestMagic, &framed));
  v1::CheckpointManifest m;
  if (!m.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": does not parse"));
  }
  if (m.step() != step) {
    return absl::DataLossError(absl::StrCat(path, ": records step ", m.step()));
  }
  return m;
}

// The step of a step directory's name, or nullopt.
std::optional<uint64_t> StepOfDir(const std::string& name) {
  uint64_t step;
  if (name.size() != 15 || name.rfind("step-", 0) != 0 ||
      !absl::SimpleAtoi(name.substr(5), &step)) {
    return std::nullopt;
  }
  return step;
}

}  // namespace

std::string StepDirName(uint64_t step) {
  return absl::StrFormat("step-%010d", step);
}

std::string ShardFileName(uint32_t shard, uint32_t num_shards) {
  return absl::StrFormat("shard-%05d-of-%05d.ckpt", shard, num_shards);
}

std::string SnapshotName(uint32_t shard, uint32_t num_shards) {
  return absl::StrFormat("SNAPSHOT-%05d-of-%05d", shard, num_shards);
}

absl::Status WriteSnapshotManifest(Env* env, const std::string& root,
                                   const v1::CheckpointManifest& manifest) {
  if (manifest.shards_size() != 1 ||
      manifest.shards(0).shard_index() >= manifest.spec().num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a snapshot manifest lists one shard of the plan, not ",
                     manifest.shards_size()));
  }
  const std::string dir = JoinPath(root, StepDirName(manifest.step()));
  const std::string bytes = Frame(kManifestMagic, manifest.SerializeAsString());
  return WriteAtomically(
      env, dir,
      SnapshotName(manifest.shards(0).shard_index(),
                   manifest.spec().num_servers()),
      [&](File* f) { return f->Write(0, bytes.data(), bytes.size()); });
}

absl::StatusOr<std::vector<Snapshot>> FindSnapshots(Env* env,
                                                    const std::string& root,
                                                    uint32_t shard,
                                                    uint32_t num_shards) {
  std::vector<Snapshot> found;
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(root);
  if (absl::IsNotFound(names.status())) return found;
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::optional<uint64_t> step = StepOfDir(name);
    if (!step.has_value()) continue;
    Snapshot snap;
    snap.path = JoinPath(JoinPath(root, name), SnapshotName(shard, num_shards));
    if (!env->FileExists(snap.path)) continue;
    absl::StatusOr<v1::CheckpointManifest> m =
        ReadManifest(env, snap.path, *step);
    if (m.ok() &&
        (m->shards_size() != 1 || m->shards(0).shard_index() != shard ||
         m->spec().num_servers() != num_shards)) {
      m = absl::DataLossError(
          absl::StrCat(snap.path, ": does not list this shard alone"));
    }
    if (m.ok()) {
      snap.manifest = *std::move(m);
    } else {
      snap.error = m.status();
    }
    found.push_back(std::move(snap));
  }
  std::sort(found.begin(), found.end(),
            [](const Snapshot& a, const Snapshot& b) {
              return a.path > b.path;  // step directories sort by step
            });
  return found;
}

absl::StatusOr<v1::CheckpointShard> WriteShardFile(
    Env* env, const std::string& root, const v1::ShardCheckpointHeader& header,
    const ArraySource& source) {
  const uint64_t block = header.block_bytes();
  if (block == 0 || block % 4 != 0) {
    return absl::InvalidArgumentError("block_bytes must be a multiple of 4");
  }
  ZS_RETURN_IF_ERROR(env->CreateDir(root));
  const std::string dir = JoinPath(root, StepDirName(header.step()));
  ZS_RETURN_IF_ERROR(env->CreateDir(dir));
  const std::string name =
      ShardFileName(header.shard_index(), header.spec().num_servers());
  const std::string head = Frame(kShardMagic, header.SerializeAsString());
  uint32_t file_crc = 0;
  uint64_t written = 0;
  ZS_RETURN_IF_ERROR(
      WriteAtomically(env, dir, name, [&](File* f) -> absl::Status {
        // The file's CRC covers the header and the payload but not the
        // block CRCs: a CRC run over data followed by its own CRC ends in
        // a constant, whatever the data.
        auto put = [&](const void* data, size_t n, bool summed) {
          absl::Status s = f->Write(written, data, n);
          if (summed) file_crc = Crc32c(data, n, file_crc);
          written += n;
          return s;
        };
        ZS_RETURN_IF_ERROR(put(head.data(), head.size(), true));
        const uint64_t n = header.length();
        std::vector<float> buf(block / 4);
        uint64_t fill = 0;  // elements in buf
        auto flush = [&]() -> absl::Status {
          const uint32_t crc = Crc32c(buf.data(), fill * 4);
          ZS_RETURN_IF_ERROR(put(buf.data(), fill * 4, true));
          fill = 0;
          return put(&crc, 4, false);
        };
        for (int a = 0; a < kArrays; ++a) {
          for (uint64_t e = 0; e < n;) {
            const uint64_t take = std::min(n - e, buf.size() - fill);
            ZS_RETURN_IF_ERROR(source(a, e, take, buf.data() + fill));
            fill += take;
            e += take;
            if (fill == buf.size()) ZS_RETURN_IF_ERROR(flush());
          }
        }
        if (fill > 0) ZS_RETURN_IF_ERROR(flush());
        return absl::OkStatus();
      }));
  v1::CheckpointShard shard;
  shard.set_shard_index(header.shard_index());
  shard.set_file(name);
  shard.set_bytes(written);
  shard.set_crc32c(file_crc);
  shard.set_offset(header.offset());
  shard.set_length(header.length());
  return shard;
}

absl::Status WriteManifest(Env* env, const std::string& root,
                           const v1::CheckpointManifest& manifest) {
  ZS_RETURN_IF_ERROR(CheckShards(manifest));
  const std::string dir = JoinPath(root, StepDirName(manifest.step()));
  const std::string bytes = Frame(kManifestMagic, manifest.SerializeAsString());
  return WriteAtomically(env, dir, kManifestName, [&](File* f) {
    return f->Write(0, bytes.data(), bytes.size());
  });
}

absl::StatusOr<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(
    Env* env, const std::string& path) {
  OpenOptions o;
  o.read_only = true;
  std::unique_ptr<ShardFileReader> r(new ShardFileReader());
  ZS_ASSIGN_OR_RETURN(r->file_, env->OpenFile(path, o));
  ZS_ASSIGN_OR_RETURN(std::string head,
                      Unframe(r->file_.get(), kShardMagic, &r->payload_start_));
  if (!r->header_.ParseFromString(head) || r->header_.block_bytes() == 0 ||
      r->header_.block_bytes() % 4 != 0 ||
      r->header_.block_bytes() > kMaxHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": the header does not parse"));
  }
  ZS_ASSIGN_OR_RETURN(uint64_t size, r->file_->Size());
  const uint64_t payload = kArrays * r->header_.length() * 4;
  const uint64_t block = r->header_.block_bytes();
  const uint64_t blocks = (payload + block - 1) / block;
  if (size != r->payload_start_ + payload + 4 * blocks) {
    return absl::DataLossError(absl::StrCat(
        path, ": ", size, " bytes, expected ",
        r->payload_start_ + payload + 4 * blocks, " (truncated?)"));
  }
  return r;
}

absl::Status ShardFileReader::Read(int a, uint64_t offset, uint64_t n,
                                   float* out) {
  const uint64_t len = header_.length();
  if (a < 0 || a >= kArrays || offset > len || n > len - offset) {
    return absl::InvalidArgumentError("ShardFileReader::Read out of range");
  }
  const uint64_t block = header_.block_bytes();
  const uint64_t payload = kArrays * len * 4;
  uint64_t pos = (a * len + offset) * 4;
  const uint64_t end = pos + n * 4;
  char* dst = reinterpret_cast<char*>(out);
  block_.resize(block + 4);
  while (pos < end) {
    const uint64_t b = pos / block;
    const uint64_t bytes = std::min(block, payload - b * block);
    ZS_RETURN_IF_ERROR(file_->Read(payload_start_ + b * (block + 4),
                                   block_.data(), bytes + 4));
    uint32_t crc;
    std::memcpy(&crc, block_.data() + bytes, 4);
    if (Crc32c(block_.data(), bytes) != crc) {
      return absl::DataLossError(absl::StrCat(file_->path(), ": block ", b,
                                              " checksum mismatch (CRC-32C)"));
    }
    const uint64_t lo = pos - b * block;
    const uint64_t hi = std::min(bytes, end - b * block);
    std::memcpy(dst, block_.data() + lo, hi - lo);
    dst += hi - lo;
    pos = b * block + hi;
  }
  return absl::OkStatus();
}

absl::StatusOr<Listing> ListCheckpoints(Env* env, const std::string& root) {
  Listing listing;
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(root);
  if (absl::IsNotFound(names.status())) return listing;
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::optional<uint64_t> step = StepOfDir(name);
    if (!step.has_value()) continue;
    const std::string path = JoinPath(JoinPath(root, name), kManifestName);
    if (!env->FileExists(path)) {
      // A directory of shutdown snapshots is not a checkpoint attempt.
      absl::StatusOr<std::vector<std::string>> files =
          env->ListDir(JoinPath(root, name));
      const bool snapshot =
          files.ok() &&
          std::any_of(files->begin(), files->end(), [](const std::string& f) {
            return f.rfind("SNAPSHOT-", 0) == 0;
          });
      if (!snapshot) {
        listing.skipped.push_back(
            absl::StrCat(name, ": incomplete (no ", kManifestName, ")"));
      }
      continue;
    }
    absl::StatusOr<v1::CheckpointManifest> m = ReadManifest(env, path, *step);
    absl::Status ok = m.status();
    if (ok.ok()) ok = CheckShards(*m);
    if (!ok.ok()) {
      listing.skipped.push_back(absl::StrCat(name, ": ", ok.message()));
      continue;
    }
    listing.complete.push_back(*std::move(m));
  }
  std::sort(
      listing.complete.begin(), listing.complete.end(),
      [](const v1::CheckpointManifest& a, const v1::CheckpointManifest& b) {
        return a.step() > b.step();
      });
  return listing;
}

absl::Status LoadRange(Env* env, const std::string& root,
                       const v1::CheckpointManifest& manifest, Range want,
                       const ArraySink& sink) {
  const std::string dir = JoinPath(root, StepDirName(manifest.step()));
  uint64_t covered = 0;
  std::vector<float> buf;
  for (const v1::CheckpointShard& s : manifest.shards()) {
    const Range have{s.offset(), s.offset() + s.length()};
    const Range r = Intersect(have, want);
    if (r.empty()) continue;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<ShardFileReader> reader,
                        ShardFileReader::Open(env, JoinPath(dir, s.file())));
    const v1::ShardCheckpointHeader& h = reader->header();
    if (h.offset() != s.offset() || h.length() != s.length() ||
        h.step() != manifest.step()) {
      return absl::DataLossError(absl::StrCat(
          s.file(), ": its header does not match the manifest of step ",
          manifest.step()));
    }
    buf.resize(std::min<uint64_t>(r.size(), 1 << 18));
    for (int a = 0; a < kArrays; ++a) {
      for (uint64_t e = r.begin; e < r.end;) {
        const uint64_t n = std::min<uint64_t>(r.end - e, buf.size());
        ZS_RETURN_IF_ERROR(reader->Read(a, e - have.begin, n, buf.data()));
        ZS_RETURN_IF_ERROR(sink(a, e - want.begin, n, buf.data()));
        e += n;
      }
    }
    covered += r.size();
  }
  if (covered != want.size()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint of step ", manifest.step(), " covers ",
                     covered, " of the ", want.size(), " elements wanted"));
  }
  return absl::OkStatus();
}

}  // namespace checkpoint
}  // namespace zeroshard
