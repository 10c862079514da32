#include "common/fault/fault_spec.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/seeded_random.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::fault {
namespace {

constexpr const char* kCollectives[] = {"AllReduce", "ReduceScatter",
                                        "AllGather", "Broadcast", "Barrier"};

struct ActionEntry {
  const char* name;
  Action action;
};
constexpr ActionEntry kActions[] = {{"drop", Action::kDrop},
                                    {"fail", Action::kFail},
                                    {"lose", Action::kLose},
                                    {"dup", Action::kDup},
                                    {"delay", Action::kDelay}};

// The method names of every service in proto/zeroshard.proto.
const std::vector<std::string>& RpcNames() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    const google::protobuf::FileDescriptor* file =
        v1::GetStatsRequest::descriptor()->file();
    for (int s = 0; s < file->service_count(); ++s) {
      const google::protobuf::ServiceDescriptor* service = file->service(s);
      for (int m = 0; m < service->method_count(); ++m) {
        out->push_back(service->method(m)->name());
      }
    }
    return out;
  }();
  return *names;
}

bool IsRpcName(absl::string_view name) {
  for (const std::string& n : RpcNames()) {
    if (n == name) return true;
  }
  return false;
}

absl::Status Bad(absl::string_view term, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("fault spec term '", term, "': ", problem));
}

absl::StatusOr<absl::StatusCode> ParseCode(absl::string_view term,
                                           absl::string_view text) {
  for (int c = 1; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    std::string name = absl::StatusCodeToString(code);
    if (absl::EqualsIgnoreCase(name, text)) return code;
  }
  return Bad(term, absl::StrCat("'", text,
                                "' is not a status code name (e.g. INTERNAL, "
                                "UNAVAILABLE, DEADLINE_EXCEEDED)"));
}

// The ARG of `action` (the text after ':'; `has_arg` false when absent).
absl::StatusOr<Fault> ParseFault(absl::string_view term, Action action,
                                 bool has_arg, absl::string_view arg) {
  Fault f;
  f.action = action;
  switch (action) {
    case Action::kDelay:
      if (!has_arg) {
        return Bad(term, "delay needs a duration, e.g. delay=0.05:20ms");
      }
      if (!absl::ParseDuration(arg, &f.delay) ||
          f.delay < absl::ZeroDuration() || f.delay > absl::Minutes(10)) {
        return Bad(term, absl::StrCat("'", arg,
                                      "' is not a duration in [0, 10m] "
                                      "(e.g. 20ms, 1.5s, 500us)"));
      }
      return f;
    case Action::kFail:
      f.code = absl::StatusCode::kInternal;
      if (has_arg) {
        auto code = ParseCode(term, arg);
        if (!code.ok()) return code.status();
        f.code = *code;
      }
      return f;
    default:
      if (has_arg) {
        return Bad(term, absl::StrCat(ActionName(action), " takes no ':'"));
      }
      return f;
  }
}

// Whether `side` can carry out `action` at `name` (empty: random faults).
absl::Status CheckPlace(absl::string_view term, Side side, Action action,
                        absl::string_view name) {
  const bool collective = IsCollectiveName(name);
  if (!name.empty() && !collective && !IsRpcName(name)) {
    return Bad(term, absl::StrCat("unknown name '", name,
                                  "' (RPCs: ", absl::StrJoin(RpcNames(), ", "),
                                  "; collectives: ",
                                  absl::StrJoin(kCollectives, ", "), ")"));
  }
  if (side == Side::kServer) {
    if (collective) return Bad(term, "a server runs no collectives");
    if (action == Action::kDrop || action == Action::kFail) {
      return Bad(term, absl::StrCat("a server cannot ", ActionName(action),
                                    " a call before its handler runs; give "
                                    "it to the client (worker) instead"));
    }
  }
  if (collective && action != Action::kFail && action != Action::kDelay) {
    return Bad(term, absl::StrCat("a collective operation can only fail or be "
                                  "delayed, not '",
                                  ActionName(action), "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Action> ParseAction(absl::string_view term,
                                   absl::string_view key) {
  for (const ActionEntry& e : kActions) {
    if (key == e.name) return e.action;
  }
  return Bad(term, absl::StrCat("unknown key '", key,
                                "' (seed, only, drop, fail, lose, dup, delay, "
                                "or one of those with _at)"));
}

}  // namespace

const char* ActionName(Action a) {
  for (const ActionEntry& e : kActions) {
    if (e.action == a) return e.name;
  }
  return "none";
}

bool IsCollectiveName(absl::string_view name) {
  for (const char* c : kCollectives) {
    if (name == c) return true;
  }
  return false;
}

absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view text, Side side) {
  FaultSpec spec;
  double total = 0;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view term = absl::StripAsciiWhitespace(raw);
    if (term.empty()) {
      if (absl::StripAsciiWhitespace(text).empty()) break;
      return absl::InvalidArgumentError(
          absl::StrCat("fault spec '", text, "' has an empty term"));
    }
    const size_t eq = term.find('=');
    if (eq == absl::string_view::npos) {
      return Bad(term, "expected key=value");
    }
    absl::string_view key = term.substr(0, eq);
    absl::string_view value = term.substr(eq + 1);
    if (key == "seed") {
      if (!absl::SimpleAtoi(value, &spec.seed)) {
        return Bad(term, "the seed is not an unsigned integer");
      }
      continue;
    }
    if (key == "only") {
      for (absl::string_view name : absl::StrSplit(value, '|')) {
        if (name.empty()) return Bad(term, "an empty name");
        if (!IsCollectiveName(name) && !IsRpcName(name)) {
          return CheckPlace(term, side, Action::kNone, name);
        }
        spec.only.emplace_back(name);
      }
      continue;
    }
    // The ARG after the first ':' of the value.
    const size_t colon = value.find(':');
    const bool has_arg = colon != absl::string_view::npos;
    const absl::string_view arg = has_arg ? value.substr(colon + 1) : "";
    const absl::string_view head = value.substr(0, colon);
    const bool at = absl::EndsWith(key, "_at");
    if (at) key.remove_suffix(3);
    auto action = ParseAction(term, key);
    if (!action.ok()) return action.status();
    auto fault = ParseFault(term, *action, has_arg, arg);
    if (!fault.ok()) return fault.status();
    if (at) {
      const size_t hash = head.find('#');
      if (hash == absl::string_view::npos) {
        return Bad(term, "expected NAME#N (e.g. CommitStep#3)");
      }
      PointFault p;
      p.fault = *fault;
      p.name = std::string(head.substr(0, hash));
      if (!absl::SimpleAtoi(head.substr(hash + 1), &p.nth) || p.nth == 0) {
        return Bad(term, "N in NAME#N must be an integer >= 1");
      }
      absl::Status place = CheckPlace(term, side, *action, p.name);
      if (!place.ok()) return place;
      spec.points.push_back(std::move(p));
      continue;
    }
    RandomFault r;
    r.fault = *fault;
    r.term = std::string(term);
    if (!absl::SimpleAtod(head, &r.probability) || !(r.probability >= 0) ||
        r.probability > 1) {
      return Bad(term, "the probability is not a number in [0, 1]");
    }
    total += r.probability;
    if (total > 1 + 1e-12) {
      return Bad(term, "the probabilities of the spec sum to more than 1");
    }
    spec.random.push_back(r);
  }
  // Random faults must be possible wherever they apply.
  for (const RandomFault& r : spec.random) {
    absl::Status place = CheckPlace(r.term, side, r.fault.action, "");
    for (const std::string& name : spec.only) {
      if (place.ok()) place = CheckPlace(r.term, side, r.fault.action, name);
    }
    if (!place.ok()) return place;
  }
  return spec;
}

