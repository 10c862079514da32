// The server side of the data plane: Gather and PushGradients as gRPC
// callback handlers on raw byte buffers (proto/wire.h), so that payload
// bytes move between the store and gRPC's slices with one copy each way
// and no protobuf message in between:
//   * gather: the store writes each chunk straight into the buffer that
//     becomes the outgoing slice (the fields before it are encoded in
//     place);
//   * push: each chunk's payload is handed to the PushSession straight
//     from the received slices (through a small staging buffer only where
//     an element straddles two slices or a slice is not aligned to the
//     element size).
// Behaviour (statuses, messages, counters, "a rejected request changes
// nothing") is the store's, exactly as with the generated protobuf
// handlers; bytes that do not parse as the request message are
// INVALID_ARGUMENT and counted as rejected.
//
// Ownership: gRPC owns each reactor once returned and it deletes itself in
// OnDone(). `store` is not owned and must outlive the server. Threading:
// gRPC calls one reactor's callbacks one at a time; the store is
// thread-safe. Handlers never wait on anything but the store's locks.
#ifndef ZEROSHARD_SERVER_DATA_PLANE_H_
#define ZEROSHARD_SERVER_DATA_PLANE_H_

#include "grpcpp/grpcpp.h"
#include "server/store/shard_store.h"

namespace zeroshard {

// Starts streaming the range `request` asks for (GatherRequest bytes).
grpc::ServerWriteReactor<grpc::ByteBuffer>* NewGatherReactor(
    ShardStore* store, const grpc::ByteBuffer* request);

// Receives one contribution (PushGradientsRequest messages) and answers
// with PushGradientsResponse bytes in `response`.
grpc::ServerReadReactor<grpc::ByteBuffer>* NewPushReactor(
    ShardStore* store, grpc::ByteBuffer* response);

}  // namespace zeroshard

#endif  // ZEROSHARD_SERVER_DATA_PLANE_H_
