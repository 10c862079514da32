#include "launcher/progress.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace zeroshard {

std::string FormatProgress(const ProgressPoint& p, int64_t total_steps) {
  std::string rate = p.tokens_per_s >= 1000
                         ? absl::StrFormat("%.1fk", p.tokens_per_s / 1000)
                         : absl::StrFormat("%.0f", p.tokens_per_s);
  std::string out = absl::StrFormat("step %d/%d  loss %.4f  %s tok/s", p.step,
                                    total_steps, p.loss, rate);
  if (p.eta_seconds >= 0) {
    const int64_t s = static_cast<int64_t>(p.eta_seconds + 0.5);
    absl::StrAppendFormat(&out, "  ETA %d:%02d", s / 60, s % 60);
  }
  if (p.server_step >= 0) {
    absl::StrAppendFormat(&out, "  server step %d", p.server_step);
  }
  return out;
}

Progress::Progress(FILE* out, bool live, int64_t total_steps,
                   int64_t print_every)
    : out_(out),
      live_(live),
      total_(total_steps),
      every_(print_every > 0 ? print_every
                             : std::max<int64_t>(1, total_steps / 20)) {}

void Progress::Clear() {
  if (live_ && !line_.empty()) std::fputs("\r\033[K", out_);
}

void Progress::Update(const ProgressPoint& p) {
  const std::string text = FormatProgress(p, total_);
  if (live_) {
    Clear();
    line_ = text;
    std::fputs(line_.c_str(), out_);
  } else if (Keeps(p.step)) {
    last_printed_ = p.step;
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

bool Progress::Keeps(int64_t step) const {
  if (step == total_) return true;
  return !live_ && step / every_ > last_printed_ / every_;
}

void Progress::Print(const std::string& line) {
  Clear();
  std::fprintf(out_, "%s\n", line.c_str());
  if (live_ && !line_.empty()) std::fputs(line_.c_str(), out_);
  std::fflush(out_);
}

void Progress::Finish() {
  if (live_ && !line_.empty()) std::fputs("\n", out_);
  line_.clear();
  std::fflush(out_);
}

}  // namespace zeroshard
