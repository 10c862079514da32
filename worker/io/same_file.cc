#include "worker/io/same_file.h"

#include <sys/stat.h>

#include <utility>

namespace zeroshard::io {
namespace {

bool Stat(const std::string& path, struct stat* st) {
  return !path.empty() && stat(path.c_str(), st) == 0;
}

bool SameInode(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// "dir/name" -> {"dir", "name"}; "name" -> {".", "name"}; "/name" -> {"/",
// "name"}. Trailing slashes are dropped first.
std::pair<std::string, std::string> Split(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

}  // namespace

bool SameFile(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  if (a == b) return true;
  struct stat sa, sb;
  const bool ea = Stat(a, &sa), eb = Stat(b, &sb);
  if (ea || eb) return ea && eb && SameInode(sa, sb);
  const auto [dir_a, name_a] = Split(a);
  const auto [dir_b, name_b] = Split(b);
  return name_a == name_b && Stat(dir_a, &sa) && Stat(dir_b, &sb) &&
         SameInode(sa, sb);
}

}  // namespace zeroshard::io
