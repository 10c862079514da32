// ServeUnary: the thin adapter behind every unary method of the services
// (registered with the generated WithStreamedUnaryMethod_* variants). It
// reads the request itself, so bytes that do not parse as the request
// message answer INVALID_ARGUMENT naming the method — gRPC's generated
// handler would answer INTERNAL with an empty message before any of our
// code ran — and then calls the typed handler, whose answer it writes.
//
// Threading: runs on gRPC's synchronous handler threads, like the typed
// handlers it calls.
#ifndef ZEROSHARD_SERVER_UNARY_ADAPTER_H_
#define ZEROSHARD_SERVER_UNARY_ADAPTER_H_

#include <functional>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace zeroshard {

// `refuse` is asked first when the request is malformed: a caller that may
// not call `method` gets that refusal, not a statement about its bytes.
template <typename Req, typename Resp>
grpc::Status ServeUnary(
    const char* method, grpc::ServerContext* ctx,
    grpc::ServerUnaryStreamer<Req, Resp>* stream,
    const std::function<grpc::Status()>& refuse,
    const std::function<grpc::Status(grpc::ServerContext*, const Req*, Resp*)>&
        handler) {
  Req req;
  if (!stream->Read(&req)) {
    if (grpc::Status s = refuse(); !s.ok()) return s;
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat(method, ": malformed request (not a valid ",
                     Req::descriptor()->name(), " protobuf message)"));
  }
  Resp resp;
  grpc::Status s = handler(ctx, &req, &resp);
  if (s.ok() && !stream->Write(resp)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
  }
  return s;
}

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_UNARY_ADAPTER_H_
