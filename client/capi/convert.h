// Between the C API's plain structs (client/zeroshard.h) and the library's
// C++ types: connect options, the model, the workers' state, stats, the
// membership view. Pure functions; thread-safe. Errors are
// INVALID_ARGUMENT naming the C field.
#ifndef ZEROSHARD_CLIENT_CAPI_CONVERT_H_
#define ZEROSHARD_CLIENT_CAPI_CONVERT_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "client/zeroshard.h"
#include "proto/zeroshard.pb.h"

namespace zeroshard::capi {

// ClientOptions (addresses, deadline, attempts, TLS, token) from `o`.
absl::StatusOr<ClientOptions> ToClientOptions(const zs_connect_options& o);

// The ModelSpec of `model` for `job_id` on `num_servers` servers, checked
// (ValidateSpec) with NULL pointers and counts reported by field.
absl::StatusOr<v1::ModelSpec> ToModelSpec(const zs_model& model,
                                          const std::string& job_id,
                                          uint32_t num_servers);

v1::TrainerState ToProto(const zs_trainer_state& s);
zs_trainer_state FromProto(const v1::TrainerState& s);

// The owned range comes from the spec the server reports (0, 0 without).
zs_server_stats FromProto(const v1::GetStatsResponse& s);

zs_member_info FromProto(const v1::Member& m);

}  // namespace zeroshard::capi

#endif  // ZEROSHARD_CLIENT_CAPI_CONVERT_H_
