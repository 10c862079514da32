#include "common/edit_distance.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"

namespace zeroshard {

int EditDistance(absl::string_view a_in, absl::string_view b_in) {
  const std::string a = absl::AsciiStrToLower(a_in);
  const std::string b = absl::AsciiStrToLower(b_in);
  std::vector<std::vector<int>> d(a.size() + 1,
                                  std::vector<int>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);  // transposition
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace zeroshard
