#include "launcher/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

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
  std::vector<std::string> evals;  // rank 0's "eval" records, in order
};

// A long run's records (~300 bytes a step) may pass ReadSmallFile's usual
// bound.
constexpr size_t kMaxMetricsBytes = size_t{1} << 30;

// One attempt's records: from a "start" record to the next.
struct Attempt {
  RankRecords records;
  bool current = false;  // from this run's file (else the earlier ones)
};

void ParseAttempts(absl::string_view text, bool current,
                   std::vector<Attempt>* out) {
  for (absl::string_view view : absl::StrSplit(text, '\n')) {
    const std::string line(view);
    // A line cut short (a worker killed while writing it) is skipped.
    if (line.empty() || line.back() != '}') continue;
    const std::string event = JsonEvent(line);
    if (event == "start" || out->empty()) out->push_back({{}, current});
    RankRecords& r = out->back().records;
    if (event == "start") r.start = line;
    if (event == "end") r.end = line;
    if (event == "step") r.steps.push_back(line);
    if (event == "eval") r.evals.push_back(line);
  }
}

std::string RankPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/metrics-rank", rank, ".jsonl");
}

double Num(const std::string& line, const char* key) {
  return JsonNumber(line, key).value_or(std::nan(""));
}

// A rank's records: this run's (`dir`/metrics-rank<r>.jsonl) after those
// of the attempts before it (KeepEarlierMetrics) that belong to the same
// job: from the last attempt that started at step 1 (a new job) on, of a
// model of this run's size. An attempt that recorded no step (it failed
// before one, or found the job done) adds nothing. DATA_LOSS without any
// step record; the Env's error for an unreadable file.
absl::StatusOr<RankRecords> ReadJob(Env* env, const std::string& dir, int r,
                                    bool* earlier_used) {
  std::vector<Attempt> attempts;
  absl::StatusOr<std::string> earlier =
      ReadSmallFile(env, EarlierMetricsPath(dir, r), kMaxMetricsBytes);
  if (earlier.ok()) ParseAttempts(*earlier, false, &attempts);
  const std::string path = RankPath(dir, r);
  absl::StatusOr<std::string> text = ReadSmallFile(env, path, kMaxMetricsBytes);
  if (!text.ok() && !(absl::IsNotFound(text.status()) && !attempts.empty())) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("cannot read metrics file: ", text.status().message()));
  }
  if (text.ok()) ParseAttempts(*text, true, &attempts);
  // The model of the job: the newest attempt that recorded a start.
  double params = std::nan("");
  for (auto a = attempts.rbegin(); a != attempts.rend(); ++a) {
    if (!a->records.start.empty()) {
      params = Num(a->records.start, "params");
      break;
    }
  }
  RankRecords out;
  *earlier_used = false;
  for (const Attempt& a : attempts) {
    const RankRecords& rr = a.records;
    if (rr.steps.empty() || Num(rr.start, "params") != params) continue;
    if (Num(rr.steps.front(), "step") <= 1) {  // a new job: what came before
      out = RankRecords{};                     // is another's
      *earlier_used = false;
    }
    *earlier_used = *earlier_used || !a.current;
    out.start = rr.start;
    out.steps.insert(out.steps.end(), rr.steps.begin(), rr.steps.end());
    out.evals.insert(out.evals.end(), rr.evals.begin(), rr.evals.end());
  }
  if (!attempts.empty() && !attempts.back().records.end.empty()) {
    out.end = attempts.back().records.end;
  }
  if (out.start.empty() || out.steps.empty()) {
    return absl::DataLossError(path + ": no start or step records");
  }
  return out;
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

