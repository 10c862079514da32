#include "worker/io/data_loader.h"

#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/env/files.h"
#include "common/status_macros.h"

namespace zeroshard::io {
namespace {

absl::Status CheckOptions(const DataLoaderOptions& o) {
  const struct {
    const char* name;
    int value;
  } positive[] = {{"batch_size", o.batch_size},
                  {"seq_len", o.seq_len},
                  {"world_size", o.world_size},
                  {"vocab_size", o.vocab_size}};
  for (const auto& f : positive) {
    if (f.value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data loader: ", f.name, " must be positive, got ", f.value));
    }
  }
  if (o.rank < 0 || o.rank >= o.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: rank ", o.rank, " is not in [0, ", o.world_size, ")"));
  }
  if (o.files.empty()) {
    return absl::InvalidArgumentError("data loader: no token files given");
  }
  // A step must fit one token file, which holds at most INT32_MAX tokens.
  const __int128 step =
      static_cast<__int128>(o.batch_size) * o.seq_len * o.world_size;
  if (step + 1 > kMaxTokensPerFile) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: world_size * batch_size * seq_len = ", o.world_size,
        " * ", o.batch_size, " * ", o.seq_len,
        " is more than a token file can hold"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string LoaderPosition::ToString() const {
  return absl::StrCat("epoch=", epoch, " shard=", shard, " offset=", offset);
}

absl::StatusOr<LoaderPosition> LoaderPosition::Parse(absl::string_view text) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader position '", text, "': ", why,
                     " (expected 'epoch=E shard=S offset=O')"));
  };
  std::vector<absl::string_view> parts =
      absl::StrSplit(text, ' ', absl::SkipEmpty());
  if (parts.size() != 3) return bad("need exactly three fields");
  const char* keys[] = {"epoch", "shard", "offset"};
  int64_t values[3];
  for (int i = 0; i < 3; ++i) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(parts[i], absl::MaxSplits('=', 1));
    if (kv.first != keys[i]) return bad(absl::StrCat("field ", i + 1));
    if (!absl::SimpleAtoi(kv.second, &values[i]) || values[i] < 0) {
      return bad(absl::StrCat(keys[i], " is not a non-negative integer"));
    }
  }
  return LoaderPosition{values[0], values[1], values[2]};
}

absl::StatusOr<std::vector<std::string>> ExpandFilePatterns(
    const std::vector<std::string>& patterns, Env* env) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    if (p.find_first_of("*?[") == std::string::npos) {
      out.push_back(p);
      continue;
    }
    const std::vector<std::string> matches = Glob(env, p);
    if (matches.empty()) {
      return absl::NotFoundError(absl::StrCat("no file matches '", p, "'"));
    }
    out.insert(out.end(), matches.begin(), matches.end());
  }
  return out;
}

absl::StatusOr<DataLoader> DataLoader::Open(const DataLoaderOptions& options,
                                            Env* env) {
  ZS_RETURN_IF_ERROR(CheckOptions(options));
  DataLoader loader;
  loader.options_ = options;
  ZS_ASSIGN_OR_RETURN(loader.paths_, ExpandFilePatterns(options.files, env));
  loader.batch_tokens_ =
      static_cast<int64_t>(options.batch_size) * options.seq_len;
  loader.step_tokens_ = loader.batch_tokens_ * options.world_size;
  for (const std::string& path : loader.paths_) {
    ZS_ASSIGN_OR_RETURN(TokenFile file, TokenFile::Open(path, env));
    if (file.num_tokens() < loader.step_tokens_ + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", file.num_tokens(),
          " tokens, fewer than the world_size*batch_size*seq_len + 1 = ",
          loader.step_tokens_ + 1, " one step needs (W=", options.world_size,
          " B=", options.batch_size, " T=", options.seq_len, ")"));
    }
    ZS_RETURN_IF_ERROR(file.CheckIds(options.vocab_size));
    loader.steps_per_epoch_ += (file.num_tokens() - 1) / loader.step_tokens_;
    loader.shards_.push_back(std::move(file));
  }
  loader.buffer_.resize(loader.batch_tokens_ + 1);
  return loader;
}

absl::Status CheckTrainingData(const DataLoaderOptions& options, Env* env) {
  return DataLoader::Open(options, env).status();
}

bool DataLoader::StepFits(int64_t shard, int64_t offset) const {
  return offset <= shards_[shard].num_tokens() - step_tokens_ - 1;
}

absl::Status DataLoader::Seek(const LoaderPosition& p) {
  const int64_t num_shards = static_cast<int64_t>(shards_.size());
  if (p.epoch < 0 || p.shard < 0 || p.shard >= num_shards || p.offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: position ", p.ToString(), " is invalid (",
                     num_shards, " shards)"));
  }
  if (!StepFits(p.shard, p.offset)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data loader: position ", p.ToString(), " leaves less than a step (",
        step_tokens_ + 1, " tokens) in ", paths_[p.shard], " (",
        shards_[p.shard].num_tokens(), " tokens)"));
  }
  position_ = p;
  return absl::OkStatus();
}

absl::Status DataLoader::Next(int32_t* inputs, int32_t* targets) {
  const TokenFile& shard = shards_[position_.shard];
  const int64_t first = position_.offset + options_.rank * batch_tokens_;
  ZS_RETURN_IF_ERROR(shard.Read(first, buffer_.size(), buffer_.data()));
  // The ids were checked at open; checking again costs little and catches
  // a file changed since.
  ZS_RETURN_IF_ERROR(CheckTokenIds(shard.path(), buffer_.data(), buffer_.size(),
                                   options_.vocab_size, first));
  for (int64_t i = 0; i < batch_tokens_; ++i) {
    inputs[i] = buffer_[i];
    targets[i] = buffer_[i + 1];
  }
  position_.offset += step_tokens_;
  if (!StepFits(position_.shard, position_.offset)) {
    position_.offset = 0;
    if (++position_.shard == static_cast<int64_t>(shards_.size())) {
      position_.shard = 0;
      ++position_.epoch;
    }
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::io
