// GPT-2 on the GPU (gpt2::Model with the CUDA Device, as `zeroshard train
// --device=cuda` runs it) against the CPU model: the same weights and
// tokens, fp32; the loss within 1e-5 (relative), every gradient within 1e-4
// of the largest, after two forward/backward passes that accumulate. Also
// what the device path copies: the parameters up, the tokens up, the losses
// and gradients down. And the device's optimizer operations (stage 0 on one
// GPU): AdamW bit for bit against the CPU's AdamWStep, special values
// included; the scale bit for bit; the fp64 sum of squares against the
// CPU's sum; and the order of a copy up on the copy stream between the
// kernels before its mark and those after it. Skips without a device or
// without --config=cuda.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cuda/device.h"
#include "common/optim/adamw.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/cuda/cuda_device.h"
#include "worker/gpt2/cuda/cuda_kernels.h"
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

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

// A copy up waits for the kernels before the mark it names, and the
// kernels after it wait for the copy (device.h's Mark / ToDeviceAsync, as
// the model's slots use them): eight products read the weights w (all
// ones, ~20 ms of SGEMMs), a mark, a copy of new weights (all twos) over w
// on the copy stream, then one product more. The eight see only the old
// weights (every output 4096, exact in fp32), the last only the new
// (8192). A copy that did not wait for its mark would race the eight.
// Unknown marks are refused.
TEST(CudaModelTest, CopyUpWaitsForItsMarkAndKernelsForTheCopy) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  Config c{64, 50, 64, 2, 2, 32};
  auto made = CreateCudaDevice(c, 2, 8, CudaPrecision::kFp32);
  ASSERT_TRUE(made.ok()) << made.status();
  Device& dev = **made;
  constexpr int kN = 4096;
  const size_t n = size_t{kN} * kN, bytes = n * sizeof(float);
  std::vector<float> ones(n, 1.0f), twos(n, 2.0f), back(n);
  float* x = static_cast<float*>(*dev.Alloc(bytes));
  float* w = static_cast<float*>(*dev.Alloc(bytes));
  float* before = static_cast<float*>(*dev.Alloc(bytes));
  float* after = static_cast<float*>(*dev.Alloc(bytes));
  ASSERT_TRUE(dev.ToDevice(x, ones.data(), bytes).ok());
  ASSERT_TRUE(dev.ToDevice(w, ones.data(), bytes).ok());
  EXPECT_EQ(dev.Mark(1).status().code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 8; ++i) {
    dev.kernels().MatmulForward(before, x, w, nullptr, kN, kN, kN);
  }
  auto mark = dev.Mark(0);
  ASSERT_TRUE(mark.ok()) << mark.status();
  EXPECT_EQ(dev.ToDeviceAsync(w, twos.data(), bytes, *mark + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto up = dev.ToDeviceAsync(w, twos.data(), bytes, *mark);
  ASSERT_TRUE(up.ok()) << up.status();
  dev.kernels().MatmulForward(after, x, w, nullptr, kN, kN, kN);
  ASSERT_TRUE(dev.WaitCopy(*up).ok());
  ASSERT_TRUE(dev.ToHost(back.data(), before, bytes).ok());
  EXPECT_EQ(std::count(back.begin(), back.end(), 4096.0f),
            static_cast<std::ptrdiff_t>(n))
      << "the products before the mark saw new weights";
  ASSERT_TRUE(dev.ToHost(back.data(), after, bytes).ok());
  EXPECT_EQ(std::count(back.begin(), back.end(), 8192.0f),
            static_cast<std::ptrdiff_t>(n))
      << "the product after the copy did not see all of it";
  ASSERT_TRUE(dev.status().ok()) << dev.status();
  for (float* p : {x, w, before, after}) dev.Free(p);
}

TEST(CudaModelTest, OptimizerOpsMatchTheCpu) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  Config c{64, 50, 64, 2, 2, 32};
  auto made = CreateCudaDevice(c, 2, 8, CudaPrecision::kFp32);
  ASSERT_TRUE(made.ok()) << made.status();
  Device& dev = **made;
  const size_t n = (1 << 20) + 37;
  std::vector<float> p(n), g(n), m(n), v(n);
  uint32_t s = 777;
  auto next = [&s] {
    s = s * 1664525u + 1013904223u;
    return static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  };
  for (size_t i = 0; i < n; ++i) {
    p[i] = next();
    g[i] = 1e-3f * next();
    m[i] = 1e-3f * next();
    v[i] = 1e-6f * std::fabs(next());
  }
  // Special values: NaN / Inf gradients, zeros, denormals, huge values.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float tiny = std::numeric_limits<float>::denorm_min();
  g[1] = nan, g[2] = inf, g[3] = -inf, g[4] = 0, v[4] = 0, m[4] = 0;
  g[5] = tiny, v[5] = 0, m[5] = 0, p[6] = tiny * 3, g[7] = 3e19f;
  void* buf[4];
  for (void*& b : buf) {
    auto a = dev.Alloc(n * sizeof(float));
    ASSERT_TRUE(a.ok()) << a.status();
    b = *a;
  }
  float *dp = static_cast<float*>(buf[0]), *dg = static_cast<float*>(buf[1]),
        *dm = static_cast<float*>(buf[2]), *dv = static_cast<float*>(buf[3]);
  ASSERT_TRUE(dev.ToDevice(dp, p.data(), n * 4).ok());
  ASSERT_TRUE(dev.ToDevice(dg, g.data(), n * 4).ok());
  ASSERT_TRUE(dev.ToDevice(dm, m.data(), n * 4).ok());
  ASSERT_TRUE(dev.ToDevice(dv, v.data(), n * 4).ok());
  // Two tensors with different hyperparameters, as the engine sends them.
  const size_t cut = 1000;
  AdamWHyper h0{1e-3, 0.9, 0.95, 1e-8, 0.1, 0.7f, 3};
  AdamWHyper h1{1e-3, 0.9, 0.95, 1e-8, 0.0, 0.7f, 3};
  std::vector<Device::AdamWTask> tasks = {
      {h0, dp, dg, dm, dv, cut},
      {h1, dp + cut, dg + cut, dm + cut, dv + cut, n - cut}};
  ASSERT_TRUE(dev.AdamW(tasks).ok()) << dev.status();
  AdamWStep(h0, p.data(), g.data(), m.data(), v.data(), nullptr,
            ServingType::kNone, cut);
  AdamWStep(h1, p.data() + cut, g.data() + cut, m.data() + cut, v.data() + cut,
            nullptr, ServingType::kNone, n - cut);
  std::vector<float> got(n);
  int64_t differ = 0;
  for (auto [host, d] : {std::pair{&p, dp}, {&m, dm}, {&v, dv}}) {
    ASSERT_TRUE(dev.ToHost(got.data(), d, n * 4).ok());
    for (size_t i = 0; i < n; ++i) {
      if (Bits(got[i]) != Bits((*host)[i])) {
        if (differ++ < 5) {
          ADD_FAILURE() << "element " << i << ": gpu " << got[i] << " cpu "
                        << (*host)[i];
        }
      }
    }
  }
  EXPECT_EQ(differ, 0);

  // Scale, bit for bit; then the sum of squares of the scaled values.
  // Finite values (m now holds the canonical NaNs of the NaN/Inf gradients).
  for (size_t i = 0; i < n; ++i) m[i] = next();
  ASSERT_TRUE(dev.ToDevice(dg, m.data(), n * 4).ok());
  ASSERT_TRUE(dev.Scale(dg, n, 0.37f).ok());
  ASSERT_TRUE(dev.ToHost(got.data(), dg, n * 4).ok());
  double want = 0;
  for (size_t i = 0; i < n; ++i) {
    const float x = m[i] * 0.37f;
    EXPECT_EQ(Bits(got[i]), Bits(x)) << "element " << i;
    want += static_cast<double>(x) * x;
    if (Bits(got[i]) != Bits(x)) break;
  }
  auto sum = dev.SumSquares(dg, n);
  auto again = dev.SumSquares(dg, n);
  ASSERT_TRUE(sum.ok() && again.ok()) << dev.status();
  std::printf(
      "optimizer ops: AdamW %zu elements bit-identical, sum of squares"
      " %.17g (cpu %.17g, rel %.2e)\n",
      n, *sum, want, std::fabs(*sum - want) / want);
  EXPECT_LE(std::fabs(*sum - want), 1e-12 * want);
  EXPECT_EQ(*sum, *again);
  for (void* b : buf) dev.Free(b);
  EXPECT_TRUE(dev.status().ok()) << dev.status();
}

