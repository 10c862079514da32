#include "common/flags.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/edit_distance.h"

namespace zeroshard {
namespace {

std::atomic<bool> g_list_version{false};  // ListVersionFlag()

}  // namespace

FlagSet::FlagSet(std::string program, std::string usage)
    : program_(std::move(program)), usage_(std::move(usage)) {}

void FlagSet::Add(const char* name, Kind kind, void* value, const char* help) {
  Flag f{name, kind, value, help, "", false};
  switch (kind) {
    case Kind::kString:
      f.default_text = "\"" + *static_cast<std::string*>(value) + "\"";
      break;
    case Kind::kInt64:
      f.default_text = absl::StrCat(*static_cast<int64_t*>(value));
      break;
    case Kind::kUint32:
      f.default_text = absl::StrCat(*static_cast<uint32_t*>(value));
      break;
    case Kind::kDouble:
      f.default_text = absl::StrCat(*static_cast<double*>(value));
      break;
    case Kind::kBool:
      f.default_text = *static_cast<bool*>(value) ? "true" : "false";
      break;
  }
  flags_.push_back(std::move(f));
}

void FlagSet::String(const char* n, std::string* v, const char* h) {
  Add(n, Kind::kString, v, h);
}
void FlagSet::Int64(const char* n, int64_t* v, const char* h) {
  Add(n, Kind::kInt64, v, h);
}
void FlagSet::Uint32(const char* n, uint32_t* v, const char* h) {
  Add(n, Kind::kUint32, v, h);
}
void FlagSet::Double(const char* n, double* v, const char* h) {
  Add(n, Kind::kDouble, v, h);
}
void FlagSet::Bool(const char* n, bool* v, const char* h) {
  Add(n, Kind::kBool, v, h);
}

FlagSet::Flag* FlagSet::Find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void FlagSet::Foreign(const char* name, const char* hint) {
  foreign_.emplace_back(name, hint);
}

std::string FlagSet::Nearest(const std::string& name) const {
  const size_t limit = name.size() >= 8 ? 2 : name.size() >= 4 ? 1 : 0;
  std::string best;
  size_t best_distance = limit + 1;
  for (const Flag& f : flags_) {
    const size_t d = static_cast<size_t>(EditDistance(name, f.name));
    if (d < best_distance) {
      best_distance = d;
      best = f.name;
    }
  }
  return best;
}

bool FlagSet::WasSet(const char* name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.set;
  }
  return false;
}

absl::Status FlagSet::Assign(Flag& flag, const std::string& text) {
  auto bad = [&](const char* what) {
    return absl::InvalidArgumentError(
        absl::StrCat("flag --", flag.name, ": '", text, "' is not ", what));
  };
  switch (flag.kind) {
    case Kind::kString:
      *static_cast<std::string*>(flag.value) = text;
      break;
    case Kind::kInt64: {
      int64_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      *static_cast<int64_t*>(flag.value) = v;
      break;
    }
    case Kind::kUint32: {
      uint32_t v;
      if (!absl::SimpleAtoi(text, &v)) return bad("a non-negative integer");
      *static_cast<uint32_t*>(flag.value) = v;
      break;
    }
    case Kind::kDouble: {
      double v;
      if (!absl::SimpleAtod(text, &v)) return bad("a number");
      *static_cast<double*>(flag.value) = v;
      break;
    }
    case Kind::kBool: {
      bool v;
      if (!absl::SimpleAtob(text, &v)) return bad("true or false");
      *static_cast<bool*>(flag.value) = v;
      break;
    }
  }
  flag.set = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FlagSet::Parse(int argc, char** argv,
                                                        int first) {
  std::vector<std::string> positional;
  for (int i = first; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.push_back(argv[i]);
      break;
    }
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      help_requested_ = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body, value;
    const size_t eq = body.find('=');
    const bool has_value = eq != std::string::npos;
    if (has_value) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
    }
    const std::string typed = name;
    std::replace(name.begin(), name.end(), '-', '_');  // --model-file
    Flag* flag = Find(name);
    if (flag == nullptr && !has_value && name.rfind("no", 0) == 0) {
      Flag* negated = Find(name.substr(name.rfind("no_", 0) == 0 ? 3 : 2));
      if (negated == nullptr) negated = Find(name.substr(2));
      if (negated != nullptr && negated->kind == Kind::kBool) {
        *static_cast<bool*>(negated->value) = false;
        negated->set = true;
        continue;
      }
    }
    if (flag == nullptr) {
      for (const auto& [foreign, hint] : foreign_) {
        if (foreign == name) {
          return absl::InvalidArgumentError(
              absl::StrCat("unknown flag --", typed, " (", hint, ")"));
        }
      }
      const std::string nearest = Nearest(name);
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", typed,
          nearest.empty() ? ""
                          : absl::StrCat(" (did you mean --", nearest, "?)")));
    }
    if (!has_value) {
      if (flag->kind == Kind::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
    }
    absl::Status s = Assign(*flag, value);
    if (!s.ok()) return s;
  }
  return positional;
}

void FlagSet::ListVersionFlag() { g_list_version.store(true); }

std::string FlagSet::Usage() const {
  std::string out = absl::StrCat("Usage: ", usage_, "\n\nFlags:\n");
  for (const Flag& f : flags_) {
    absl::StrAppend(&out, "  --", f.name, " (default ", f.default_text,
                    ")\n      ", f.help, "\n");
  }
  absl::StrAppend(&out, "  --help\n      Show this help and exit.\n");
  if (g_list_version.load()) {
    absl::StrAppend(&out,
                    "  --version\n      Print the version and the source "
                    "revision and exit.\n");
  }
  return out;
}

std::vector<std::string> FlagSet::ParseOrExit(int argc, char** argv,
                                              int first) {
  auto positional = Parse(argc, argv, first);
  if (help_requested_) {
    std::fputs(Usage().c_str(), stdout);
    std::exit(0);
  }
  if (!positional.ok()) {
    std::fprintf(stderr, "%s: %s\nTry '%s --help'.\n", program_.c_str(),
                 std::string(positional.status().message()).c_str(),
                 program_.c_str());
    std::exit(2);
  }
  return *std::move(positional);
}

void ExitWithError(const std::string& program, const std::string& message,
                   int code) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), message.c_str());
  std::exit(code);
}

}  // namespace zeroshard
