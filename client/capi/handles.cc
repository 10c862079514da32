#include "client/capi/handles.h"

#include <algorithm>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_replace.h"

namespace zeroshard::capi {
namespace {

class Registry {
 public:
  uintptr_t Add(std::shared_ptr<Handle> object) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const uintptr_t id = next_++;
    live_.emplace(id, std::move(object));
    return id;
  }

  absl::StatusOr<std::shared_ptr<Handle>> Find(const void* handle, Kind kind,
                                               bool remove)
      ABSL_LOCKS_EXCLUDED(mu_) {
    const char* name = KindName(kind);
    if (handle == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", name, " handle is NULL"));
    }
    const uintptr_t id = reinterpret_cast<uintptr_t>(handle);
    absl::MutexLock lock(&mu_);
    auto it = live_.find(id);
    if (it == live_.end()) {
      return absl::InvalidArgumentError(
          id < next_ ? absl::StrCat("the ", name, " handle was closed")
                     : absl::StrCat("not a zeroshard ", name,
                                    " handle (never returned by the library)"));
    }
    if (it->second->kind() != kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the handle is a ", KindName(it->second->kind()), ", not a ", name));
    }
    std::shared_ptr<Handle> object = it->second;
    if (remove) live_.erase(it);
    return object;
  }

 private:
  absl::Mutex mu_;
  uintptr_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uintptr_t, std::shared_ptr<Handle>> live_
      ABSL_GUARDED_BY(mu_);
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed
  return *registry;
}

std::string& ThreadError() {
  thread_local std::string message;
  return message;
}

}  // namespace

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kClient:
      return "client";
    case Kind::kTrainer:
      return "trainer";
    case Kind::kMember:
      return "member";
  }
  return "unknown";
}

void Handle::set_error(std::string message) {
  absl::MutexLock lock(&mu_);
  error_ = std::move(message);
}

std::string Handle::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

uintptr_t Register(std::shared_ptr<Handle> object) {
  return TheRegistry().Add(std::move(object));
}

absl::StatusOr<std::shared_ptr<Handle>> Find(const void* handle, Kind kind) {
  return TheRegistry().Find(handle, kind, /*remove=*/false);
}

absl::StatusOr<std::shared_ptr<Handle>> Remove(const void* handle, Kind kind) {
  return TheRegistry().Find(handle, kind, /*remove=*/true);
}

size_t CopyErrorOf(const void* handle, Kind kind, char* buf,
                   size_t size) noexcept {
  std::string message;
  try {
    absl::StatusOr<std::shared_ptr<Handle>> h = Find(handle, kind);
    message = h.ok() ? (*h)->error() : std::string(h.status().message());
  } catch (...) {
    message = "out of memory";
  }
  return CopyString(message, buf, size);
}

size_t CopyString(absl::string_view text, char* buf, size_t size) noexcept {
  if (buf != nullptr && size > 0) {
    const size_t n = std::min(size - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

int Report(const char* function, const absl::Status& status, Handle* blame) {
  // The model's checks (common/model_spec.h) name the protocol's fields:
  // say them as the C API's.
  std::string message =
      status.ok()
          ? std::string()
          : absl::StrCat(function, ": ",
                         absl::StrReplaceAll(
                             status.message(),
                             {{"ModelSpec.param_groups", "model.groups"},
                              {"ModelSpec.init.std", "model.init_std"},
                              {"ModelSpec.job_id", "zs_connect_options.job_id"},
                              {"ModelSpec.", "model."},
                              {" DTYPE_", " ZS_DTYPE_"}}));
  if (blame != nullptr) blame->set_error(message);
  ThreadError() = std::move(message);
  return static_cast<int>(status.code());
}

const char* LastError() { return ThreadError().c_str(); }

absl::Status CallbackStatus(int code, const std::string& what) {
  const absl::StatusCode c = code >= 1 && code <= 16
                                 ? static_cast<absl::StatusCode>(code)
                                 : absl::StatusCode::kUnknown;
  return absl::Status(c, absl::StrCat(what, " returned ", code));
}

absl::Status NotNull(const void* p, const char* name) {
  if (p != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " is NULL"));
}

absl::Status CheckUtf8(absl::string_view text, absl::string_view name) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    }
    bool ok = len > 0 && n - i >= len;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char b = s[i + k];
      ok = k == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xBF;
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is not valid UTF-8 (byte ", i, ")"));
    }
    i += len;
  }
  return absl::OkStatus();
}

}  // namespace zeroshard::capi