absl::StatusOr<FaultSpec> FaultSpecFromFlagOrEnv(const std::string& flag,
                                                 const char* env_var,
                                                 Side side) {
  if (!flag.empty()) {
    auto spec = ParseFaultSpec(flag, side);
    if (!spec.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fault_spec: ", spec.status().message()));
    }
    return spec;
  }
  const char* env = std::getenv(env_var);
  if (env == nullptr) return FaultSpec();
  auto spec = ParseFaultSpec(env, side);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(env_var, ": ", spec.status().message()));
  }
  return spec;
}

FaultInjector::FaultInjector(FaultSpec spec) : spec_(std::move(spec)) {}

bool FaultInjector::Eligible(absl::string_view name) const {
  if (spec_.only.empty()) return !IsCollectiveName(name);
  for (const std::string& n : spec_.only) {
    if (n == name) return true;
  }
  return false;
}

Decision FaultInjector::Next(absl::string_view name) {
  Decision d;
  const uint64_t index = next_index_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  ++counts_.calls;
  const uint64_t nth = ++per_name_[name];
  for (const PointFault& p : spec_.points) {
    if (p.nth == nth && p.name == name) {
      d.fault = p.fault;
      d.reason =
          absl::StrCat(ActionName(p.fault.action), "_at=", p.name, "#", p.nth);
      break;
    }
  }
  if (d.fault.action == Action::kNone && !spec_.random.empty() &&
      Eligible(name)) {
    // A uniform value in [0, 1) from (seed, call index).
    const double u =
        static_cast<double>(SplitMix64(spec_.seed ^ SplitMix64(index)) >> 11) *
        0x1.0p-53;
    double acc = 0;
    for (const RandomFault& r : spec_.random) {
      acc += r.probability;
      if (u < acc) {
        d.fault = r.fault;
        d.reason = absl::StrCat(ActionName(r.fault.action),
                                " (random, p=", r.probability, ")");
        break;
      }
    }
  }
  // The counter of each action, in the order of enum Action.
  static constexpr uint64_t Counts::*kCounter[] = {
      nullptr,       &Counts::drop, &Counts::fail,
      &Counts::lose, &Counts::dup,  &Counts::delay};
  if (d.fault.action != Action::kNone) {
    ++(counts_.*kCounter[static_cast<int>(d.fault.action)]);
  }
  return d;
}

Decision FaultInjector::NextRpc(const char* method) {
  if (method == nullptr || std::strncmp(method, "/zeroshard.", 11) != 0) {
    return Decision();
  }
  return Next(std::strrchr(method, '/') + 1);
}

FaultInjector::Counts FaultInjector::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::string FaultInjector::Summary() const {
  const Counts c = counts();
  return absl::StrCat("fault injection: ", c.calls, " calls; drop ", c.drop,
                      ", fail ", c.fail, ", lose ", c.lose, ", dup ", c.dup,
                      ", delay ", c.delay);
}

}  // namespace zeroshard::fault
