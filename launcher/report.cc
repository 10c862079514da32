#include "launcher/report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/env/files.h"
#include "common/status_macros.h"
#include "worker/engine/zero_theory.h"
#include "worker/train/run_metrics.h"

namespace zeroshard {
namespace {

using train::JsonDouble;
using train::JsonEvent;
using train::JsonFixed;
using train::JsonNumber;

struct RankRecords {
  std::string start, end;
  std::vector<std::string> steps;  // in step order
};

// A long run's records (~300 bytes a step) may pass ReadSmallFile's usual
// bound.
constexpr size_t kMaxMetricsBytes = size_t{1} << 30;

absl::StatusOr<RankRecords> ReadRank(Env* env, const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(env, path, kMaxMetricsBytes);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read metrics file: ", text.status().message()));
  }
  RankRecords r;
  for (absl::string_view view : absl::StrSplit(*text, '\n')) {
    const std::string line(view);
    const std::string event = JsonEvent(line);
    if (event == "start") r.start = line;
    if (event == "end") r.end = line;
    if (event == "step") r.steps.push_back(line);
  }
  if (r.start.empty() || r.steps.empty()) {
    return absl::DataLossError(path + ": no start or step records");
  }
  return r;
}

double Num(const std::string& line, const char* key) {
  return JsonNumber(line, key).value_or(std::nan(""));
}

std::string Bytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%.0f B", b);
}

// A "nice" tick step for a range: 1, 2 or 5 times a power of ten.
double TickStep(double range, int ticks) {
  const double raw = range / std::max(ticks, 1);
  const double p = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw) return m * p;
  }
  return 10 * p;
}

std::string Summary(const std::vector<RankRecords>& ranks) {
  const RankRecords& r0 = ranks[0];
  const int world = static_cast<int>(ranks.size());
  const double psi = Num(r0.start, "params");
  const int stage = static_cast<int>(Num(r0.start, "stage"));
  const bool offload = Num(r0.start, "offload_param") == 1;
  const size_t n = r0.steps.size();
  // Rate over steps 2..S (step 1 includes start-up), or step 1 alone.
  double tokens = 0, seconds = 0, moved = 0;
  for (size_t i = n > 1 ? 1 : 0; i < n; ++i) {
    tokens += Num(r0.steps[i], "tokens");
    seconds += Num(r0.steps[i], "step_seconds");
  }
  for (const RankRecords& r : ranks) {
    for (const std::string& s : r.steps) moved += Num(s, "bytes_moved");
  }
  moved /= static_cast<double>(n) * world;
  std::vector<std::string> state;
  for (const RankRecords& r : ranks) {
    state.push_back(Bytes(Num(r.steps.back(), "model_state_bytes")));
  }
  // fp32 training: 4-byte parameters and gradients, m and v (8 bytes).
  engine::ModelStateInputs in;
  in.num_params = psi;
  in.num_workers = world;
  in.param_bytes = 4;
  in.grad_bytes = 4;
  in.optimizer_bytes = 8;
  const double ddp = engine::WorkerModelStateBytes(0, false, in);
  const double formula =
      engine::CommBytesPerStep(stage, psi, world, engine::CommModel::kPaper, 4);
  const double first = Num(r0.steps.front(), "loss");
  const double last = Num(r0.steps.back(), "loss");
  double tail = 0;
  const size_t k = std::min<size_t>(n, 10);
  for (size_t i = n - k; i < n; ++i) tail += Num(r0.steps[i], "loss");
  std::string out = "| metric | value |\n|---|---|\n";
  absl::StrAppendFormat(
      &out, "| run | stage %d%s, %d workers, %.0f parameters, %d steps |\n",
      stage, offload ? " + offload_param=server" : "", world, psi, n);
  absl::StrAppendFormat(
      &out, "| loss | %.4f → %.4f (mean of the last %d steps %.4f) |\n", first,
      last, k, tail / k);
  if (!r0.end.empty()) {
    absl::StrAppendFormat(
        &out, "| eval loss of the final model | %.4f (%.0f tokens) |\n",
        Num(r0.end, "eval_loss"), Num(r0.end, "eval_tokens"));
  }
  absl::StrAppendFormat(&out, "| tokens/s (all workers) | %.0f |\n",
                        seconds > 0 ? tokens / seconds : 0.0);
  absl::StrAppendFormat(
      &out,
      "| model-state memory per worker | %s (stage-0 DDP: %s, %.1fx more) |\n",
      absl::StrJoin(state, ", "), Bytes(ddp),
      ddp / Num(ranks[0].steps.back(), "model_state_bytes"));
  absl::StrAppendFormat(
      &out, "| communication per step per worker | %s (formula %s: %s) |\n",
      Bytes(moved), stage == 3 ? "3Ψ·4 B" : "2Ψ·4 B", Bytes(formula));
  return out;
}

}  // namespace

