#include "server/checkpoint/checkpoint_files.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/match.h"
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
  const std::string tmp_name = TempName(name);
  const std::string tmp = JoinPath(dir, tmp_name);
  {
    OpenOptions o;
    o.create = true;
    o.exclusive = true;
    // Inside `dir` without following links: a step directory replaced by
    // a link is refused, not written through.
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                        env->OpenFileIn(dir, tmp_name, o));
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

// The framed manifest root/step-S/`name`, which must record `step`. An
// error opening it comes back as the Env's (NOT_FOUND: no such file;
// FAILED_PRECONDITION: a link or not a regular file); a damaged one is
// DATA_LOSS.
absl::StatusOr<v1::CheckpointManifest> ReadManifest(Env* env,
                                                    const std::string& root,
                                                    uint64_t step,
                                                    const std::string& name) {
  OpenOptions o;
  o.read_only = true;
  const std::string path = JoinPath(JoinPath(root, StepDirName(step)), name);
  ZS_ASSIGN_OR_RETURN(
      std::unique_ptr<File> f,
      env->OpenFileIn(JoinPath(root, StepDirName(step)), name, o));
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

absl::Status Unusable(uint64_t step) {
  return absl::DataLossError(absl::StrCat(
      "checkpoint of step ", step,
      ": a file it needs is missing, is not a regular file inside its step "
      "directory, or is not named as the server names its files"));
}

absl::Status CheckManifest(const v1::CheckpointManifest& m, bool snapshot) {
  if (snapshot) {
    if (m.shards_size() != 1 ||
        m.shards(0).shard_index() >= m.spec().num_servers()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a snapshot manifest lists one shard of the plan, not ",
                       m.shards_size()));
    }
  } else {
    ZS_RETURN_IF_ERROR(CheckShards(m));
  }
  const uint32_t k = m.spec().num_servers();
  for (const v1::CheckpointShard& s : m.shards()) {
    const std::string want = snapshot ? SnapshotFileName(s.shard_index(), k)
                                      : ShardFileName(s.shard_index(), k);
    if (s.file() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CheckpointShard.file of shard ", s.shard_index(), " of step ",
          m.step(), " must be '", want,
          "', the name the server gave that shard's file (a plain name "
          "inside the step directory)"));
    }
  }
  return absl::OkStatus();
}

std::string SnapshotFileName(uint32_t shard, uint32_t num_shards) {
  return absl::StrFormat("snapshot-%05d-of-%05d.ckpt", shard, num_shards);
}

