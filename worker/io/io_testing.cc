#include "worker/io/io_testing.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>

#include "common/subprocess.h"

namespace zeroshard::io::testing {

std::string MakeTempDir(const std::string& prefix) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string templ =
      std::string(t != nullptr ? t : "/tmp") + "/" + prefix + "_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

bool WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(f);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string HeaderBytes(const std::vector<int32_t>& fields) {
  FileHeader h{};
  for (size_t i = 0; i < fields.size() && i < h.size(); ++i) h[i] = fields[i];
  return std::string(reinterpret_cast<const char*>(h.data()), kHeaderBytes);
}

std::vector<float> RandomParams(uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> p(n);
  for (float& x : p) x = normal(rng);
  // 0x3F808000 is a bf16 tie that rounds to even (down), 0x3F818000 one
  // that rounds up.
  const uint32_t specials[] = {0x80000000u, 0x7F800000u, 0xFF800000u,
                               0x7FC01234u, 0x7F800001u, 0xFFA00001u,
                               0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu,
                               0x3F808000u, 0x3F818000u};
  for (size_t i = 0; i < std::size(specials) && n > 0; ++i) {
    std::memcpy(&p[(i * 997) % n], &specials[i], 4);
  }
  return p;
}

DataLoaderOptions LoaderOptions(std::vector<std::string> files, int batch_size,
                                int seq_len, int rank, int world_size,
                                int vocab_size) {
  DataLoaderOptions o;
  o.files = std::move(files);
  o.batch_size = batch_size;
  o.seq_len = seq_len;
  o.rank = rank;
  o.world_size = world_size;
  o.vocab_size = vocab_size;
  return o;
}

int RunCommand(const std::vector<std::string>& argv, std::string* out) {
  out->clear();
  static int counter = 0;
  const std::string dir = MakeTempDir("run");
  const std::string log = dir + "/output_" + std::to_string(counter++);
  SpawnOptions options;
  options.argv = argv;
  options.log_path = log;
  absl::StatusOr<Subprocess> child = Subprocess::Spawn(options);
  if (!child.ok()) {
    *out = child.status().ToString();
    return -1;
  }
  absl::StatusOr<int> status = child->Wait(std::chrono::minutes(2));
  *out = ReadBytes(log);
  if (!status.ok()) {
    *out += "\n" + status.status().ToString();
    return -1;
  }
  return WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

std::string RunfilePath(const std::string& rel) {
  if (const char* src = std::getenv("TEST_SRCDIR")) {
    const std::string path = std::string(src) + "/zeroshard/" + rel;
    if (access(path.c_str(), R_OK) == 0) return path;
  }
  return rel;  // bazel runs tests from the runfiles workspace root
}

}  // namespace zeroshard::io::testing
