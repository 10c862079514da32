#include "server/pod_ordinal.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace zeroshard {

absl::StatusOr<uint32_t> PodOrdinal(absl::string_view hostname) {
  absl::string_view name = hostname.substr(0, hostname.find('.'));
  const size_t dash = name.rfind('-');
  const absl::string_view digits =
      dash == absl::string_view::npos ? "" : name.substr(dash + 1);
  uint32_t ordinal = 0;
  const bool ok =
      !digits.empty() && digits.size() <= 10 &&
      digits.find_first_not_of("0123456789") == absl::string_view::npos &&
      (digits.size() == 1 || digits[0] != '0') &&
      absl::SimpleAtoi(digits, &ordinal) && ordinal <= INT_MAX;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("host name '", hostname,
                     "' does not end in -<ordinal> (a StatefulSet pod name)"));
  }
  return ordinal;
}

}  // namespace zeroshard