std::string Summary(const std::vector<RankRecords>& ranks,
                    const RunContext& context) {
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
  const double last_step = Num(r0.steps.back(), "step");
  // A step redone after a server restart or a re-formed group has a record
  // each time it ran: the run's steps are the distinct ones.
  std::set<double> distinct;
  for (const std::string& s : r0.steps) distinct.insert(Num(s, "step"));
  // A step committed as a worker was killed has no record: the job's
  // steps are its range.
  const size_t steps = std::max<size_t>(
      distinct.size(),
      static_cast<size_t>(*distinct.rbegin() - *distinct.begin() + 1));
  std::string steps_text = absl::StrCat(steps, " steps");
  if (distinct.size() < n) {
    absl::StrAppend(&steps_text, " (", n - distinct.size(),
                    " redone after a restart)");
  }
  if (!context.stopped_by.empty()) {
    steps_text = absl::StrFormat("stopped at step %.0f of %d by %s", last_step,
                                 context.planned_steps, context.stopped_by);
  }
  absl::StrAppendFormat(
      &out, "| run | stage %d%s, %d workers, %.0f parameters, %s |\n", stage,
      offload ? " + offload_param=server" : "", world, psi, steps_text);
  absl::StrAppendFormat(
      &out, "| loss | %.4f → %.4f (mean of the last %d steps %.4f) |\n", first,
      last, k, tail / k);
  if (!r0.evals.empty()) {
    const std::string& a = r0.evals.front();
    const std::string& b = r0.evals.back();
    absl::StrAppendFormat(
        &out,
        "| eval loss (%s, %.0f tokens) | %.4f at step %.0f → %.4f at step %.0f "
        "(%d evals) |\n",
        Num(b, "held_out") == 1 ? "held-out" : "training data",
        Num(b, "tokens"), Num(a, "loss"), Num(a, "step"), Num(b, "loss"),
        Num(b, "step"), r0.evals.size());
  }
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
  // What the model itself holds (metrics of older runs may lack it).
  const double device = Num(r0.steps.back(), "device_bytes");
  const double acts = Num(r0.steps.back(), "activation_bytes");
  if (device > 0) {
    absl::StrAppendFormat(
        &out,
        "| on the device, rank 0 | parameters and gradients %s, activations "
        "%s |\n",
        Bytes(device), Bytes(acts));
  } else if (acts > 0) {
    absl::StrAppendFormat(&out, "| activation memory, rank 0 | %s |\n",
                          Bytes(acts));
  }
  // Stage 3: the paper's 3Ψ gathers every unit again for backward; a unit
  // kept from its forward to its backward (stage3_max_reuse_distance) is
  // gathered once, 2Ψ.
  const std::string kept =
      stage == 3
          ? absl::StrCat("; 2Ψ·4 B with units kept for backward: ",
                         Bytes(engine::CommBytesPerStep(
                             2, psi, world, engine::CommModel::kPaper, 4)))
          : "";
  absl::StrAppendFormat(
      &out, "| communication per step per worker | %s (formula %s: %s%s) |\n",
      Bytes(moved), stage == 3 ? "3Ψ·4 B" : "2Ψ·4 B", Bytes(formula), kept);
  return out;
}

}  // namespace

namespace {

// One chart panel: its box on the page and its data ranges.
struct Panel {
  double left, top, width, height;
  double x0, x1, y0, y1;
  double X(double v) const { return left + (v - x0) / (x1 - x0) * width; }
  double Y(double v) const {
    return top + height - (v - y0) / (y1 - y0) * height;
  }
};

// [lo, hi] of the finite y values of `series`, or nullopt.
bool YRange(const std::vector<const std::vector<LossPoint>*>& series,
            double* lo, double* hi) {
  bool any = false;
  for (const auto* points : series) {
    for (const LossPoint& p : *points) {
      if (!std::isfinite(p.loss)) continue;
      *lo = any ? std::min(*lo, p.loss) : p.loss;
      *hi = any ? std::max(*hi, p.loss) : p.loss;
      any = true;
    }
  }
  return any;
}

// Grid lines, tick labels, the frame and the axis titles of `p`.
void DrawAxes(const Panel& p, bool x_labels, const std::string& y_title,
              std::string* svg) {
  const double xs = TickStep(p.x1 - p.x0, 8), ys = TickStep(p.y1 - p.y0, 5);
  const double bottom = p.top + p.height, right = p.left + p.width;
  for (double v = std::ceil(p.x0 / xs) * xs; v <= p.x1 + 1e-9; v += xs) {
    absl::StrAppendFormat(svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" "
                          "y2=\"%.1f\" stroke=\"#ddd\"/>",
                          p.X(v), p.top, p.X(v), bottom);
    if (x_labels) {
      absl::StrAppendFormat(
          svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>",
          p.X(v), bottom + 16, v);
    }
    svg->append("\n");
  }
  for (double v = std::ceil(p.y0 / ys - 1e-9) * ys; v <= p.y1 + ys * 1e-6;
       v += ys) {
    absl::StrAppendFormat(
        svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
        "stroke=\"#ddd\"/>"
        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        p.left, p.Y(v), right, p.Y(v), p.left - 6, p.Y(v) + 4,
        std::abs(v) < ys * 1e-6 ? 0.0 : v);  // never "-0"
  }
  const double mid = p.top + p.height / 2;
  absl::StrAppendFormat(
      svg,
      "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" "
      "fill=\"none\" stroke=\"black\"/>\n"
      "<text x=\"16\" y=\"%.0f\" text-anchor=\"middle\" "
      "transform=\"rotate(-90 16 %.0f)\">%s</text>\n",
      p.left, p.top, p.width, p.height, mid, mid, y_title);
}

std::string Polyline(const Panel& p, const std::vector<LossPoint>& points,
                     const char* color, const char* cls) {
  std::string pts;
  for (const LossPoint& q : points) {
    if (std::isfinite(q.loss)) {
      absl::StrAppendFormat(&pts, "%.1f,%.1f ", p.X(q.step), p.Y(q.loss));
    }
  }
  return absl::StrFormat(
      "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" "
      "stroke-width=\"1.5\" points=\"%s\"/>\n",
      cls, color, pts);
}

}  // namespace

