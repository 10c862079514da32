// `--save`, checked before a job starts rather than when rank 0 writes the
// final model at its end (zeroshard train, zeroshard config check).
//
//   ZS_RETURN_IF_ERROR(CheckSavePath(o.train.save, {{"--data", f}, ...}));
//
// OK when `save` is empty, or names no directory, lies in an existing
// directory in which a file can be created (checked by creating and removing
// a probe file there), and is none of `inputs` (io/same_file.h: any
// spelling, a hard link or a symlink). Otherwise INVALID_ARGUMENT, one line
// naming --save and the problem. Creates nothing that outlives the call.
#ifndef ZEROSHARD_LAUNCHER_SAVE_PATH_H_
#define ZEROSHARD_LAUNCHER_SAVE_PATH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zeroshard {

struct InputFile {
  std::string flag;  // "--data", "--val_data"
  std::string path;
};

// `made_dir`: a directory the caller creates before the run (zeroshard
// train's --work_dir); a --save directly in it passes while it does not
// exist yet.
absl::Status CheckSavePath(const std::string& save,
                           const std::vector<InputFile>& inputs,
                           const std::string& made_dir = "");

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_SAVE_PATH_H_