absl::Status WriteSnapshotManifest(Env* env, const std::string& root,
                                   const v1::CheckpointManifest& manifest) {
  ZS_RETURN_IF_ERROR(CheckManifest(manifest, /*snapshot=*/true));
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
    snap.data_path =
        JoinPath(JoinPath(root, name), SnapshotFileName(shard, num_shards));
    absl::StatusOr<v1::CheckpointManifest> m =
        ReadManifest(env, root, *step, SnapshotName(shard, num_shards));
    // None here, or not a regular file in a real directory: not one of
    // ours (and nothing to remove through a link).
    if (!m.ok() && !absl::IsDataLoss(m.status())) continue;
    if (m.ok() &&
        (m->shards_size() != 1 || m->shards(0).shard_index() != shard ||
         m->spec().num_servers() != num_shards ||
         !CheckManifest(*m, /*snapshot=*/true).ok())) {
      m = absl::DataLossError(
          absl::StrCat(snap.path, ": does not list this shard's file alone"));
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
    const ArraySource& source, bool snapshot) {
  const uint64_t block = header.block_bytes();
  if (block == 0 || block % 4 != 0) {
    return absl::InvalidArgumentError("block_bytes must be a multiple of 4");
  }
  ZS_RETURN_IF_ERROR(env->CreateDir(root));
  const std::string dir = JoinPath(root, StepDirName(header.step()));
  ZS_RETURN_IF_ERROR(env->CreateDir(dir));
  const std::string name =
      snapshot
          ? SnapshotFileName(header.shard_index(), header.spec().num_servers())
          : ShardFileName(header.shard_index(), header.spec().num_servers());
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

namespace {

absl::Status Gone(const absl::Status& s) {
  return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : s;
}

// A checkpoint writer's file: a shard file or the MANIFEST, or a temporary
// file of one (WriteAtomically's "<name>.tmp-<pid>-<n>").
bool CheckpointFileName(const std::string& name) {
  return absl::StartsWith(name, "shard-") ||
         absl::StartsWith(name, kManifestName);
}

// Removes the files of `dir` that `remove` selects, then `dir` if empty;
// whether it is gone.
absl::StatusOr<bool> RemoveFilesThenDir(
    Env* env, const std::string& dir,
    const std::function<bool(const std::string&)>& remove) {
  absl::StatusOr<std::vector<std::string>> names = env->ListDir(dir);
  if (absl::IsNotFound(names.status())) return true;
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (IsPlainName(name) && remove(name)) {
      ZS_RETURN_IF_ERROR(Gone(env->RemoveFile(JoinPath(dir, name))));
    }
  }
  absl::Status removed = env->RemoveDir(dir);
  if (absl::IsFailedPrecondition(removed)) return false;  // kept: not empty
  ZS_RETURN_IF_ERROR(Gone(removed));
  return true;
}

}  // namespace

absl::StatusOr<bool> RemoveCheckpoint(Env* env, const std::string& root,
                                      const v1::CheckpointManifest& manifest) {
  const std::string dir = JoinPath(root, StepDirName(manifest.step()));
  ZS_RETURN_IF_ERROR(Gone(env->RemoveFile(JoinPath(dir, kManifestName))));
  std::set<std::string> named;
  for (const v1::CheckpointShard& s : manifest.shards()) {
    if (!IsPlainName(s.file())) continue;  // never outside the step dir
    named.insert(s.file());
  }
  return RemoveFilesThenDir(env, dir, [&](const std::string& name) {
    return named.count(name) > 0 || (CheckpointFileName(name) &&
                                     name.find(".tmp-") != std::string::npos);
  });
}

absl::StatusOr<bool> RemoveAbandoned(Env* env, const std::string& root,
                                     uint64_t step) {
  return RemoveFilesThenDir(env, JoinPath(root, StepDirName(step)),
                            CheckpointFileName);
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

namespace {

// root/step-S/`name`, opened read-only without following links; any
// failure to open it is Unusable(step).
absl::StatusOr<std::unique_ptr<File>> OpenInStep(Env* env,
                                                 const std::string& root,
                                                 uint64_t step,
                                                 const std::string& name) {
  OpenOptions o;
  o.read_only = true;
  absl::StatusOr<std::unique_ptr<File>> f =
      env->OpenFileIn(JoinPath(root, StepDirName(step)), name, o);
  if (!f.ok()) return Unusable(step);
  return f;
}

// The header framed at the start of `file`; its framed size in *start.
absl::StatusOr<v1::ShardCheckpointHeader> HeaderOf(File* file,
                                                   uint64_t* start) {
  ZS_ASSIGN_OR_RETURN(std::string head, Unframe(file, kShardMagic, start));
  v1::ShardCheckpointHeader h;
  if (!h.ParseFromString(head) || h.block_bytes() == 0 ||
      h.block_bytes() % 4 != 0 || h.block_bytes() > kMaxHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(file->path(), ": the header does not parse"));
  }
  return h;
}

// What elements [e0, e1) of a shard file's p ‖ m ‖ v (each `len` long, of
// parameters from `offset` on) are, e.g. "the master weights (p) of
// parameters [1024, 2048)": for an operator's message about a damaged
// block.
std::string BlockContents(uint64_t e0, uint64_t e1, uint64_t len,
                          uint64_t offset) {
  static constexpr const char* kNames[kArrays] = {"the master weights (p)",
                                                  "the first moments (m)",
                                                  "the second moments (v)"};
  std::string out;
  for (int i = 0; i < kArrays; ++i) {
    const uint64_t a = i;
    const uint64_t lo = std::max(e0, a * len), hi = std::min(e1, (a + 1) * len);
    if (lo >= hi) continue;
    absl::StrAppend(&out, out.empty() ? "" : " and ", kNames[i],
                    " of parameters [", offset + lo - a * len, ", ",
                    offset + hi - a * len, ")");
  }
  return out;
}

}  // namespace

absl::StatusOr<v1::ShardCheckpointHeader> ReadShardHeader(
    Env* env, const std::string& root, uint64_t step, const std::string& name) {
  if (!IsPlainName(name)) return Unusable(step);
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                      OpenInStep(env, root, step, name));
  uint64_t start = 0;
  return HeaderOf(f.get(), &start);
}

