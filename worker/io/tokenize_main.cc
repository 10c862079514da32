// zeroshard-tokenize: turns any file into an llm.c token file with a
// byte-level vocabulary (token = byte value, 256 symbols), optionally
// splitting off the end as a validation file. See byte_tokenizer.h.
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/flags.h"
#include "common/version.h"
#include "worker/io/byte_tokenizer.h"

namespace {

constexpr uint64_t kProgressEvery = uint64_t{64} << 20;

double MiB(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  zeroshard::ExitIfVersionFlag(argc, argv, "zeroshard-tokenize");
  zeroshard::io::TokenizeOptions o;
  zeroshard::FlagSet flags(
      "zeroshard-tokenize",
      "zeroshard-tokenize --input=FILE --output=FILE "
      "[--val_fraction=F --val_output=FILE]\n\n"
      "Writes FILE's bytes as an llm.c token file (magic 20240520, uint16\n"
      "tokens) with a byte-level vocabulary: token = byte value, 256\n"
      "symbols, so train with vocab_size >= 256. With --val_fraction the\n"
      "last fraction of the input goes to --val_output instead.");
  flags.String("input", &o.input, "file to tokenize (any bytes)");
  flags.String("output", &o.output,
               "token file to write (training part; never the --input file)");
  flags.Double("val_fraction", &o.val_fraction,
               "fraction in [0, 1) of the input, taken from its end, to "
               "write to --val_output");
  flags.String("val_output", &o.val_output,
               "token file for the validation part (with --val_fraction)");
  const std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) {
    zeroshard::ExitWithError(flags.program(),
                             "unexpected argument '" + rest[0] + "'");
  }
  if (absl::Status s = zeroshard::io::ValidateTokenizeOptions(o); !s.ok()) {
    zeroshard::ExitWithError(flags.program(), std::string(s.message()));
  }
  uint64_t next_report = kProgressEvery;
  o.progress = [&](uint64_t done, uint64_t total) {
    if (done < next_report || done == total) return;
    std::fprintf(stderr, "zeroshard-tokenize: %.0f / %.0f MiB\n", MiB(done),
                 MiB(total));
    next_report = done + kProgressEvery;
  };
  absl::StatusOr<zeroshard::io::TokenizeSummary> s =
      zeroshard::io::TokenizeFile(o);
  if (!s.ok()) {
    zeroshard::ExitWithError(flags.program(), std::string(s.status().message()),
                             1);
  }
  std::printf("zeroshard-tokenize: %lld bytes of %s -> %lld tokens in %s",
              static_cast<long long>(s->input_bytes), o.input.c_str(),
              static_cast<long long>(s->train_tokens), o.output.c_str());
  if (s->val_tokens > 0) {
    std::printf(", %lld tokens in %s", static_cast<long long>(s->val_tokens),
                o.val_output.c_str());
  }
  std::printf(" (byte-level vocabulary: %d)\n", zeroshard::io::kByteVocabSize);
  return 0;
}
