// GPT-2 on the GPU (gpt2::Model with the CUDA Device, as `zeroshard train
// --device=cuda` runs it) against the CPU model: the same weights and
// tokens, fp32; the loss within 1e-5 (relative), every gradient within 1e-4
// of the largest, after two forward/backward passes that accumulate. Also
// what the device path copies: the parameters up, the tokens up, the losses
// and gradients down. Skips without a device or without --config=cuda.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cuda/device.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/cuda/cuda_device.h"
#include "worker/gpt2/model.h"

namespace zeroshard::gpt2 {
namespace {

std::string NoDevice() {
  std::string why;
  return cuda::CudaAvailable(&why) ? std::string() : "no CUDA device: " + why;
}

TEST(CudaModelTest, WithoutCudaCreateSaysWhy) {
  Config c{64, 50, 64, 2, 2, 32};
  auto d = CreateCudaDevice(c, 2, 8, CudaPrecision::kFp32);
  if (d.ok()) GTEST_SKIP() << "built with CUDA and a device";
  EXPECT_TRUE(absl::IsUnimplemented(d.status()) ||
              absl::IsUnavailable(d.status()))
      << d.status();
}

TEST(CudaModelTest, ForwardBackwardMatchTheCpuModel) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  // A GPT-2-like small shape and an odd one.
  for (Config c :
       {Config{128, 300, 320, 2, 4, 128}, Config{37, 77, 80, 3, 3, 72}}) {
    const int B = 2, T = c.max_seq_len;
    SCOPED_TRACE(DescribeConfig(c));
    auto dev = CreateCudaDevice(c, B, T, CudaPrecision::kFp32);
    ASSERT_TRUE(dev.ok()) << dev.status();
    auto cpu = Model::Create(c, B, T, ModelOptions{});
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    ModelOptions mo;
    mo.device = dev->get();
    auto gpu = Model::Create(c, B, T, mo);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const size_t n = (*cpu)->params().size();
    std::vector<float> w(n);
    uint32_t s = 12345;
    for (float& x : w) {
      s = s * 1664525u + 1013904223u;
      x = 0.04f * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
    }
    const ParamLayout& layout = (*cpu)->layout();
    for (const ParamTensor& t : layout.tensors()) {  // norms' weights at 1
      if (t.kind == ParamKind::kLn1w || t.kind == ParamKind::kLn2w ||
          t.kind == ParamKind::kLnfw) {
        std::fill_n(w.begin() + t.offset, t.numel, 1.0f);
      }
    }
    std::copy(w.begin(), w.end(), (*cpu)->params().begin());
    ASSERT_TRUE(
        (*dev)
            ->ToDevice((*gpu)->params().data(), w.data(), n * sizeof(float))
            .ok());
    for (int pass = 0; pass < 2; ++pass) {  // the second accumulates
      std::vector<int> in(B * T), tg(B * T);
      for (int i = 0; i < B * T; ++i) {
        in[i] = (i * 31 + pass * 7) % c.vocab_size;
        tg[i] = (i * 17 + 5 + pass) % c.vocab_size;
      }
      auto l1 = (*cpu)->Forward(in, tg);
      auto l2 = (*gpu)->Forward(in, tg);
      ASSERT_TRUE(l1.ok() && l2.ok()) << l2.status();
      EXPECT_LE(std::fabs(*l1 - *l2), 1e-5 * std::fabs(*l1))
          << "cpu " << *l1 << " gpu " << *l2;
      ASSERT_TRUE((*cpu)->Backward().ok());
      ASSERT_TRUE((*gpu)->Backward().ok()) << (*dev)->status();
    }
    std::vector<float> g(n);
    ASSERT_TRUE(
        (*dev)
            ->ToHost(g.data(), (*gpu)->grads().data(), n * sizeof(float))
            .ok());
    float biggest = 0, worst = 0;
    for (size_t i = 0; i < n; ++i) {
      biggest = std::max(biggest, std::fabs((*cpu)->grads()[i]));
      worst = std::max(worst, std::fabs((*cpu)->grads()[i] - g[i]));
    }
    std::printf("model=%s loss_err_rel<=1e-5 grad_err=%.3e of max %.3e (%s)\n",
                DescribeConfig(c).c_str(), worst / biggest, biggest,
                (*dev)->Name().c_str());
    EXPECT_LE(worst, 1e-4f * biggest);
    EXPECT_TRUE((*dev)->status().ok()) << (*dev)->status();
  }
}

}  // namespace
}  // namespace zeroshard::gpt2