// Where a GPT-2 124M pass goes on this GPU (12 layers, 12 heads, 768
// channels, B = 8, T = 1024, fp32): one forward and backward, by layer call
// (CudaKernels::CallTimes, every call synchronised), after a warm-up pass;
// then the pass as training runs it (calls enqueued, the GPU ahead of the
// host). Prints, asserts only that the passes ran; the kit's record of what
// to make faster.
TEST(CudaModelTest, Gpt2SmallPassTiming) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  const Config c{1024, 50257, 50304, 12, 12, 768};
  const int B = 8, T = 1024, kPasses = 3;
  std::vector<int> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = (i * 7919) % c.vocab_size;
    tg[i] = (i * 104729 + 3) % c.vocab_size;
  }
  for (bool synchronous : {true, false}) {
    auto dev = CreateCudaDevice(c, B, T, CudaPrecision::kFp32, 0, synchronous);
    ASSERT_TRUE(dev.ok()) << dev.status();
    ModelOptions mo;
    mo.device = dev->get();
    auto gpu = Model::Create(c, B, T, mo);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const size_t n = (*gpu)->params().size();
    std::vector<float> w(n, 0.02f);
    ASSERT_TRUE(
        (*dev)->ToDevice((*gpu)->params().data(), w.data(), n * 4).ok());
    auto* kernels = dynamic_cast<CudaKernels*>(&(*dev)->kernels());
    ASSERT_NE(kernels, nullptr);
    std::vector<CudaKernels::CallTime> before;
    absl::Time start;
    std::vector<float> g(16);
    for (int pass = 0; pass <= kPasses; ++pass) {
      if (pass == 1) {
        // The warm-up's work done (a copy waits for it).
        ASSERT_TRUE((*dev)->ToHost(g.data(), (*gpu)->grads().data(), 64).ok());
        before = kernels->CallTimes();
        start = absl::Now();
      }
      (*gpu)->ZeroGrad();
      ASSERT_TRUE((*gpu)->Forward(in, tg).ok()) << (*dev)->status();
      ASSERT_TRUE((*gpu)->Backward().ok()) << (*dev)->status();
    }
    // The last backward's gradients down: the end of its work.
    ASSERT_TRUE((*dev)->ToHost(g.data(), (*gpu)->grads().data(), 64).ok());
    const double pass_ms =
        absl::ToDoubleMilliseconds(absl::Now() - start) / kPasses;
    double calls_ms = 0;
    for (const CudaKernels::CallTime& t : kernels->CallTimes()) {
      double s = t.seconds;
      int64_t calls = t.calls;
      for (const CudaKernels::CallTime& b : before) {
        if (b.name == t.name) s -= b.seconds, calls -= b.calls;
      }
      calls_ms += 1e3 * s / kPasses;
      if (synchronous) {
        std::printf(
            "timing layer=%-20s calls_per_pass=%4lld ms_per_pass=%8.2f\n",
            t.name.c_str(), static_cast<long long>(calls / kPasses),
            1e3 * s / kPasses);
      }
    }
    std::printf(
        "timing gpt2_124m B=%d T=%d fp32 %s pass_ms=%.1f "
        "layer_calls_ms=%.1f (%s)\n",
        B, T, synchronous ? "synchronous" : "enqueued", pass_ms, calls_ms,
        (*dev)->Name().c_str());
    EXPECT_GT(pass_ms, 0);
    EXPECT_TRUE((*dev)->status().ok()) << (*dev)->status();
  }
}

}  // namespace
}  // namespace zeroshard::gpt2
