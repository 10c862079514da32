// A small command-line flag parser for the project's binaries.
//
// Every binary declares its flags on a FlagSet, then calls ParseOrExit:
//   --help / -h       prints the usage and exits 0;
//   a bad flag        prints "<program>: <problem>" and a hint, exits 2.
// Accepted forms: --name=value, --name value, and for booleans --name,
// --noname (or --no_name), --name=true|false. A '-' in a name given on the
// command line is read as '_' (--model-file = --model_file); declare names
// with '_'. "--" ends flag parsing. Arguments that are not
// flags are returned in order (subcommands, file names).
//
// Not thread-safe; use from main() before starting threads. The FlagSet
// stores pointers to the caller's variables, which must outlive it. A
// variable's initial value is its default and is shown in the usage.
#ifndef ZEROSHARD_COMMON_FLAGS_H_
#define ZEROSHARD_COMMON_FLAGS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace zeroshard {

class FlagSet {
 public:
  // `usage` is printed under the program name, e.g.
  // "zeroshard-server [flags]\n\nServes one shard of ...".
  FlagSet(std::string program, std::string usage);

  void String(const char* name, std::string* value, const char* help);
  void Int64(const char* name, int64_t* value, const char* help);
  void Uint32(const char* name, uint32_t* value, const char* help);
  void Double(const char* name, double* value, const char* help);
  void Bool(const char* name, bool* value, const char* help);
  // A flag of another tool users bring here (torchrun's --nproc_per_node):
  // giving it is the error "unknown flag --nproc_per_node (<hint>)".
  void Foreign(const char* name, const char* hint);

  // Parses argv[first..argc). Returns the positional arguments, or
  // INVALID_ARGUMENT naming the flag and the problem; an unknown flag near
  // a declared one (edit distance 1, or 2 for names of 8+ characters) adds
  // the suggestion: "unknown flag --stpes (did you mean --steps?)". Sets
  // help_requested() on --help / -h (and returns no error).
  absl::StatusOr<std::vector<std::string>> Parse(int argc, char** argv,
                                                 int first = 1);
  bool help_requested() const { return help_requested_; }

  // True if the flag was given on the command line.
  bool WasSet(const char* name) const;

  std::string Usage() const;

  // Makes every later Usage() list --version: called by the binaries that
  // answer it (ExitIfVersionFlag, common/version.h). Thread-safe.
  static void ListVersionFlag();
  const std::string& program() const { return program_; }

  // Parse, handling --help (exit 0) and errors (exit 2).
  std::vector<std::string> ParseOrExit(int argc, char** argv, int first = 1);

 private:
  enum class Kind { kString, kInt64, kUint32, kDouble, kBool };
  struct Flag {
    std::string name;
    Kind kind;
    void* value;
    std::string help;
    std::string default_text;
    bool set = false;
  };
  void Add(const char* name, Kind kind, void* value, const char* help);
  Flag* Find(const std::string& name);
  // The declared flag nearest to `name` if near enough, else "".
  std::string Nearest(const std::string& name) const;
  static absl::Status Assign(Flag& flag, const std::string& text);

  std::string program_;
  std::string usage_;
  std::vector<Flag> flags_;
  std::vector<std::pair<std::string, std::string>> foreign_;  // name, hint
  bool help_requested_ = false;
};

// Prints "<program>: <message>" to stderr and exits with `code`.
[[noreturn]] void ExitWithError(const std::string& program,
                                const std::string& message, int code = 2);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_FLAGS_H_
