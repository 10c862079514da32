#include "launcher/log_tail.h"

#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace zeroshard {

std::string TailLines(const std::string& path, int lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  const size_t n = static_cast<size_t>(lines);
  for (size_t i = all.size() > n ? all.size() - n : 0; i < all.size(); ++i) {
    absl::StrAppend(&out, "    ", all[i], "\n");
  }
  return out;
}

std::vector<std::string> LogFollower::ReadNewLines() {
  std::vector<std::string> lines;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return lines;
  in.seekg(offset_);
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  size_t begin = 0;
  for (size_t nl; (nl = data.find('\n', begin)) != std::string::npos;
       begin = nl + 1) {
    lines.push_back(data.substr(begin, nl - begin));
  }
  offset_ += static_cast<int64_t>(begin);
  return lines;
}

}  // namespace zeroshard
