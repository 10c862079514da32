// The version and source revision every zeroshard binary prints on
// --version:
//   zeroshard-server 0.1.0 (revision 4730b73fd3c2...+dirty)
//
// The revision is the git commit the binary was built from, "+dirty" when
// tracked files differed from it, stamped by Bazel from
// tools/workspace_status.sh (.bazelrc's --workspace_status_command, a
// STABLE key: a new commit relinks the binaries, it rebuilds nothing
// else). A build without that command, or outside a git checkout, says
// "unknown".
//
// Threading: constants; any thread.
#ifndef ZEROSHARD_COMMON_VERSION_H_
#define ZEROSHARD_COMMON_VERSION_H_

#include <string>

namespace zeroshard {

// "0.1.0": the release (the C API's ZS_VERSION and the Python package's
// __version__ say the same).
const char* Version();

// "<40 hex digits>", "<40 hex digits>+dirty" or "unknown".
const char* SourceRevision();

// "<program> <Version()> (revision <SourceRevision()>)".
std::string VersionLine(const std::string& program);

// When argv[1..] holds "--version" (before any "--"): prints
// VersionLine(program) on stdout and exits 0. Call first in main().
void ExitIfVersionFlag(int argc, char** argv, const std::string& program);

}  // namespace zeroshard

#endif  // ZEROSHARD_COMMON_VERSION_H_
