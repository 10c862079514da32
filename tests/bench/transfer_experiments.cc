// transfer_experiments: transfer_bench's measurement (same harness, same
// checks, same RESULT line) with the data-plane changes proposed for
// client/ and server/ applied one at a time, so that each one's effect is
// measured against raw TCP in the same run. run_experiments.sh runs the
// whole matrix; one configuration per process, because glibc malloc
// settings cannot be undone.
//
//   --client=stock  ShardClient (as transfer_bench)
//   --client=proto  RawClient with generated protobuf stubs (ShardClient's
//                   data path; with --spread=false exactly ShardClient's
//                   channel choice)
//   --client=raw    RawClient with grpc::ByteBuffer messages (raw_client.h)
//   --spread        RawClient: pieces round-robin over the channels
//   --client_channel_args=name=value,...   RawClient channel arguments
//   --client_mallopt  glibc mallopt in this (client) process, as
//                   variant_server --mallopt does in the servers
//   --client_arena_max=N  mallopt(M_ARENA_MAX, N) in this process: gRPC
//                   reads land in per-thread arenas whose whole secondary
//                   heaps glibc unmaps when they empty (whatever
//                   M_TRIM_THRESHOLD says), so received data keeps landing
//                   in fresh pages; one arena avoids that
//   --server=stock|variant   //server:zeroshard-server or
//                   //tests/bench:variant_server (flags via --server_args,
//                   e.g. --server_args=--raw=false,--mallopt=true)
//   --server_env=NAME=VALUE;...   environment of the servers (e.g.
//                   GLIBC_TUNABLES=glibc.malloc.trim_threshold=...)
#include <malloc.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/local_fleet.h"
#include "client/shard_client.h"
#include "common/flags.h"
#include "common/model_spec.h"
#include "tests/bench/raw_client.h"
#include "tests/bench/transfer_harness.h"

namespace zeroshard {
namespace bench {
namespace {

class RawPlane : public DataPlane {
 public:
  explicit RawPlane(std::unique_ptr<RawClient> client)
      : client_(std::move(client)) {}
  absl::Status Gather(const Range& r, void* out, uint64_t* step) override {
    return client_->Gather(r, v1::DTYPE_FP32, out, step);
  }
  absl::Status Push(const Range& r, const void* data,
                    const PushId& id) override {
    return client_->Push(r, v1::DTYPE_FP32, data, id);
  }

 private:
  std::unique_ptr<RawClient> client_;
};

int Main(int argc, char** argv) {
  CommonFlags common;
  std::string client_kind = "stock";
  std::string server_kind = "stock";
  bool spread = true;
  bool client_mallopt = false;
  int64_t client_arena_max = 0;
  int64_t channels = ClientOptions().channels_per_server;
  int64_t piece_mib =
      static_cast<int64_t>(ClientOptions().max_piece_bytes >> 20);
  std::string channel_args;
  std::string server_env;
  FlagSet flags("transfer_experiments",
                "transfer_experiments [flags]\n\n"
                "transfer_bench with proposed data-plane changes applied.");
  common.Register(&flags);
  flags.String("client", &client_kind, "stock, proto or raw.");
  flags.String("server", &server_kind, "stock or variant.");
  flags.Bool("spread", &spread,
             "proto/raw: pieces round-robin over channels (else by begin "
             "offset, as ShardClient).");
  flags.Bool("client_mallopt", &client_mallopt,
             "Tune glibc malloc in the client (as variant_server --mallopt).");
  flags.Int64("client_arena_max", &client_arena_max,
              "glibc M_ARENA_MAX in the client (0: default).");
  flags.Int64("channels_per_server", &channels, "Channels per server.");
  flags.Int64("max_piece_mib", &piece_mib, "Largest piece per stream, MiB.");
  flags.String("client_channel_args", &channel_args,
               "proto/raw: extra integer channel arguments, name=value,...");
  flags.String("server_env", &server_env,
               "NAME=VALUE entries for the servers, ';'-separated.");
  const std::vector<std::string> rest = flags.ParseOrExit(argc, argv);
  if (!rest.empty()) ExitWithError(flags.program(), "unexpected argument");
  HarnessConfig cfg;
  std::vector<uint32_t> shards;
  common.Finish(flags, &cfg, &shards);
  if (channels < 1 || channels > 64 || piece_mib < 1) {
    ExitWithError(flags.program(), "bad --channels_per_server/--max_piece_mib");
  }
  if (client_mallopt) {
    mallopt(M_MMAP_THRESHOLD, 16 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
  }
  if (client_arena_max > 0) {
    mallopt(M_ARENA_MAX, static_cast<int>(client_arena_max));
  }
  cfg.client.channels_per_server = static_cast<int>(channels);
  cfg.client.max_piece_bytes = static_cast<uint64_t>(piece_mib) << 20;
  if (!server_env.empty()) {
    cfg.server_env = absl::StrSplit(server_env, ';', absl::SkipEmpty());
  }

  RawClientOptions raw;
  raw.channels_per_server = static_cast<int>(channels);
  raw.max_piece_bytes = cfg.client.max_piece_bytes;
  raw.spread = spread;
  if (!channel_args.empty()) {
    for (absl::string_view arg : absl::StrSplit(channel_args, ',')) {
      std::vector<std::string> kv = absl::StrSplit(arg, '=');
      int value = 0;
      if (kv.size() != 2 || !absl::SimpleAtoi(kv[1], &value)) {
        ExitWithError(flags.program(), "bad --client_channel_args");
      }
      raw.channel_args.emplace_back(kv[0], value);
    }
  }
  if (client_kind == "proto" || client_kind == "raw") {
    raw.raw = client_kind == "raw";
    cfg.make_plane = [raw](ShardClient* client,
                           const std::vector<std::string>& addresses)
        -> absl::StatusOr<std::unique_ptr<DataPlane>> {
      RawClientOptions o = raw;
      o.addresses = addresses;
      auto c = RawClient::Connect(o, client->plan(), client->spec().job_id());
      if (!c.ok()) return c.status();
      return std::unique_ptr<DataPlane>(new RawPlane(std::move(*c)));
    };
  } else if (client_kind != "stock") {
    ExitWithError(flags.program(), "--client is stock, proto or raw");
  }
  cfg.label = absl::StrCat(
      "client=", client_kind,
      client_kind == "stock" ? "" : (spread ? " spread" : " by-begin"), " ",
      channels, "ch", client_mallopt ? " mallopt" : "",
      client_arena_max > 0 ? absl::StrCat(" arenas=", client_arena_max) : "",
      channel_args.empty() ? "" : " args=" + channel_args,
      " | server=", server_kind,
      common.server_args.empty() ? "" : " " + common.server_args,
      server_env.empty() ? "" : " env=" + server_env);

  std::string rel;
  if (server_kind == "stock") {
    rel = "server/zeroshard-server";
  } else if (server_kind == "variant") {
    rel = "tests/bench/variant_server";
  } else {
    ExitWithError(flags.program(), "--server is stock or variant");
  }
  auto binary = WorkspaceBinary(rel);
  if (!binary.ok()) {
    ExitWithError(flags.program(), std::string(binary.status().message()), 1);
  }
  cfg.server_binary = *binary;
  return RunTransfer(cfg, shards, common.tcp_only);
}

}  // namespace
}  // namespace bench
}  // namespace zeroshard

int main(int argc, char** argv) { return zeroshard::bench::Main(argc, argv); }
