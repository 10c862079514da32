#include "common/security/secret_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace zeroshard::security {

absl::Status CheckSecretFileMode(absl::string_view flag, absl::string_view path,
                                 mode_t mode, uid_t file_uid, uid_t euid) {
  const mode_t perm = mode & 0777;
  const bool others = (perm & 0007) != 0;
  const mode_t group = perm & 0070;
  if (!others && group == 0) return absl::OkStatus();
  if (!others && group == 0040 && file_uid == 0 && euid != 0) {
    return absl::OkStatus();  // a root-owned secret shared with our group
  }
  char octal[8];
  std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(perm));
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": permissions ", octal, " for '", path,
                   "' are too open: ", others ? "other users" : "its group",
                   " may read it; chmod 600 it, or give "
                   "--allow_insecure_key_permissions"));
}

absl::Status CheckSecretFile(absl::string_view flag, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int e = errno;
    const std::string why = std::strerror(e);
    return e == ENOENT ? absl::NotFoundError(absl::StrCat(
                             "--", flag, ": ", path, " does not exist"))
                       : absl::InvalidArgumentError(absl::StrCat(
                             "--", flag, ": cannot stat ", path, ": ", why));
  }
  return CheckSecretFileMode(flag, path, st.st_mode, st.st_uid, geteuid());
}

}  // namespace zeroshard::security
