// collective_worker: one rank of the multi-process UCX test
// (ucx_multiprocess_test.cc). Bootstraps over TCP, runs AllReduce,
// Barrier, AllReduce, ReduceScatter, AllGather (of the ReduceScatter result),
// Broadcast (root W-1) and Barrier on the inputs of testing.h, and writes one
// line per op:
//   <op> OK <bytes_sent> <bytes_received> <fnv1a of the checked bytes>
//   <op> ERROR <status code> <message>
// The checked bytes are the whole buffer, or this rank's part for
// ReduceScatter.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env/files.h"
#include "common/flags.h"
#include "common/status_macros.h"
#include "worker/collective/host_communicator.h"
#include "worker/collective/tcp_bootstrap.h"
#include "worker/collective/testing.h"
#include "worker/collective/ucx_transport.h"

namespace zeroshard {
namespace collective {
namespace {

struct Args {
  int64_t rank = 0, world = 1, local_size = 1, count = 1000, seed = 7;
  uint32_t alignment = 1;
  int64_t op_timeout_ms = 60000;
  std::string coord = "127.0.0.1:0", port_file, out, dtype = "fp32";
  bool exit_after_connect = false;
};

absl::Status Main(const Args& a) {
  TcpBootstrapOptions bo;
  bo.rank = static_cast<int>(a.rank);
  bo.size = static_cast<int>(a.world);
  bo.coordinator = a.coord;
  bo.timeout = absl::Seconds(30);
  ZS_ASSIGN_OR_RETURN(auto bootstrap, TcpBootstrap::Create(bo));
  Env* env = DefaultEnv();
  if (!a.port_file.empty()) {
    ZS_RETURN_IF_ERROR(WriteFileAtomic(env, a.port_file,
                                       absl::StrCat(bootstrap->port(), "\n")));
  }
  ZS_ASSIGN_OR_RETURN(auto transport, CreateUcxTransport(*bootstrap));
  HostCommunicatorOptions options;
  options.part_alignment = a.alignment;
  options.local_size = static_cast<int>(a.local_size);
  options.op_timeout = absl::Milliseconds(a.op_timeout_ms);
  ZS_ASSIGN_OR_RETURN(auto comm,
                      HostCommunicator::Create(std::move(transport), options));

  const DType dtype = a.dtype == "bf16" ? DType::kBfloat16 : DType::kFloat32;
  const size_t es = DTypeSize(dtype);
  const uint64_t n = static_cast<uint64_t>(a.count);
  const int r = comm->rank();
  const std::vector<char> input = MakeInput(a.seed, r, n, dtype);
  const Range mine = comm->PartRange(n, r);
  // Each line reaches the file at once: a rank that dies later leaves its
  // lines so far.
  ZS_ASSIGN_OR_RETURN(AppendableFile out,
                      AppendableFile::Open(env, a.out,
                                           /*truncate=*/true));
  auto report = [&](const char* name, const CollectiveOp& op, const char* data,
                    size_t bytes) {
    absl::Status s = op.Wait();
    const std::string line =
        s.ok()
            ? absl::StrCat(name, " OK ", op.stats().bytes_sent, " ",
                           op.stats().bytes_received, " ", Fnv1a(data, bytes),
                           "\n")
            : absl::StrCat(name, " ERROR ", absl::StatusCodeToString(s.code()),
                           " ", s.message(), "\n");
    if (absl::Status w = out.Append(line); !w.ok()) {
      std::fprintf(stderr, "collective_worker: %s\n", w.ToString().c_str());
    }
  };
  std::vector<char> ar = input, rs = input, bc = input;
  // A first barrier connects every pair (UCX 1.13's TCP transport asserts
  // when a connection to a peer that is already dead is refused).
  report("connect", comm->Barrier(), nullptr, 0);
  if (a.exit_after_connect) _exit(3);  // a peer that dies mid-job
  report("allreduce", comm->AllReduce(ar.data(), n, dtype), ar.data(),
         ar.size());
  report("reducescatter", comm->ReduceScatter(rs.data(), n, dtype),
         rs.data() + mine.begin * es, mine.size() * es);
  report("allgather", comm->AllGather(rs.data(), n, dtype), rs.data(),
         rs.size());
  report("broadcast", comm->Broadcast(bc.data(), n, dtype, comm->size() - 1),
         bc.data(), bc.size());
  report("barrier", comm->Barrier(), nullptr, 0);
  return absl::OkStatus();
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard

int main(int argc, char** argv) {
  zeroshard::collective::Args a;
  zeroshard::FlagSet flags("collective_worker",
                           "collective_worker [flags]\n\nOne rank of the "
                           "multi-process collectives test.");
  flags.Int64("rank", &a.rank, "this rank");
  flags.Int64("world", &a.world, "number of ranks");
  flags.Int64("local_size", &a.local_size, "ranks per node (hierarchical)");
  flags.String("coord", &a.coord, "host:port of rank 0's rendezvous");
  flags.String("port_file", &a.port_file, "rank 0 writes its port here");
  flags.String("out", &a.out, "result file");
  flags.String("dtype", &a.dtype, "fp32 or bf16");
  flags.Int64("count", &a.count, "elements");
  flags.Int64("seed", &a.seed, "input seed");
  flags.Uint32("alignment", &a.alignment, "part alignment (elements)");
  flags.Int64("op_timeout_ms", &a.op_timeout_ms, "per-op timeout");
  flags.Bool("exit_after_connect", &a.exit_after_connect,
             "die after the first barrier (failure tests)");
  flags.ParseOrExit(argc, argv);
  absl::Status s = zeroshard::collective::Main(a);
  if (!s.ok()) {
    std::fprintf(stderr, "collective_worker rank %lld: %s\n",
                 static_cast<long long>(a.rank), s.ToString().c_str());
    return 1;
  }
  return 0;
}
