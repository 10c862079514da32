#include "launcher/save_path.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/env/env.h"
#include "common/env/files.h"
#include "worker/io/same_file.h"

namespace zeroshard {
namespace {

absl::Status Bad(const std::string& save, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("--save ", save, problem));
}

// `path` without trailing slashes or a leading "./" (for comparing the
// spelling of a directory that may not exist yet).
std::string Plain(std::string path) {
  absl::string_view v(path);
  while (v.size() > 1 && absl::ConsumeSuffix(&v, "/")) {
  }
  while (absl::ConsumePrefix(&v, "./")) {
  }
  return std::string(v.empty() ? "." : v);
}

}  // namespace

absl::Status CheckSavePath(const std::string& save,
                           const std::vector<InputFile>& inputs,
                           const std::string& made_dir) {
  if (save.empty()) return absl::OkStatus();
  for (const InputFile& in : inputs) {
    if (io::SameFile(save, in.path)) {
      return Bad(save, absl::StrCat(" is the ", in.flag, " file ", in.path,
                                    ": the model would overwrite it"));
    }
  }
  Env* env = DefaultEnv();
  if (save.back() == '/' || env->ListDir(save).ok()) {
    return Bad(save, " is a directory: name the model file to write");
  }
  const std::string dir = DirOf(save);
  if (!made_dir.empty() && Plain(dir) == Plain(made_dir) &&
      !env->FileExists(dir)) {
    return absl::OkStatus();  // made before the run (and checked then)
  }
  if (absl::Status s = CheckCanCreateIn(env, dir); !s.ok()) {
    return Bad(save, absl::StrCat(
                         ": cannot write in directory ", dir, ": ", s.message(),
                         absl::IsNotFound(s) ? " (create it first)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace zeroshard
