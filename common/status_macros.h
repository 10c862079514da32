// Status-propagation macros. The packaged Abseil (20220623) has none.
//
//   ZS_RETURN_IF_ERROR(expr);          // returns the status if not ok
//   ZS_ASSIGN_OR_RETURN(auto x, expr); // x = *expr, or returns its status
//
// Both evaluate `expr` exactly once. They work in any function returning
// absl::Status or absl::StatusOr<T>.
#ifndef ZEROSHARD_COMMON_STATUS_MACROS_H_
#define ZEROSHARD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ZS_STATUS_CONCAT_INNER_(a, b) a##b
#define ZS_STATUS_CONCAT_(a, b) ZS_STATUS_CONCAT_INNER_(a, b)

#define ZS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status zs_status_ = (expr);      \
    if (!zs_status_.ok()) return zs_status_; \
  } while (0)

#define ZS_ASSIGN_OR_RETURN(lhs, expr)                                      \
  ZS_ASSIGN_OR_RETURN_IMPL_(ZS_STATUS_CONCAT_(zs_statusor_, __LINE__), lhs, \
                            expr)

#define ZS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#endif  // ZEROSHARD_COMMON_STATUS_MACROS_H_
