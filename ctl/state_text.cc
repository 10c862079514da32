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

std::string TrainerStateText(const v1::TrainerState& s) {
  return absl::StrCat("step ", s.step(), ", updates ", s.updates(),
                      ", loss_scale ", s.loss_scale(), ", data epoch ",
                      s.data_epoch(), " shard ", s.data_shard(), " offset ",
                      s.data_offset(), ", seed ", s.seed(), RecordedRun(s));
}

}  // namespace zeroshard::ctl
