#include "common/bench/bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/env/env.h"

namespace zeroshard {
namespace bench {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t k = values.size() / 2;
  return values.size() % 2 == 1 ? values[k] : (values[k - 1] + values[k]) / 2;
}

Summary Summarize(const std::vector<double>& values) {
  Summary s;
  if (values.empty()) return s;
  s.count = static_cast<int>(values.size());
  s.median = Median(values);
  s.min = *std::min_element(values.begin(), values.end());
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

double Ratio(double a, double b) { return b != 0 ? a / b : 0; }

Interval BootstrapMedians(
    const std::vector<std::vector<double>>& samples,
    const std::function<double(const std::vector<double>& medians)>& stat,
    double confidence, int resamples) {
  if (!(confidence > 0 && confidence < 1) || resamples < 1) {
    std::fprintf(stderr,
                 "bench::BootstrapMedians: confidence %g not in (0, 1) or "
                 "resamples %d < 1\n",
                 confidence, resamples);
    std::abort();
  }
  const double nan = std::nan("");
  std::vector<double> medians;
  for (const std::vector<double>& s : samples) {
    if (s.empty()) return Interval{nan, nan, nan};
    medians.push_back(Median(s));
  }
  Interval out;
  out.value = stat(medians);
  if (std::isnan(out.value)) return Interval{nan, nan, nan};
  std::mt19937_64 rng(0x5eed);  // fixed: the same samples, the same interval
  std::vector<double> values, draw;
  values.reserve(resamples);
  for (int k = 0; k < resamples; ++k) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const std::vector<double>& s = samples[i];
      std::uniform_int_distribution<size_t> pick(0, s.size() - 1);
      draw.clear();
      for (size_t j = 0; j < s.size(); ++j) draw.push_back(s[pick(rng)]);
      medians[i] = Median(draw);
    }
    values.push_back(stat(medians));
  }
  if (std::any_of(values.begin(), values.end(),
                  [](double v) { return std::isnan(v); })) {
    return Interval{nan, nan, nan};
  }
  std::sort(values.begin(), values.end());
  // The central `confidence` of the sorted values (nearest rank).
  const double tail = (1 - confidence) / 2;
  const auto at = [&](double q) {
    const double pos = q * static_cast<double>(resamples - 1);
    return values[static_cast<size_t>(std::lround(pos))];
  };
  out.low = at(tail);
  out.high = at(1 - tail);
  return out;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::vector<int> AlternationOrder(int variants, int rounds) {
  std::vector<int> order;
  for (int r = 0; r < rounds; ++r) {
    for (int v = 0; v < variants; ++v) order.push_back(v);
  }
  return order;
}

Results::Results(std::vector<VariantResult> variants)
    : variants_(std::move(variants)) {}

const VariantResult& Results::Get(absl::string_view name) const {
  for (const VariantResult& v : variants_) {
    if (v.name == name) return v;
  }
  std::fprintf(stderr, "bench::Results: no variant '%s'\n",
               std::string(name).c_str());
  std::abort();
}

const VariantResult* Results::reference() const {
  for (const VariantResult& v : variants_) {
    if (v.reference) return &v;
  }
  return nullptr;
}

double Results::TimeVsReference(absl::string_view name) const {
  const VariantResult* ref = reference();
  return ref == nullptr ? 0 : Ratio(Median(name), ref->summary.median);
}

double Results::SpeedVsReference(absl::string_view name) const {
  const VariantResult* ref = reference();
  return ref == nullptr ? 0 : Ratio(ref->summary.median, Median(name));
}

std::string Results::Table(absl::string_view rate_unit) const {
  const VariantResult* ref = reference();
  // The name column: 24 wide, or the longest name (" (ref)" included).
  int width = 24;
  for (const VariantResult& v : variants_) {
    width = std::max<int>(width, v.name.size() + (v.reference ? 6 : 0));
  }
  std::string out =
      absl::StrFormat("%-*s %4s %11s %11s %11s %7s", width, "variant", "runs",
                      "median ms", "min ms", "max ms", "spread");
  if (!rate_unit.empty()) absl::StrAppendFormat(&out, " %11s", rate_unit);
  if (ref != nullptr) absl::StrAppend(&out, "  time vs ", ref->name);
  absl::StrAppend(&out, "\n");
  for (const VariantResult& v : variants_) {
    const Summary& s = v.summary;
    absl::StrAppendFormat(&out, "%-*s %4d %11.3f %11.3f %11.3f %6.1f%%", width,
                          v.reference ? v.name + " (ref)" : v.name, s.count,
                          1e3 * s.median, 1e3 * s.min, 1e3 * s.max,
                          100 * s.spread());
    if (!rate_unit.empty()) {
      absl::StrAppend(&out, " ",
                      v.work > 0 ? absl::StrFormat("%11.3f", v.rate())
                                 : absl::StrFormat("%11s", "-"));
    }
    if (ref != nullptr) {
      absl::StrAppendFormat(&out, "  %.3f",
                            Ratio(s.median, ref->summary.median));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<Results> RunAlternating(const std::vector<Variant>& variants,
                                       const Schedule& schedule) {
  if (variants.empty() || schedule.rounds < 1 || schedule.warmup_rounds < 0) {
    return absl::InvalidArgumentError(
        "RunAlternating: needs variants, rounds >= 1 and warmup_rounds >= 0");
  }
  std::set<std::string> names;
  int references = 0;
  for (const Variant& v : variants) {
    references += v.reference ? 1 : 0;
    if (!names.insert(v.name).second || !v.run) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RunAlternating: variant '", v.name, "' repeated or without run"));
    }
  }
  if (references > 1) {
    return absl::InvalidArgumentError(
        "RunAlternating: more than one reference variant");
  }
  const int n = static_cast<int>(variants.size());
  std::vector<VariantResult> results(variants.size());
  for (int i = 0; i < n; ++i) {
    results[i].name = variants[i].name;
    results[i].reference = variants[i].reference;
    results[i].work = variants[i].work;
  }
  const std::vector<int> order =
      AlternationOrder(n, schedule.warmup_rounds + schedule.rounds);
  for (size_t k = 0; k < order.size(); ++k) {
    const int i = order[k];
    const int round = static_cast<int>(k) / n;
    RunInfo info;
    info.warmup = round < schedule.warmup_rounds;
    info.round = info.warmup ? round : round - schedule.warmup_rounds;
    info.last = round == schedule.warmup_rounds + schedule.rounds - 1;
    absl::StatusOr<double> seconds = variants[i].run(info);
    if (!seconds.ok()) {
      return absl::Status(
          seconds.status().code(),
          absl::StrCat(variants[i].name, ": ", seconds.status().message()));
    }
    if (!info.warmup) results[i].seconds.push_back(*seconds);
  }
  for (VariantResult& r : results) r.summary = Summarize(r.seconds);
  return Results(std::move(results));
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return "0";
  const int exponent =
      static_cast<int>(std::floor(std::log10(std::fabs(value))));
  const int decimals = std::clamp(3 - exponent, 0, 9);
  return absl::StrFormat("%.*f", decimals, value);
}

void ResultLine::AddFormatted(absl::string_view key, const std::string& value) {
  std::string k(key);
  for (char& c : k) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_';
    if (!word) c = '_';
  }
  absl::StrAppend(&text_, " ", k, "=", value);
}

ResultLine& ResultLine::Add(absl::string_view key, double value) {
  AddFormatted(key, FormatValue(value));
  return *this;
}

ResultLine& ResultLine::AddInt(absl::string_view key, int64_t value) {
  AddFormatted(key, absl::StrCat(value));
  return *this;
}

ResultLine& ResultLine::Append(const ResultLine& more) {
  absl::StrAppend(&text_, more.text_);
  return *this;
}

std::string ResultLine::ToString() const { return "RESULT" + text_; }

void ResultLine::Print() const {
  std::fflush(stderr);
  std::fflush(stdout);
  std::printf("%s\n", ToString().c_str());
  std::fflush(stdout);
}

CpuTimes ProcessCpu(pid_t pid) {
  const std::string line =
      ReadSmallFile(DefaultEnv(), absl::StrCat("/proc/", pid, "/stat"))
          .value_or("");
  if (line.empty()) return CpuTimes{};
  // Fields after the parenthesised command name (which may hold spaces):
  // state(3) ... minflt(10) ... utime(14) stime(15).
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return CpuTimes{};
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0, minflt = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 10) minflt = std::strtod(field.c_str(), nullptr);
    if (i == 14) utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) stime = std::strtod(field.c_str(), nullptr);
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return CpuTimes{utime / tick, stime / tick, minflt};
}

CpuTimes ProcessesCpu(const std::vector<pid_t>& pids) {
  CpuTimes total;
  for (pid_t p : pids) total += ProcessCpu(p);
  return total;
}

std::string MakeWorkDir(const std::string& name) {
  if (const char* tmp = std::getenv("TEST_TMPDIR")) {
    const std::string dir = absl::StrCat(tmp, "/", name);
    mkdir(dir.c_str(), 0755);
    return dir;
  }
  std::string templ = absl::StrCat("/tmp/", name, ".XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return "/tmp";
  return templ;
}

float PatternValue(uint64_t i) {
  const uint64_t h = (i * 0x9E3779B97F4A7C15ull) >> 40;  // 24 bits
  return static_cast<float>(static_cast<double>(h) / (1 << 23) - 1.0);
}

void FillPattern(float* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) out[i] = PatternValue(i);
}

}  // namespace bench
}  // namespace zeroshard
