// zeroshard-ctl export / import: a registered GPT-2 model as a model file
// in llm.c's format (worker/io/model_file.h).
//
// The registered ModelSpec holds the tensors in zeroshard's memory order
// (worker/gpt2/config.h): wte (Vp, C), wpe (maxT, C), 12 tensors per block,
// lnfw, lnfb. Vp, C, maxT and L follow from it; the number of heads does
// not (export takes it from the caller), nor does the real vocabulary size
// (default: Vp).
//
// Example:
//   ZS_RETURN_IF_ERROR(client->AttachToRegistered());
//   ZS_ASSIGN_OR_RETURN(std::string line,
//                       ctl::ExportModel(*client, "model.bin", 12, 50257));
//
// Errors: INVALID_ARGUMENT when the spec is not a GPT-2 layout, the heads
// or vocabulary do not fit it, or a file's layout differs from the spec
// (naming the first differing tensor); the servers' errors (prefixed by
// their address) and model_file.h's otherwise.
// Threading: the functions may run concurrently on different clients.
#ifndef ZEROSHARD_CTL_MODEL_COMMANDS_H_
#define ZEROSHARD_CTL_MODEL_COMMANDS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "client/shard_client.h"
#include "proto/zeroshard.pb.h"
#include "worker/gpt2/config.h"

namespace zeroshard::ctl {

// The GPT-2 config whose layout is `spec`'s tensors (checked with
// DescribeLayoutDifference). `heads` must divide C; `vocab` 0 means Vp.
absl::StatusOr<gpt2::Config> ConfigFromSpec(const v1::ModelSpec& spec,
                                            int64_t heads, int64_t vocab);

// "" when `layout` has `spec`'s tensor names and shapes in order; else the
// first differing tensor, the layout's side called `other`, e.g.
// "tensor 2: registered 'h.0.ln1w' 32, file 'h.0.ln1w' 64".
std::string DescribeLayoutDifference(const v1::ModelSpec& spec,
                                     const gpt2::ParamLayout& layout,
                                     const std::string& other);

// Gathers every fp32 master weight and writes them to `path` (version 3;
// a temporary file renamed into place). Returns a line for the user.
absl::StatusOr<std::string> ExportModel(ShardClient& client,
                                        const std::string& path, int64_t heads,
                                        int64_t vocab);

// OK when `path` is a model file whose header and length check out
// (model_file.h's errors otherwise); import runs it before contacting the
// servers.
absl::Status CheckModelFile(const std::string& path);

// Reads the model file at `path` and writes its weights into the registered
// model (WriteParameters: FAILED_PRECONDITION from the servers while
// gradients of the current step are pending). Returns a line for the user.
absl::StatusOr<std::string> ImportModel(ShardClient& client,
                                        const std::string& path);

}  // namespace zeroshard::ctl

#endif  // ZEROSHARD_CTL_MODEL_COMMANDS_H_
