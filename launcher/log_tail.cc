#include "launcher/log_tail.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/env/files.h"

namespace zeroshard {
namespace {

// Enough of a log's end for the last lines of an error message.
constexpr uint64_t kTailBytes = uint64_t{1} << 20;
// The most a follower reads at once; a line longer than this comes out in
// pieces rather than stalling the follower.
constexpr size_t kFollowChunk = size_t{16} << 20;

}  // namespace

std::string TailLines(const std::string& path, int lines, Env* env) {
  absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(env, path);
  if (!f.ok()) return "";
  const uint64_t start = f->size() > kTailBytes ? f->size() - kTailBytes : 0;
  std::string data(f->size() - start, '\0');
  if (!f->Read(start, data.data(), data.size()).ok()) return "";
  std::vector<absl::string_view> all = absl::StrSplit(data, '\n');
  if (all.back().empty()) all.pop_back();  // after the last newline
  if (start > 0 && !all.empty()) all.erase(all.begin());  // a partial line
  std::string out;
  const size_t n = static_cast<size_t>(lines);
  for (size_t i = all.size() > n ? all.size() - n : 0; i < all.size(); ++i) {
    absl::StrAppend(&out, "    ", all[i], "\n");
  }
  return out;
}

std::vector<std::string> LogFollower::ReadNewLines(bool to_end) {
  std::vector<std::string> lines;
  absl::StatusOr<std::string> data =
      ReadFileFrom(env_, path_, offset_, kFollowChunk);
  if (!data.ok()) return lines;  // not there yet
  size_t begin = 0;
  for (size_t nl; (nl = data->find('\n', begin)) != std::string::npos;
       begin = nl + 1) {
    lines.push_back(data->substr(begin, nl - begin));
  }
  if ((begin == 0 && data->size() == kFollowChunk) ||
      (to_end && begin < data->size() && data->size() < kFollowChunk)) {
    lines.push_back(data->substr(begin));
    begin = data->size();
  }
  offset_ += static_cast<int64_t>(begin);
  return lines;
}

void KeepAttemptLogs(const std::vector<LogFollower>& logs,
                     const std::string& work_dir, int attempt, Env* env) {
  for (size_t r = 0; r < logs.size(); ++r) {
    (void)env->RenameFile(
        logs[r].path(),
        absl::StrCat(work_dir, "/rank-", r, ".attempt-", attempt, ".log"));
  }
}

}  // namespace zeroshard
