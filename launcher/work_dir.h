// The work dir of one `zeroshard train` or `zeroshard run` at a time. Two
// runs in one directory (both with the default --work_dir, say) would
// write the same logs, port files and metrics: a worker could read the
// other run's rank-0 port and join its group. The launcher locks
// <work_dir>/LOCK (Env::LockFile: flock, released when the process ends,
// so a crash leaves no stale lock; the launcher's children do not inherit
// it) before it starts anything and holds it to the end.
//
// Thread-compatible; errors as below.
#ifndef ZEROSHARD_LAUNCHER_WORK_DIR_H_
#define ZEROSHARD_LAUNCHER_WORK_DIR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/env/env.h"

namespace zeroshard {

// Locks the existing directory `dir`. FAILED_PRECONDITION "--work_dir DIR
// is in use by another run (pid N): give another --work_dir, or wait for
// that run to end" while another process holds it; otherwise Env's error,
// prefixed "--work_dir DIR: ".
absl::StatusOr<std::unique_ptr<FileLock>> LockWorkDir(Env* env,
                                                      const std::string& dir);

}  // namespace zeroshard

#endif  // ZEROSHARD_LAUNCHER_WORK_DIR_H_