std::string LossCurveSvg(const std::vector<LossPoint>& points,
                         const std::string& title) {
  const double W = 640, H = 400, left = 60, right = 20, top = 40, bottom = 50;
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (!points.empty()) {
    x0 = points.front().step;
    x1 = std::max(points.back().step, x0 + 1);
    y0 = y1 = points.front().loss;
    for (const LossPoint& p : points) {
      if (!std::isfinite(p.loss)) continue;
      y0 = std::min(y0, p.loss);
      y1 = std::max(y1, p.loss);
    }
    y0 = std::max(0.0, std::floor(y0));
    y1 = std::max(std::ceil(y1), y0 + 1);
  }
  auto X = [&](double v) {
    return left + (v - x0) / (x1 - x0) * (W - left - right);
  };
  auto Y = [&](double v) {
    return H - bottom - (v - y0) / (y1 - y0) * (H - top - bottom);
  };
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" "
      "font-size=\"15\">%s</text>\n",
      W, H, W / 2, title);
  const double xs = TickStep(x1 - x0, 8), ys = TickStep(y1 - y0, 6);
  for (double v = std::ceil(x0 / xs) * xs; v <= x1 + 1e-9; v += xs) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
        X(v), top, X(v), H - bottom, X(v), H - bottom + 16, v);
  }
  for (double v = std::ceil(y0 / ys) * ys; v <= y1 + 1e-9; v += ys) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        left, Y(v), W - right, Y(v), left - 6, Y(v) + 4, v);
  }
  absl::StrAppendFormat(
      &svg,
      "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
      "fill=\"none\" stroke=\"black\"/>\n"
      "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n"
      "<text x=\"16\" y=\"%.0f\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 16 %.0f)\">loss</text>\n",
      left, top, W - left - right, H - top - bottom, (left + W - right) / 2,
      H - 12, (top + H - bottom) / 2, (top + H - bottom) / 2);
  std::string pts;
  for (const LossPoint& p : points) {
    if (std::isfinite(p.loss)) {
      absl::StrAppendFormat(&pts, "%.1f,%.1f ", X(p.step), Y(p.loss));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<polyline fill=\"none\" stroke=\"#1f77b4\" "
                        "stroke-width=\"1.5\" points=\"%s\"/>\n</svg>\n",
                        pts);
  return svg;
}

absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           Env* env) {
  std::vector<RankRecords> ranks;
  for (int r = 0; r < world; ++r) {
    auto rr = ReadRank(env, absl::StrCat(dir, "/metrics-rank", r, ".jsonl"));
    if (!rr.ok()) return rr.status();
    ranks.push_back(*std::move(rr));
  }
  const RankRecords& r0 = ranks[0];
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter jsonl,
                      AtomicFileWriter::Create(env, dir + "/metrics.jsonl"));
  std::vector<LossPoint> curve;
  for (size_t i = 0; i < r0.steps.size(); ++i) {
    const std::string& s = r0.steps[i];
    std::vector<std::string> state, moved;
    for (const RankRecords& r : ranks) {
      const std::string* line = i < r.steps.size() ? &r.steps[i] : nullptr;
      // A rank with fewer steps, or a value that is not finite: null.
      state.push_back(
          JsonFixed(line ? Num(*line, "model_state_bytes") : std::nan(""), 0));
      moved.push_back(
          JsonFixed(line ? Num(*line, "bytes_moved") : std::nan(""), 0));
    }
    ZS_RETURN_IF_ERROR(jsonl.Append(absl::StrFormat(
        "{\"step\":%s,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,"
        "\"loss_scale\":%s,\"tokens_per_s\":%s,"
        "\"bytes_moved\":%s,\"model_state_bytes_per_worker\":[%s],"
        "\"bytes_moved_per_worker\":[%s]}\n",
        JsonFixed(Num(s, "step"), 0), JsonDouble(Num(s, "loss"), 7),
        JsonDouble(Num(s, "lr"), 6), JsonDouble(Num(s, "grad_norm"), 6),
        JsonFixed(Num(s, "loss_scale"), 0),
        JsonFixed(Num(s, "tokens_per_s"), 1),
        JsonFixed(Num(s, "bytes_moved"), 0), absl::StrJoin(state, ","),
        absl::StrJoin(moved, ","))));
    curve.push_back({Num(s, "step"), Num(s, "loss")});
  }
  ZS_RETURN_IF_ERROR(jsonl.Commit());
  ZS_RETURN_IF_ERROR(WriteFileAtomic(
      env, dir + "/loss.svg",
      LossCurveSvg(
          curve, absl::StrFormat("zeroshard train: loss, %d workers", world))));
  const std::string summary = Summary(ranks);
  ZS_RETURN_IF_ERROR(WriteFileAtomic(
      env, dir + "/report.md",
      absl::StrCat("# zeroshard train report\n\n![loss](loss.svg)\n\n",
                   summary)));
  return summary;
}

}  // namespace zeroshard
