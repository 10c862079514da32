#include "tests/bench/bench_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zeroshard {
namespace bench {

CpuTimes ProcessCpu(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(in, line)) return CpuTimes{};
  // Fields after the parenthesised command name (which may hold spaces):
  // state(3) ... utime(14) stime(15).
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

double Samples::Best() const {
  return seconds.empty() ? 0
                         : *std::min_element(seconds.begin(), seconds.end());
}

double Samples::Median() const {
  if (seconds.empty()) return 0;
  std::vector<double> s = seconds;
  std::sort(s.begin(), s.end());
  return s.size() % 2 == 1 ? s[s.size() / 2]
                           : (s[s.size() / 2 - 1] + s[s.size() / 2]) / 2;
}

double Samples::BestGbps(uint64_t bytes) const {
  const double b = Best();
  return b > 0 ? static_cast<double>(bytes) / b / 1e9 : 0;
}

std::string Samples::Describe(uint64_t bytes) const {
  const double gb = static_cast<double>(bytes) * seconds.size() / 1e9;
  const double per = gb > 0 ? 1.0 / gb : 0;
  const double mib = static_cast<double>(bytes) * seconds.size() / (1 << 20);
  const double per_mib = mib > 0 ? 1.0 / mib : 0;
  return absl::StrFormat(
      "best %.3f s (%.2f GB/s), median %.3f s (%.2f GB/s)\n"
      "      per GB: client %.2f+%.2f CPU-s (usr+sys), servers %.2f+%.2f; "
      "page faults/MiB: client %.0f, servers %.0f",
      Best(), BestGbps(bytes), Median(),
      Median() > 0 ? static_cast<double>(bytes) / Median() / 1e9 : 0,
      self_cpu.user * per, self_cpu.sys * per, peer_cpu.user * per,
      peer_cpu.sys * per, self_cpu.faults * per_mib, peer_cpu.faults * per_mib);
}

float PatternValue(uint64_t i) {
  const uint64_t h = (i * 0x9E3779B97F4A7C15ull) >> 40;  // 24 bits
  return static_cast<float>(static_cast<double>(h) / (1 << 23) - 1.0);
}

void FillPattern(float* out, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) out[i] = PatternValue(i);
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

}  // namespace bench
}  // namespace zeroshard
