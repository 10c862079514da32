#include "ctl/state_text.h"

#include "absl/strings/str_cat.h"

namespace zeroshard::ctl {

std::string RecordedRun(const v1::TrainerState& s) {
  if (s.world_size() == 0) return "";
  return absl::StrCat(
      "; recorded by a run of ", s.world_size(),
      s.world_size() == 1 ? " worker" : " workers", " (micro batch ",
      s.micro_batch(), ", sequence length ", s.seq_len(),
      ", gradient accumulation ", s.gradient_accumulation_steps(), ", lr ",
      s.lr(), ", data ", s.data().empty() ? "synthetic" : s.data(), ")");
}

}  // namespace zeroshard::ctl