absl::Status ReadShardFile(Env* env, const std::string& root, uint64_t step,
                           const v1::CheckpointShard& shard, Range want,
                           const ArraySink* sink) {
  if (!IsPlainName(shard.file())) return Unusable(step);
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                      OpenInStep(env, root, step, shard.file()));
  const std::string what = f->path();
  ZS_ASSIGN_OR_RETURN(uint64_t size, f->Size());
  if (size != shard.bytes()) {
    return absl::DataLossError(absl::StrCat(
        what, ": ", size, " bytes, the manifest records ", shard.bytes()));
  }
  uint64_t start = 0;
  ZS_ASSIGN_OR_RETURN(v1::ShardCheckpointHeader h, HeaderOf(f.get(), &start));
  if (h.step() != step || h.shard_index() != shard.shard_index() ||
      h.offset() != shard.offset() || h.length() != shard.length()) {
    return absl::DataLossError(absl::StrCat(
        what, ": its header does not match the manifest of step ", step));
  }
  const uint64_t len = h.length();
  const uint64_t block = h.block_bytes();
  const uint64_t payload = kArrays * len * 4;
  const uint64_t blocks = (payload + block - 1) / block;
  if (size != start + payload + 4 * blocks) {
    return absl::DataLossError(absl::StrCat(what, ": ", size,
                                            " bytes, its header implies ",
                                            start + payload + 4 * blocks));
  }
  // The file's CRC: the framed header, then every block's data.
  std::string frame(start, '\0');
  ZS_RETURN_IF_ERROR(f->Read(0, frame.data(), frame.size()));
  uint32_t crc = Crc32c(frame.data(), frame.size());
  const Range have{shard.offset(), shard.offset() + len};
  const Range r = Intersect(have, want);
  std::vector<float> buf(block / 4 + 1);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t bytes = std::min(block, payload - b * block);
    ZS_RETURN_IF_ERROR(f->Read(start + b * (block + 4), buf.data(), bytes + 4));
    uint32_t stored;
    std::memcpy(&stored, reinterpret_cast<const char*>(buf.data()) + bytes, 4);
    if (Crc32c(buf.data(), bytes) != stored) {
      return absl::DataLossError(absl::StrCat(
          what, ": block ", b, " checksum mismatch (CRC-32C; it holds ",
          BlockContents(b * block / 4, (b * block + bytes) / 4, len,
                        shard.offset()),
          ")"));
    }
    crc = Crc32c(buf.data(), bytes, crc);
    if (sink == nullptr || r.empty()) continue;
    // Elements [e0, e1) of p ‖ m ‖ v are in this block.
    const uint64_t e0 = b * block / 4, e1 = e0 + bytes / 4;
    for (int a = 0; a < kArrays; ++a) {
      const uint64_t lo = std::max(e0, a * len + (r.begin - have.begin));
      const uint64_t hi = std::min(e1, a * len + (r.end - have.begin));
      if (lo >= hi) continue;
      ZS_RETURN_IF_ERROR((*sink)(a, lo - a * len + have.begin - want.begin,
                                 hi - lo, buf.data() + (lo - e0)));
    }
  }
  if (crc != shard.crc32c()) {
    return absl::DataLossError(absl::StrFormat(
        "%s: file CRC-32C %08x, the manifest records %08x (blocks swapped, "
        "duplicated or rewritten)",
        what, crc, shard.crc32c()));
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
    absl::StatusOr<v1::CheckpointManifest> m =
        ReadManifest(env, root, *step, kManifestName);
    if (absl::IsNotFound(m.status())) {
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
        listing.incomplete.push_back(*step);
      }
      continue;
    }
    absl::Status ok = m.status();
    if (!ok.ok() && !absl::IsDataLoss(ok)) ok = Unusable(*step);
    if (ok.ok()) {
      ok = CheckShards(*m);
      if (!ok.ok()) ok = absl::DataLossError(ok.message());
    }
    // The shards are right: a name the server would not give.
    if (ok.ok() && !CheckManifest(*m, /*snapshot=*/false).ok()) {
      ok = Unusable(*step);
    }
    if (!ok.ok()) {
      listing.skipped.push_back(absl::StrCat(name, ": ", ok.message()));
      listing.damaged.emplace_back(*step, ok);
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
                       const ArraySink& sink, bool snapshot) {
  if (!CheckManifest(manifest, snapshot).ok()) return Unusable(manifest.step());
  uint64_t covered = 0;
  for (const v1::CheckpointShard& s : manifest.shards()) {
    const Range r = Intersect(Range{s.offset(), s.offset() + s.length()}, want);
    if (r.empty()) continue;
    ZS_RETURN_IF_ERROR(
        ReadShardFile(env, root, manifest.step(), s, want, &sink));
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
