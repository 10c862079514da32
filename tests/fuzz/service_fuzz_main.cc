// A fuzzing engine for gcc builds (no libFuzzer): runs the service fuzzer's
// seeds, then `--runs` inputs made from them by seeded random mutations
// (bit flips, random bytes, truncation, insertion, deletion, splicing of
// two seeds). Deterministic for a given --seed. Files named on the command
// line are run instead (to replay an input libFuzzer or this engine found).
//
//   service_fuzz_test [--runs=N] [--seed=S] [--last_input=PATH] [files...]
//
// An invariant violation aborts (service_fuzzer.cc); before each mutated
// input its bytes are written to --last_input (default under Bazel:
// $TEST_UNDECLARED_OUTPUTS_DIR/last_input; otherwise none) so that the
// failing input can be replayed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/service_fuzzer.h"

namespace {

std::string Mutate(const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : rng() % n; };
  std::string s = seeds[pick(seeds.size())];
  const int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits; ++e) {
    const size_t at = pick(s.size() + 1);
    switch (pick(6)) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << pick(8));
        break;
      case 1:  // set a byte (often to an edge value)
        if (!s.empty()) {
          const char edge[] = {0, 1, 0x7f, static_cast<char>(0x80),
                               static_cast<char>(0xff)};
          s[pick(s.size())] =
              pick(2) != 0 ? edge[pick(5)] : static_cast<char>(rng());
        }
        break;
      case 2:  // truncate
        s.resize(at);
        break;
      case 3: {  // insert random bytes
        std::string junk(1 + pick(16), '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        s.insert(at, junk);
        break;
      }
      case 4:  // delete a range
        s.erase(at, 1 + pick(32));
        break;
      default: {  // splice: the tail of another seed
        const std::string& other = seeds[pick(seeds.size())];
        s = s.substr(0, at) + other.substr(pick(other.size() + 1));
        break;
      }
    }
  }
  return s;
}

void Run(const std::string& input) {
  zeroshard::fuzz::RunOne(reinterpret_cast<const uint8_t*>(input.data()),
                          input.size());
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 300;
  unsigned long long seed = 1;
  std::vector<std::string> files;
  const char* out_dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::string last =
      out_dir != nullptr ? std::string(out_dir) + "/last_input" : "";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--runs=", 7) == 0) {
      runs = std::strtol(argv[i] + 7, nullptr, 10);
    } else if (std::strncmp(argv[i], "--seed=", 7) == 0) {
      seed = std::strtoull(argv[i] + 7, nullptr, 10);
    } else if (std::strncmp(argv[i], "--last_input=", 13) == 0) {
      last = argv[i] + 13;
    } else if (argv[i][0] == '-') {
      std::fprintf(stderr,
                   "usage: %s [--runs=N] [--seed=S] [--last_input=PATH] "
                   "[files...]\n",
                   argv[0]);
      return 2;
    } else {
      files.push_back(argv[i]);
    }
  }
  if (!files.empty()) {
    for (const std::string& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "service_fuzz: cannot read %s\n", f.c_str());
        return 2;
      }
      std::stringstream bytes;
      bytes << in.rdbuf();
      Run(bytes.str());
      std::printf("service_fuzz: %s: ok\n", f.c_str());
    }
    return 0;
  }
  const std::vector<std::string> seeds = zeroshard::fuzz::SeedInputs();
  for (const std::string& s : seeds) Run(s);
  std::printf("service_fuzz: %zu seeds ok; calls answered OK / made: %s\n",
              seeds.size(), zeroshard::fuzz::CallSummary().c_str());
  std::mt19937_64 rng(seed);
  for (long i = 0; i < runs; ++i) {
    const std::string input = Mutate(seeds, rng);
    if (!last.empty()) {
      std::ofstream(last, std::ios::binary | std::ios::trunc) << input;
    }
    Run(input);
    if ((i + 1) % 100 == 0) {
      std::printf("service_fuzz: %ld of %ld mutated inputs ok\n", i + 1, runs);
      std::fflush(stdout);
    }
  }
  std::printf(
      "service_fuzz: %zu seeds and %ld mutated inputs (seed %llu): "
      "no invariant violated; calls answered OK / made: %s\n",
      seeds.size(), runs, seed, zeroshard::fuzz::CallSummary().c_str());
  return 0;
}
