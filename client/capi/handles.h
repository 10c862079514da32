// The C API's handles and its boundary (client/zeroshard.h): the registry
// of live handles, the per-thread and per-handle error messages, and the
// wrapper every exported function runs its body in.
//
// A handle given to C is not an address but a number from a counter that
// never repeats, cast to the opaque pointer type; the registry maps it to
// the object. A closed (or invented) handle is therefore an error, never a
// read of freed memory, and a freed handle's value is never reused. Lookup
// hands out a shared_ptr, so a call in flight keeps its object alive while
// another thread closes the handle.
//
//   int zs_model_size(zs_client* c, uint64_t* total) {
//     return capi::Run("zs_model_size", [&](capi::Blame* blame) {
//       ZS_ASSIGN_OR_RETURN(auto client, capi::Lookup<ClientHandle>(c));
//       *blame = client;                       // errors also go to it
//       ...
//       return absl::OkStatus();
//     });
//   }
//
// Threading: everything here is thread-safe.
#ifndef ZEROSHARD_CLIENT_CAPI_HANDLES_H_
#define ZEROSHARD_CLIENT_CAPI_HANDLES_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace zeroshard::capi {

enum class Kind { kClient, kTrainer, kMember };
const char* KindName(Kind kind);  // "client", "trainer", "member"

// What every handle's object is.
class Handle {
 public:
  explicit Handle(Kind kind) : kind_(kind) {}
  virtual ~Handle() = default;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  Kind kind() const { return kind_; }
  // The message of the handle's last call ("" after a success).
  void set_error(std::string message) ABSL_LOCKS_EXCLUDED(mu_);
  std::string error() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const Kind kind_;
  mutable absl::Mutex mu_;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

// Adds `object` to the registry; returns its new handle value.
uintptr_t Register(std::shared_ptr<Handle> object);

// The live object of `handle` if it is of `kind`, else INVALID_ARGUMENT
// naming the problem (NULL, not live or closed, another kind).
absl::StatusOr<std::shared_ptr<Handle>> Find(const void* handle, Kind kind);

// Removes `handle` (of `kind`) from the registry and returns its object,
// which lives on while others hold it.
absl::StatusOr<std::shared_ptr<Handle>> Remove(const void* handle, Kind kind);

// Copies the last message of a live handle, or the error saying why
// `handle` is none (closed, NULL, ...), into buf[0..size) NUL-terminated;
// returns the message's length (zs_client_error and its siblings).
size_t CopyErrorOf(const void* handle, Kind kind, char* buf,
                   size_t size) noexcept;

template <class T>
absl::StatusOr<std::shared_ptr<T>> Lookup(const void* handle) {
  absl::StatusOr<std::shared_ptr<Handle>> h = Find(handle, T::kKind);
  if (!h.ok()) return h.status();
  return std::static_pointer_cast<T>(*std::move(h));
}

// The handle an error is also recorded on (may stay null).
using Blame = std::shared_ptr<Handle>;

// Records `status` as the calling thread's last error (and `blame`'s),
// prefixed with `function`, and returns its code.
int Report(const char* function, const absl::Status& status, Handle* blame);

// Runs `body(Blame*)` (returning absl::Status) and reports its result; an
// exception becomes ZS_INTERNAL, so none crosses the C boundary.
template <class F>
int Run(const char* function, F&& body) noexcept {
  Blame blame;
  absl::Status status;
  try {
    status = body(&blame);
  } catch (const std::exception& e) {
    status =
        absl::InternalError(absl::StrCat("unexpected exception: ", e.what()));
  } catch (...) {
    status = absl::InternalError("unexpected exception");
  }
  try {
    return Report(function, status, blame.get());
  } catch (...) {
    return static_cast<int>(absl::StatusCode::kInternal);
  }
}

// The thread's last message (zs_last_error).
const char* LastError();

// A status for a code a caller's callback returned (`what` names it):
// codes 1..16 keep their meaning, others become UNKNOWN.
absl::Status CallbackStatus(int code, const std::string& what);

// Copies `text` into buf[0..size), cut to size - 1 bytes and NUL-terminated
// (nothing when buf is NULL or size 0); returns text.size(), the length a
// caller needs. For every "copy a string out" function of the C API.
size_t CopyString(absl::string_view text, char* buf, size_t size) noexcept;

// INVALID_ARGUMENT "<name> is NULL" when `p` is null.
absl::Status NotNull(const void* p, const char* name);

// INVALID_ARGUMENT "<name> is not valid UTF-8 (byte k)" unless `text` is
// well-formed UTF-8 (no overlong forms, surrogates or code points above
// U+10FFFF): strings the protocol carries as protobuf `string` fields, which
// the servers refuse to parse otherwise.
absl::Status CheckUtf8(absl::string_view text, absl::string_view name);

}  // namespace zeroshard::capi

#endif  // ZEROSHARD_CLIENT_CAPI_HANDLES_H_
