// A tiny grpcurl for tests: the standard health and reflection services of
// a plaintext gRPC server.
//
//   grpc_probe health ADDR SERVICE   prints the status (SERVING, NOT_SERVING)
//                                    or the gRPC error (NOT_FOUND: ...);
//                                    exits 0 only for SERVING
//   grpc_probe list ADDR             ListServices: one name per line
//   grpc_probe describe ADDR SYMBOL  the file defining SYMBOL: "file NAME",
//                                    then "method SERVICE.METHOD" lines
//
// Every call has a 10 s deadline. Exit 1 on any error, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"
#include "tests/reflection.grpc.pb.h"

namespace {

namespace refl = grpc::reflection::v1alpha;

void SetDeadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(10));
}

int Fail(const grpc::Status& s) {
  // gRPC's codes are Abseil's, number for number.
  std::printf(
      "%s: %s\n",
      absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code()))
          .c_str(),
      s.error_message().c_str());
  return 1;
}

int Health(const std::shared_ptr<grpc::Channel>& ch, const std::string& svc) {
  auto stub = grpc::health::v1::Health::NewStub(ch);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(svc);
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return Fail(s);
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          resp.status())
                          .c_str());
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0
                                                                         : 1;
}

// One request on the reflection stream, its one answer.
int Reflect(const std::shared_ptr<grpc::Channel>& ch,
            const refl::ServerReflectionRequest& req,
            refl::ServerReflectionResponse* resp) {
  auto stub = refl::ServerReflection::NewStub(ch);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto stream = stub->ServerReflectionInfo(&ctx);
  const bool sent = stream->Write(req) && stream->WritesDone();
  const bool got = sent && stream->Read(resp);
  refl::ServerReflectionResponse extra;
  while (stream->Read(&extra)) {
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) return Fail(s);
  if (!got) {
    std::printf("no answer on the reflection stream\n");
    return 1;
  }
  if (resp->has_error_response()) {
    std::printf("reflection error %d: %s\n",
                resp->error_response().error_code(),
                resp->error_response().error_message().c_str());
    return 1;
  }
  return 0;
}

int List(const std::shared_ptr<grpc::Channel>& ch) {
  refl::ServerReflectionRequest req;
  req.set_list_services("");
  refl::ServerReflectionResponse resp;
  if (int rc = Reflect(ch, req, &resp); rc != 0) return rc;
  for (const auto& svc : resp.list_services_response().service()) {
    std::printf("%s\n", svc.name().c_str());
  }
  return 0;
}

int Describe(const std::shared_ptr<grpc::Channel>& ch,
             const std::string& symbol) {
  refl::ServerReflectionRequest req;
  req.set_file_containing_symbol(symbol);
  refl::ServerReflectionResponse resp;
  if (int rc = Reflect(ch, req, &resp); rc != 0) return rc;
  for (const std::string& bytes :
       resp.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    if (!file.ParseFromString(bytes)) {
      std::printf("a FileDescriptorProto that does not parse\n");
      return 1;
    }
    std::printf("file %s\n", file.name().c_str());
    for (const auto& svc : file.service()) {
      for (const auto& m : svc.method()) {
        std::printf("method %s.%s.%s\n", file.package().c_str(),
                    svc.name().c_str(), m.name().c_str());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  const int want = cmd == "list" ? 3 : 4;
  if ((cmd != "health" && cmd != "list" && cmd != "describe") || argc != want) {
    std::fprintf(stderr,
                 "usage: grpc_probe health ADDR SERVICE | list ADDR | "
                 "describe ADDR SYMBOL\n");
    return 2;
  }
  auto ch = grpc::CreateChannel(argv[2], grpc::InsecureChannelCredentials());
  if (cmd == "health") return Health(ch, argv[3]);
  if (cmd == "list") return List(ch);
  return Describe(ch, argv[3]);
}
