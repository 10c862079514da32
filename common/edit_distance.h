// How far apart two names are, for "did you mean" suggestions (unknown
// flags, common/flags.h; unknown config keys, worker/config/json_reader.h).
//
// Pure function; thread-safe.
#ifndef ZEROSHARD_COMMON_EDIT_DISTANCE_H_
#define ZEROSHARD_COMMON_EDIT_DISTANCE_H_

#include "absl/strings/string_view.h"

namespace zeroshard {

// Edit distance with unit costs, where a swap of neighbours counts 1
// (optimal string alignment), ignoring ASCII case:
// EditDistance("stpes", "steps") == 1.
int EditDistance(absl::string_view a, absl::string_view b);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_EDIT_DISTANCE_H_
