// The NCCL backend with a communicator of size one (one GPU), and the
// device reduction tree against the host one, bit for bit. Skips with the
// reason where there is no device or no CUDA build.
#include "worker/collective/nccl_communicator.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/cuda/device.h"
#include "gtest/gtest.h"
#include "worker/collective/reduce.h"
#include "worker/collective/reduce_cuda.h"
#include "worker/collective/tcp_bootstrap.h"
#include "worker/collective/testing.h"

#ifdef ZEROSHARD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zeroshard {
namespace collective {
namespace {

#ifndef ZEROSHARD_HAVE_CUDA
#define ZS_SKIP_WITHOUT_CUDA_DEVICE() \
  GTEST_SKIP() << "built without --config=cuda"
#else
#define ZS_SKIP_WITHOUT_CUDA_DEVICE()            \
  do {                                           \
    std::string why;                             \
    if (!cuda::CudaAvailable(&why)) {            \
      GTEST_SKIP() << "no CUDA device: " << why; \
    }                                            \
  } while (0)
#endif

TEST(NcclCommunicatorTest, WithoutCudaCreateSaysWhy) {
#ifdef ZEROSHARD_HAVE_CUDA
  GTEST_SKIP() << "built with CUDA";
#else
  TcpBootstrapOptions o;
  auto b = TcpBootstrap::Create(o);
  ASSERT_TRUE(b.ok());
  auto c = CreateNcclCommunicator(**b, {});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(), "built without --config=cuda");
#endif
}

TEST(NcclCommunicatorTest, SizeOneCommunicatorRunsEveryOp) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  TcpBootstrapOptions o;
  auto b = TcpBootstrap::Create(o);
  ASSERT_TRUE(b.ok());
  auto c = CreateNcclCommunicator(**b, {});
  ASSERT_TRUE(c.ok()) << c.status();
  Communicator& comm = **c;
  EXPECT_EQ(comm.memory_space(), MemorySpace::kDevice);
  for (DType dtype : {DType::kFloat32, DType::kBfloat16}) {
    const uint64_t n = 100003;
    const std::vector<char> in = MakeInput(3, 0, n, dtype);
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, in.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev, in.data(), in.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_TRUE(comm.AllReduce(dev, n, dtype).Wait().ok());
    ASSERT_TRUE(comm.ReduceScatter(dev, n, dtype).Wait().ok());
    ASSERT_TRUE(comm.AllGather(dev, n, dtype).Wait().ok());
    ASSERT_TRUE(comm.Broadcast(dev, n, dtype, 0).Wait().ok());
    CollectiveOp barrier = comm.Barrier();
    ASSERT_TRUE(barrier.Wait().ok()) << barrier.Wait();
    std::vector<char> out(in.size());
    ASSERT_EQ(cudaMemcpy(out.data(), dev, out.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(out, in) << "a sum over one rank is the value";
    cudaFree(dev);
  }
#endif
}

TEST(NcclCommunicatorTest, DeviceTreeMatchesHostTreeBitwise) {
  ZS_SKIP_WITHOUT_CUDA_DEVICE();
#ifdef ZEROSHARD_HAVE_CUDA
  const uint64_t n = 70001;
  for (DType dtype : {DType::kFloat32, DType::kBfloat16}) {
    for (int w : {1, 2, 3, 4, 5, 7, 8, 13}) {
      SCOPED_TRACE(testing::Message() << "W=" << w << " " << DTypeName(dtype));
      std::vector<std::vector<char>> in;
      std::vector<void*> dev(w);
      std::vector<const void*> host_ptrs(w), dev_ptrs(w);
      for (int r = 0; r < w; ++r) {
        in.push_back(MakeInput(5, r, n, dtype));
        ASSERT_EQ(cudaMalloc(&dev[r], in[r].size()), cudaSuccess);
        cudaMemcpy(dev[r], in[r].data(), in[r].size(), cudaMemcpyHostToDevice);
        host_ptrs[r] = in[r].data();
        dev_ptrs[r] = dev[r];
      }
      std::vector<char> want(in[0].size()), got(in[0].size());
      ReduceTree(host_ptrs.data(), w, dtype, want.data(), dtype, n);
      void* out = nullptr;
      ASSERT_EQ(cudaMalloc(&out, got.size()), cudaSuccess);
      ASSERT_EQ(
          DeviceReduceTree(dev_ptrs.data(), w, dtype, out, dtype, n, nullptr),
          "");
      ASSERT_EQ(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost),
                cudaSuccess);
      EXPECT_EQ(got, want);
      EXPECT_EQ(want, ReferenceSum(in, dtype));
      cudaFree(out);
      for (void* p : dev) cudaFree(p);
    }
  }
#endif
}

}  // namespace
}  // namespace collective
}  // namespace zeroshard
