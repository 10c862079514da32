#include "worker/config/resolved_table.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace zeroshard::config {

bool IsAutoRow(const ResolvedKey& row) {
  return absl::StartsWith(row.source, "auto");
}

std::string RenderResolvedTable(const std::vector<ResolvedKey>& rows,
                                bool autos_only) {
  std::vector<const ResolvedKey*> shown;
  for (const ResolvedKey& r : rows) {
    if (!autos_only || IsAutoRow(r)) shown.push_back(&r);
  }
  if (shown.empty()) return "";
  size_t key_width = 3, value_width = 5;
  for (const ResolvedKey* r : shown) {
    key_width = std::max(key_width, r->key.size());
    value_width = std::max(value_width, r->value.size());
  }
  const auto line = [&](absl::string_view key, absl::string_view value,
                        absl::string_view source) {
    return absl::StrCat("  ", key, std::string(key_width - key.size() + 2, ' '),
                        value, std::string(value_width - value.size() + 2, ' '),
                        source, "\n");
  };
  std::string out = line("key", "value", "from");
  for (const ResolvedKey* r : shown) {
    absl::StrAppend(&out, line(r->key, r->value, r->source));
  }
  return out;
}

}  // namespace zeroshard::config
