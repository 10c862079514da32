#include "worker/train/run_changes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/crc32c.h"

namespace zeroshard::train {
namespace {

std::string Quoted(const std::string& data) {
  return data.empty() ? "(synthetic tokens)" : data;
}

}  // namespace

std::string DataRecord(const std::vector<std::string>& files) {
  std::string joined = absl::StrJoin(files, ",");
  if (joined.size() <= kMaxDataRecord) return joined;
  return absl::StrFormat("%d files (%s .. %s), crc32c %08x", files.size(),
                         files.front(), files.back(),
                         Crc32c(joined.data(), joined.size()));
}

RunChangeList RunChanges(const v1::TrainerState& then,
                         const v1::TrainerState& now) {
  RunChangeList c;
  std::vector<std::string>& out = c.changes;
  if (then.world_size() == 0) return c;
  auto count = [&](const char* what, uint32_t a, uint32_t b) {
    if (a == b) return;
    out.push_back(absl::StrCat(what, " ", a, " -> ", b));
    c.batches_differ = true;
  };
  count("workers", then.world_size(), now.world_size());
  count("micro batch", then.micro_batch(), now.micro_batch());
  count("sequence length", then.seq_len(), now.seq_len());
  count("gradient accumulation", then.gradient_accumulation_steps(),
        now.gradient_accumulation_steps());
  if (then.lr() != now.lr()) {
    out.push_back(absl::StrFormat("lr %g -> %g", then.lr(), now.lr()));
  }
  if (then.data() != now.data()) {
    out.push_back(
        absl::StrCat("data ", Quoted(then.data()), " -> ", Quoted(now.data())));
    c.batches_differ = true;
  } else if (now.data().empty() && then.seed() != now.seed()) {
    out.push_back(absl::StrCat("seed ", then.seed(), " -> ", now.seed(),
                               " (other synthetic tokens)"));
  }
  // Synthetic tokens are drawn per step: no position to speak of.
  if (then.data().empty() && now.data().empty()) c.batches_differ = false;
  return c;
}

std::string DescribeRunChanges(const RunChangeList& c,
                               const v1::TrainerState& then) {
  if (c.changes.empty()) return "";
  std::string line =
      absl::StrCat("changed since the state of step ", then.step(),
                   " was recorded: ", absl::StrJoin(c.changes, "; "));
  if (c.batches_differ) {
    absl::StrAppendFormat(&line,
                          " (the data continue from the same position: "
                          "epoch %d, shard %d, token offset %d)",
                          then.data_epoch(), then.data_shard(),
                          then.data_offset());
  }
  return line;
}

}  // namespace zeroshard::train