std::string TrainingCurvesSvg(const std::vector<LossPoint>& loss,
                              const std::vector<LossPoint>& eval,
                              const std::vector<LossPoint>& lr,
                              const std::string& title) {
  const double W = 640, left = 70, right = 20, top = 40;
  const double loss_h = 310, gap = 20, lr_h = lr.empty() ? 0 : 110;
  const double H = top + loss_h + (lr.empty() ? 0 : gap + lr_h) + 50;
  double x0 = 0, x1 = 1;
  if (!loss.empty()) {
    x0 = loss.front().step;
    x1 = std::max(loss.back().step, x0 + 1);
  }
  double y0 = 0, y1 = 1;
  if (YRange({&loss, &eval}, &y0, &y1)) {
    y0 = std::max(0.0, std::floor(y0));
    y1 = std::max(std::ceil(y1), y0 + 1);
  }
  const Panel lp{left, top, W - left - right, loss_h, x0, x1, y0, y1};
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
      "height=\"%.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" "
      "font-size=\"15\">%s</text>\n",
      W, H, W / 2, title);
  DrawAxes(lp, lr.empty(), "loss", &svg);
  svg += Polyline(lp, loss, "#1f77b4", "loss");
  for (const LossPoint& e : eval) {
    if (std::isfinite(e.loss) && e.step >= x0 && e.step <= x1) {
      absl::StrAppendFormat(&svg,
                            "<circle class=\"eval\" cx=\"%.1f\" cy=\"%.1f\" "
                            "r=\"3.5\" fill=\"#ff7f0e\"/>\n",
                            lp.X(e.step), lp.Y(e.loss));
    }
  }
  // Legend, top right of the loss panel.
  const double lx = left + lp.width - 150;
  absl::StrAppendFormat(
      &svg,
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
      "stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"%.0f\" "
      "y=\"%.0f\">training loss</text>\n",
      lx, top + 16, lx + 20, top + 16, lx + 26, top + 20);
  if (!eval.empty()) {
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%.0f\" cy=\"%.0f\" r=\"3.5\" "
                          "fill=\"#ff7f0e\"/><text x=\"%.0f\" "
                          "y=\"%.0f\">eval loss</text>\n",
                          lx + 10, top + 34, lx + 26, top + 38);
  }
  double bottom = top + loss_h;
  if (!lr.empty()) {
    double r0 = 0, r1 = 1;
    if (YRange({&lr}, &r0, &r1)) {
      r0 = 0;
      r1 = r1 > 0 ? r1 * 1.05 : 1;
    }
    const Panel rp{left, bottom + gap, W - left - right, lr_h, x0, x1, r0, r1};
    DrawAxes(rp, true, "lr", &svg);
    svg += Polyline(rp, lr, "#2ca02c", "lr");
    bottom = rp.top + rp.height;
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n"
      "</svg>\n",
      left + (W - left - right) / 2, bottom + 34);
  return svg;
}

std::string LossCurveSvg(const std::vector<LossPoint>& points,
                         const std::string& title) {
  return TrainingCurvesSvg(points, {}, {}, title);
}

// The report's second half: how the run was stopped, what ran it, and
// what it was configured to do.
std::string ContextMarkdown(const RunContext& c, double last_step) {
  std::string out;
  if (!c.version.empty() || !c.command_line.empty()) {
    out += "\n## Run\n\n| | |\n|---|---|\n";
    if (!c.stopped_by.empty()) {
      absl::StrAppendFormat(&out,
                            "| ended | stopped at step %.0f of %d by %s |\n",
                            last_step, c.planned_steps, c.stopped_by);
    }
    if (!c.version.empty())
      absl::StrAppend(&out, "| version | ", c.version, " |\n");
    if (!c.command_line.empty()) {
      absl::StrAppend(&out, "| command | `", c.command_line, "` |\n");
    }
  }
  if (!c.config_table.empty()) {
    absl::StrAppend(&out, "\n## Configuration\n\n", c.config_table);
  }
  return out;
}

absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           Env* env) {
  return WriteRunReport(dir, world, RunContext{}, env);
}

