#include "common/metrics/registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace zeroshard::metrics {
namespace {

void AtomicAdd(std::atomic<double>& v, double delta) {
  double old = v.load(std::memory_order_relaxed);
  while (
      !v.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
  }
}

bool ValidName(const std::string& name, bool label) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || (!label && c == ':');
    if (!alpha && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "metrics: %s\n", message.c_str());
  std::abort();
}

// Escapes a HELP text (backslash, newline) or a label value (also '"').
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// {a="1",b="2"} with `extra` (e.g. le="0.5") appended; "" when empty.
std::string LabelText(const Labels& labels, const std::string& extra = "") {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (const auto& [k, v] : labels) {
    if (out.size() > 1) out += ",";
    absl::StrAppend(&out, k, "=\"", Escape(v, true), "\"");
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ",";
    out += extra;
  }
  return out + "}";
}

}  // namespace

void Counter::Add(double delta) { AtomicAdd(value_, delta); }
void Counter::Set(double value) {
  value_.store(value, std::memory_order_relaxed);
}
void Gauge::Add(double delta) { AtomicAdd(value_, delta); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i) {
    if (!(bounds_[i - 1] < bounds_[i])) Die("histogram bounds not increasing");
  }
}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += value;
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> LatencyBounds() {
  return {1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100};
}

Registry::Child* Registry::GetChild(const std::string& name,
                                    const std::string& help, Type type,
                                    const Labels& labels) {
  if (!ValidName(name, false)) Die("invalid metric name '" + name + "'");
  for (const auto& [k, v] : labels) {
    if (!ValidName(k, true) || k.rfind("__", 0) == 0 || k == "le") {
      Die("invalid label name '" + k + "' of " + name);
    }
  }
  auto [it, inserted] = families_.try_emplace(name);
  Family& f = it->second;
  if (inserted) {
    f.type = type;
    f.help = help;
  } else if (f.type != type) {
    Die("metric '" + name + "' registered with two types");
  }
  for (auto& child : f.children) {
    if (child->labels == labels) return child.get();
  }
  f.children.push_back(std::make_unique<Child>());
  f.children.back()->labels = labels;
  return f.children.back().get();
}

Counter* Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Child* c = GetChild(name, help, Type::kCounter, labels);
  if (c->counter == nullptr) c->counter = std::make_unique<Counter>();
  return c->counter.get();
}

Gauge* Registry::GetGauge(const std::string& name, const std::string& help,
                          const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Child* c = GetChild(name, help, Type::kGauge, labels);
  if (c->gauge == nullptr) c->gauge = std::make_unique<Gauge>();
  return c->gauge.get();
}

Histogram* Registry::GetHistogram(const std::string& name,
                                  const std::string& help,
                                  const std::vector<double>& bounds,
                                  const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Child* c = GetChild(name, help, Type::kHistogram, labels);
  if (c->histogram == nullptr)
    c->histogram = std::make_unique<Histogram>(bounds);
  return c->histogram.get();
}

void Registry::AddCollector(std::function<void()> collector) {
  absl::MutexLock lock(&render_mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::Render() {
  absl::MutexLock render_lock(&render_mu_);
  for (const auto& collect : collectors_) collect();
  absl::MutexLock lock(&mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(f.help, false), "\n",
                    "# TYPE ", name, " ", type, "\n");
    for (const auto& c : f.children) {
      if (f.type != Type::kHistogram) {
        const double v =
            c->counter != nullptr ? c->counter->value() : c->gauge->value();
        absl::StrAppend(&out, name, LabelText(c->labels), " ", FormatValue(v),
                        "\n");
        continue;
      }
      const Histogram::Snapshot s = c->histogram->Take();
      const std::vector<double>& b = c->histogram->bounds();
      for (size_t i = 0; i <= b.size(); ++i) {
        const std::string le =
            i < b.size() ? FormatValue(b[i]) : std::string("+Inf");
        absl::StrAppend(&out, name, "_bucket",
                        LabelText(c->labels, "le=\"" + le + "\""), " ",
                        s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(c->labels), " ",
                      FormatValue(s.sum), "\n", name, "_count",
                      LabelText(c->labels), " ", s.count, "\n");
    }
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  // Shortest form that reads back the same.
  for (int precision = 6; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", precision, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return buf;
}

}  // namespace zeroshard::metrics
