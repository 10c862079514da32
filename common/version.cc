#include "common/version.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/flags.h"
#include "common/version_stamp.h"  // generated: ZEROSHARD_REVISION

namespace zeroshard {

const char* Version() { return "0.1.0"; }

const char* SourceRevision() { return ZEROSHARD_REVISION; }

std::string VersionLine(const std::string& program) {
  return program + " " + Version() + " (revision " + SourceRevision() + ")";
}

void ExitIfVersionFlag(int argc, char** argv, const std::string& program) {
  FlagSet::ListVersionFlag();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return;
    if (std::strcmp(argv[i], "--version") == 0) {
      std::printf("%s\n", VersionLine(program).c_str());
      std::exit(0);
    }
  }
}

}  // namespace zeroshard
