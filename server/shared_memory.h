// SharedSegments: the server's side of the shared-memory data plane. A
// client on the same host puts a Gather's or a push's bytes in a memfd
// segment of its own and names it in the request (v1::SharedRef: its pid,
// its descriptor, a 16-byte token); the server maps the segment through
// /proc/<pid>/fd/<fd> and reads or writes the bytes there instead of
// moving them through gRPC and the TCP stack (docs/shared_memory.md).
//
// A segment is accepted only when it is a memfd named "zeroshard...",
// sealed against shrinking (so that no later ftruncate can make an access
// fault), at least 64 bytes long, and its first 16 bytes equal the token
// (the request names the memory its sender wrote, not another process's
// descriptor that happens to have the same number). Every refusal is
// FAILED_PRECONDITION with a message starting "shared memory: ", which
// tells the client to use the stream instead; a range outside the segment
// is INVALID_ARGUMENT.
//
// Mappings are cached by token (at most Options::max_segments, the least
// recently used unmapped first, and any unused for Options::idle). A
// View keeps its mapping alive while it lives, so eviction never unmaps
// bytes in use. A client that went away leaves its mapping until it is
// evicted (its memory is freed then).
//
// Threading: thread-safe. The bytes themselves are the client's: the
// server reads a push's bytes once, and writes a gather's before it
// answers.
#ifndef ZEROSHARD_SERVER_SHARED_MEMORY_H_
#define ZEROSHARD_SERVER_SHARED_MEMORY_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/model_spec.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard {

class SharedSegments {
 public:
  struct Options {
    size_t max_segments = 256;
    absl::Duration idle = absl::Minutes(5);
  };
  // One mapped segment (unmapped when the last View and the cache let go).
  struct Mapping;
  // `bytes` at `data`, valid while `keep` lives.
  struct View {
    std::shared_ptr<Mapping> keep;
    char* data = nullptr;
  };

  SharedSegments() : SharedSegments(Options()) {}
  explicit SharedSegments(Options options) : options_(options) {}
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;

  // The `bytes` bytes at ref.offset of the segment `ref` names, mapping it
  // first if needed.
  absl::StatusOr<View> Resolve(const v1::SharedRef& ref, uint64_t bytes);

  // Segments mapped now (tests).
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<Mapping> mapping;
    absl::Time last_use;
    std::list<std::string>::iterator lru;  // position in lru_
  };
  // Maps the segment of `ref` (no lock held: it does I/O).
  static absl::StatusOr<std::shared_ptr<Mapping>> Map(const v1::SharedRef& ref);
  // Drops entries idle for too long, then the least recently used beyond
  // the limit.
  void Evict(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> by_token_ ABSL_GUARDED_BY(mu_);
  std::list<std::string> lru_ ABSL_GUARDED_BY(mu_);  // most recent first
};

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_SHARED_MEMORY_H_