absl::StatusOr<std::string> WriteRunReport(const std::string& dir, int world,
                                           const RunContext& context,
                                           Env* env) {
  std::vector<RankRecords> ranks;
  bool earlier_used = false;
  for (int r = 0; r < world; ++r) {
    bool used = false;
    auto rr = ReadJob(env, dir, r, &used);
    if (!rr.ok()) return rr.status();
    ranks.push_back(*std::move(rr));
    earlier_used = earlier_used || used;
  }
  if (!earlier_used) {  // another job's records: gone
    for (int r = 0; r < world; ++r) {
      (void)env->RemoveFile(EarlierMetricsPath(dir, r));
    }
  }
  const RankRecords& r0 = ranks[0];
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter jsonl,
                      AtomicFileWriter::Create(env, dir + "/metrics.jsonl"));
  std::vector<LossPoint> curve, eval, lr;
  std::map<int64_t, double> eval_at;  // step -> eval loss (the last one)
  for (const std::string& e : r0.evals) {
    eval.push_back({Num(e, "step"), Num(e, "loss")});
    eval_at[static_cast<int64_t>(Num(e, "step"))] = Num(e, "loss");
  }
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
    auto e = eval_at.find(static_cast<int64_t>(Num(s, "step")));
    const std::string eval_field =
        e == eval_at.end()
            ? ""
            : absl::StrCat(",\"eval_loss\":", JsonDouble(e->second, 7));
    ZS_RETURN_IF_ERROR(jsonl.Append(absl::StrFormat(
        "{\"step\":%s,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,"
        "\"loss_scale\":%s,\"tokens_per_s\":%s,"
        "\"bytes_moved\":%s,\"model_state_bytes_per_worker\":[%s],"
        "\"bytes_moved_per_worker\":[%s]%s}\n",
        JsonFixed(Num(s, "step"), 0), JsonDouble(Num(s, "loss"), 7),
        JsonDouble(Num(s, "lr"), 6), JsonDouble(Num(s, "grad_norm"), 6),
        JsonFixed(Num(s, "loss_scale"), 0),
        JsonFixed(Num(s, "tokens_per_s"), 1),
        JsonFixed(Num(s, "bytes_moved"), 0), absl::StrJoin(state, ","),
        absl::StrJoin(moved, ","), eval_field)));
    curve.push_back({Num(s, "step"), Num(s, "loss")});
    lr.push_back({Num(s, "step"), Num(s, "lr")});
  }
  ZS_RETURN_IF_ERROR(jsonl.Commit());
  const double last_step = Num(r0.steps.back(), "step");
  std::string title =
      absl::StrFormat("zeroshard train: loss, %d workers", world);
  if (!context.stopped_by.empty()) {
    absl::StrAppendFormat(&title, " (stopped at step %.0f of %d)", last_step,
                          context.planned_steps);
  }
  ZS_RETURN_IF_ERROR(WriteFileAtomic(
      env, dir + "/loss.svg", TrainingCurvesSvg(curve, eval, lr, title)));
  const std::string summary = Summary(ranks, context);
  std::string head = "# zeroshard train report\n\n";
  if (!context.stopped_by.empty()) {
    absl::StrAppendFormat(&head,
                          "**Stopped at step %.0f of %d** (%s): the metrics, "
                          "the curves and the figures below cover the steps "
                          "run.\n\n",
                          last_step, context.planned_steps, context.stopped_by);
  }
  ZS_RETURN_IF_ERROR(
      WriteFileAtomic(env, dir + "/report.md",
                      absl::StrCat(head, "![loss](loss.svg)\n\n", summary,
                                   ContextMarkdown(context, last_step))));
  return summary;
}

std::string EarlierMetricsPath(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/metrics-rank", rank, ".earlier.jsonl");
}

absl::Status KeepEarlierMetrics(const std::string& dir, int rank, Env* env) {
  const std::string path = RankPath(dir, rank);
  absl::StatusOr<std::string> text = ReadSmallFile(env, path, kMaxMetricsBytes);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (!text.ok()) return text.status();
  if (!text->empty()) {
    OpenOptions append;
    append.create = true;
    ZS_ASSIGN_OR_RETURN(std::unique_ptr<File> f,
                        env->OpenFile(EarlierMetricsPath(dir, rank), append));
    ZS_ASSIGN_OR_RETURN(uint64_t size, f->Size());
    std::string records = *std::move(text);
    // A last line cut short would join the next attempt's first.
    if (records.back() != '\n') records.push_back('\n');
    ZS_RETURN_IF_ERROR(f->Write(size, records.data(), records.size()));
    ZS_RETURN_IF_ERROR(f->Sync());
  }
  return env->RemoveFile(path);
}

}  // namespace zeroshard
