// Refuses secret files (a TLS private key, a bearer-token file) that other
// users may read, as ssh refuses such private keys.
//
// The rule (CheckSecretFileMode, a pure function of the numbers): no
// permission bits for others, and none for the group, except group-read
// (0440 or 0640) on a file owned by root that this process, not running
// as root, reads through its group: a Kubernetes Secret volume with
// fsGroup mounts its files as root:<fsGroup> 0440 whatever defaultMode
// says (PostgreSQL allows its key file on the same terms).
//
// Thread-safety: free functions, no state.
#ifndef ZEROSHARD_COMMON_SECURITY_SECRET_FILE_H_
#define ZEROSHARD_COMMON_SECURITY_SECRET_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace zeroshard::security {

// OK, or INVALID_ARGUMENT: "--<flag>: permissions 0644 for '<path>' are too
// open (...)". `mode` is st_mode (only the permission bits count).
absl::Status CheckSecretFileMode(absl::string_view flag, absl::string_view path,
                                 mode_t mode, uid_t file_uid, uid_t euid);

// stat(2)s `path` (following links) and applies CheckSecretFileMode with
// this process's effective uid. NOT_FOUND naming --flag when it is
// missing.
absl::Status CheckSecretFile(absl::string_view flag, const std::string& path);

}  // namespace zeroshard::security

#endif  // ZEROSHARD_COMMON_SECURITY_SECRET_FILE_H_
