// Parity of CudaKernels against CpuKernels, layer by layer, forward and
// backward: random inputs (fixed seed), the CPU on host arrays, the GPU on
// device copies, the results compared on the host. Prints one line per layer
// and direction:
//   layer=matmul_qkv dir=bwd precision=bf16 rel_err=3.1e-03 shape=B2T64C128
// rel_err = max |gpu - cpu| / max |cpu| over the layer's outputs (the worst
// output). Every GPU run is done twice and must give the same bits.
//
// Skips without a CUDA device, and when built without --config=cuda (then it
// only checks that Create says so).
#include "worker/gpt2/cuda/cuda_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/cuda/device.h"
#include "gtest/gtest.h"
#include "worker/gpt2/cpu_kernels.h"

#ifdef ZEROSHARD_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace zeroshard::gpt2 {
namespace {

// Tolerances, relative to the largest magnitude of the reference output.
// fp32: both sides compute in fp32 with different summation orders (and
// polynomial vs libm exp/tanh on the CPU): a few ulp times a short growth
// factor, far below 1e-4.
constexpr double kFp32Tol = 1e-4;
// bf16 products (kBf16 matmuls only; every other layer stays fp32): each
// operand is rounded to 8 significant bits, a relative error of at most 2^-9
// per operand, so each term x*w of a K-term dot product carries an error of
// ~2^-8 |x w| at most (rms ~2^-9.5 for two independent roundings). With
// random zero-mean inputs both the output and its error grow like sqrt(K)
// (the errors are independent), so the error relative to the output's scale
// stays ~2^-9.5 = 1.4e-3 rms for any K; the maximum over a few thousand
// outputs is ~4 sigma, and normalising by the output's maximum (also ~4
// sigma) leaves ~1.4e-3 .. 4e-3. 2e-2 leaves a 5x margin while still
// catching a wrong operand, transpose or missing bias (errors of order 1).
constexpr double kBf16MatmulTol = 2e-2;

TEST(CudaKernelsTest, CreateChecksOptionsAndBuild) {
  CudaKernelsOptions o;
  o.B = 1, o.T = 8, o.C = 10, o.NH = 3, o.Vp = 16;  // C % NH != 0
  const absl::StatusOr<std::unique_ptr<CudaKernels>> k = CudaKernels::Create(o);
  ASSERT_FALSE(k.ok());
#ifndef ZEROSHARD_HAVE_CUDA
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(k.status().message(), "built without --config=cuda");
  GTEST_SKIP() << "built without --config=cuda";
#else
  // Checked before any CUDA call: runs without a device too.
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument)
      << k.status();
#endif
}

#ifdef ZEROSHARD_HAVE_CUDA

// Empty if a CUDA device is usable, else why not.
std::string NoDevice() {
  std::string why;
  return cuda::CudaAvailable(&why) ? std::string() : "no CUDA device: " + why;
}

struct Shape {
  const char* name;
  int B, T, C, NH, V, Vp;
};

// A GPT-2-like small shape, and an odd one (nothing a multiple of a warp or a
// block: T = 37, hs = 24, V = 77).
constexpr Shape kShapes[] = {{"B2T64C128", 2, 64, 128, 4, 300, 320},
                             {"B3T37C72", 3, 37, 72, 3, 77, 96}};

using Outputs = std::vector<std::vector<float>>;

// max |got - want| / max |want|; infinity if got holds a NaN or an Inf.
double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::fabs(double{got[i]} - want[i]));
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  return diff / scale;
}

bool SameBits(const Outputs& a, const Outputs& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float))) {
      return false;
    }
  }
  return true;
}

// One shape and precision: a CpuKernels, a CudaKernels, random inputs and
// the device arrays of the GPU runs (freed at the end).
class Parity {
 public:
  Parity(const Shape& s, CudaPrecision precision,
         CudaAttention attention = CudaAttention::kBatched,
         int attention_blocks = 0)
      : s_(s),
        N_(int64_t{s.B} * s.T),
        precision_(precision),
        attention_(attention),
        attention_blocks_(attention_blocks) {}
  ~Parity() {
    for (void* p : device_) cudaFree(p);
  }

  // False (with a test failure) if either implementation cannot be made.
  bool Init() {
    auto cpu = CpuKernels::Create(2);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    CudaKernelsOptions o;
    o.B = s_.B, o.T = s_.T, o.C = s_.C, o.NH = s_.NH, o.Vp = s_.Vp;
    o.maxT = s_.T + 3;
    o.precision = precision_;
    o.attention = attention_;
    o.attention_blocks = attention_blocks_;
    auto gpu = CudaKernels::Create(o);
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    if (!cpu.ok() || !gpu.ok()) return false;
    cpu_ = std::move(cpu).value();
    gpu_ = std::move(gpu).value();
    return true;
  }

  void Encoder();
  void Layernorm();
  void Matmul(const char* name, int K, int OC, bool bias);
  void Attention();
  void Gelu();
  void Residual();
  void CrossEntropy();
  void Zero();

 private:
  std::vector<float> Random(int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(rng_);
    return v;
  }
  // Tokens in [0, V), every third one the same (repeats for the scatter).
  std::vector<int> Tokens(int64_t n, int V) {
    std::uniform_int_distribution<int> token(0, V - 1);
    std::vector<int> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? 5 : token(rng_);
    return v;
  }

  template <typename T>
  T* Alloc(size_t n) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T));
    if (err != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc: " << cudaGetErrorString(err);
      return nullptr;
    }
    device_.push_back(p);
    return static_cast<T*>(p);
  }
  // A device copy of v.
  template <typename T>
  T* Up(const std::vector<T>& v) {
    T* d = Alloc<T>(v.size());
    const cudaError_t err =
        cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice);
    if (err != cudaSuccess) ADD_FAILURE() << cudaGetErrorString(err);
    return d;
  }
  // n floats of NaN: an output the call must overwrite entirely.
  float* Garbage(int64_t n) {
    float* d = Alloc<float>(static_cast<size_t>(n));
    const cudaError_t err = cudaMemset(d, 0xFF, n * sizeof(float));
    if (err != cudaSuccess) ADD_FAILURE() << cudaGetErrorString(err);
    return d;
  }
  std::vector<float> Down(const float* d, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    const cudaError_t err =
        cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) ADD_FAILURE() << cudaGetErrorString(err);
    return v;
  }

  // Runs the GPU side twice (same bits required), compares with `want`,
  // prints the line and checks the tolerance.
  void Compare(const char* layer, const char* dir, double tol,
               const Outputs& want, const std::function<Outputs()>& run_gpu) {
    const Outputs got = run_gpu();
    const Outputs again = run_gpu();
    ASSERT_TRUE(gpu_->status().ok()) << layer << ": " << gpu_->status();
    ASSERT_EQ(got.size(), want.size());
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size()) << layer << " output " << i;
      err = std::max(err, RelErr(got[i], want[i]));
    }
    std::printf("layer=%s dir=%s precision=%s rel_err=%.3e shape=%s\n", layer,
                dir, CudaPrecisionName(precision_), err, s_.name);
    EXPECT_LE(err, tol) << "layer=" << layer << " dir=" << dir;
    EXPECT_TRUE(SameBits(got, again))
        << "layer=" << layer << " dir=" << dir << ": not deterministic";
  }

  const Shape s_;
  const int64_t N_;
  const CudaPrecision precision_;
  const CudaAttention attention_;
  const int attention_blocks_;  // CudaKernelsOptions::attention_blocks
  std::unique_ptr<CpuKernels> cpu_;
  std::unique_ptr<CudaKernels> gpu_;
  std::mt19937_64 rng_{20240611};
  std::vector<void*> device_;
};

void Parity::Encoder() {
  const int B = s_.B, T = s_.T, C = s_.C, maxT = T + 3;
  const std::vector<int> inp = Tokens(N_, s_.V);
  const std::vector<float> wte = Random(int64_t{s_.Vp} * C),
                           wpe = Random(int64_t{maxT} * C);
  std::vector<float> out(N_ * C);
  cpu_->EncoderForward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  Compare("encoder", "fwd", kFp32Tol, {out}, [&] {
    float* d = Garbage(N_ * C);
    gpu_->EncoderForward(d, Up(inp), Up(wte), Up(wpe), B, T, C);
    return Outputs{Down(d, N_ * C)};
  });

  const std::vector<float> dout = Random(N_ * C);
  const std::vector<float> dwte0 = Random(wte.size()),
                           dwpe0 = Random(wpe.size());
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  cpu_->EncoderBackward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T,
                        C);
  Compare("encoder", "bwd", kFp32Tol, {dwte, dwpe}, [&] {
    float* g_wte = Up(dwte0);
    float* g_wpe = Up(dwpe0);
    gpu_->EncoderBackward(g_wte, g_wpe, Up(dout), Up(inp), B, T, C);
    return Outputs{Down(g_wte, dwte0.size()), Down(g_wpe, dwpe0.size())};
  });
}

void Parity::Layernorm() {
  const int C = s_.C;
  std::vector<float> inp = Random(N_ * C, 2.0f);
  for (float& x : inp) x += 0.5f;  // a non-zero mean
  const std::vector<float> w = Random(C), b = Random(C);
  std::vector<float> out(N_ * C), mean(N_), rstd(N_);
  cpu_->LayernormForward(out.data(), mean.data(), rstd.data(), inp.data(),
                         w.data(), b.data(), N_, C);
  Compare("layernorm", "fwd", kFp32Tol, {out, mean, rstd}, [&] {
    float *d = Garbage(N_ * C), *m = Garbage(N_), *r = Garbage(N_);
    gpu_->LayernormForward(d, m, r, Up(inp), Up(w), Up(b), N_, C);
    return Outputs{Down(d, N_ * C), Down(m, N_), Down(r, N_)};
  });

  const std::vector<float> dout = Random(N_ * C);
  const std::vector<float> dinp0 = Random(N_ * C), dw0 = Random(C),
                           db0 = Random(C);
  std::vector<float> dinp = dinp0, dw = dw0, db = db0;
  cpu_->LayernormBackward(dinp.data(), dw.data(), db.data(), dout.data(),
                          inp.data(), w.data(), mean.data(), rstd.data(), N_,
                          C);
  Compare("layernorm", "bwd", kFp32Tol, {dinp, dw, db}, [&] {
    float *g_inp = Up(dinp0), *g_w = Up(dw0), *g_b = Up(db0);
    gpu_->LayernormBackward(g_inp, g_w, g_b, Up(dout), Up(inp), Up(w), Up(mean),
                            Up(rstd), N_, C);
    return Outputs{Down(g_inp, N_ * C), Down(g_w, C), Down(g_b, C)};
  });
}

void Parity::Matmul(const char* name, int K, int OC, bool bias) {
  const double tol =
      precision_ == CudaPrecision::kBf16 ? kBf16MatmulTol : kFp32Tol;
  const std::vector<float> inp = Random(N_ * K),
                           w = Random(int64_t{OC} * K, 1.0f / std::sqrt(K)),
                           b = bias ? Random(OC) : std::vector<float>();
  std::vector<float> out(N_ * OC);
  cpu_->MatmulForward(out.data(), inp.data(), w.data(),
                      bias ? b.data() : nullptr, N_, K, OC);
  Compare(name, "fwd", tol, {out}, [&] {
    float* d = Garbage(N_ * OC);
    gpu_->MatmulForward(d, Up(inp), Up(w), bias ? Up(b) : nullptr, N_, K, OC);
    return Outputs{Down(d, N_ * OC)};
  });

  const std::vector<float> dout = Random(N_ * OC);
  const std::vector<float> dw0 = Random(w.size()),
                           db0 = bias ? Random(OC) : std::vector<float>();
  std::vector<float> dinp(N_ * K), dw = dw0, db = db0;
  cpu_->MatmulBackward(dinp.data(), dw.data(), bias ? db.data() : nullptr,
                       dout.data(), inp.data(), w.data(), N_, K, OC);
  Compare(name, "bwd", tol, {dinp, dw, db}, [&] {
    float *g_inp = Garbage(N_ * K), *g_w = Up(dw0);
    float* g_b = bias ? Up(db0) : nullptr;
    gpu_->MatmulBackward(g_inp, g_w, g_b, Up(dout), Up(inp), Up(w), N_, K, OC);
    return Outputs{Down(g_inp, N_ * K), Down(g_w, dw0.size()),
                   bias ? Down(g_b, OC) : std::vector<float>()};
  });
}

void Parity::Attention() {
  const std::string label =
      attention_ == CudaAttention::kPerEntry ? "attention_per_entry"
      : attention_blocks_ > 0
          ? "attention_blocks" + std::to_string(attention_blocks_)
          : "attention";
  const char* name = label.c_str();
  const int B = s_.B, T = s_.T, C = s_.C, NH = s_.NH;
  const int64_t n_att = int64_t{B} * NH * T * T;
  const std::vector<float> qkv = Random(N_ * 3 * C);
  std::vector<float> out(N_ * C), att(n_att);
  cpu_->AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  Compare(name, "fwd", kFp32Tol, {out, att}, [&] {
    float *d = Garbage(N_ * C), *a = Garbage(n_att);
    gpu_->AttentionForward(d, a, Up(qkv), B, T, C, NH);
    return Outputs{Down(d, N_ * C), Down(a, n_att)};
  });

  const std::vector<float> dout = Random(N_ * C);
  std::vector<float> dqkv(N_ * 3 * C);
  cpu_->AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B,
                          T, C, NH);
  Compare(name, "bwd", kFp32Tol, {dqkv}, [&] {
    float* d = Garbage(N_ * 3 * C);
    gpu_->AttentionBackward(d, Up(dout), Up(qkv), Up(att), B, T, C, NH);
    return Outputs{Down(d, N_ * 3 * C)};
  });
}

// In place on the GPU (out == inp, dinp == dout), as the model calls them.
void Parity::Gelu() {
  const int64_t n = N_ * 4 * s_.C;
  const std::vector<float> inp = Random(n, 2.0f), dout = Random(n);
  std::vector<float> out(n), dinp(n);
  cpu_->GeluForward(out.data(), inp.data(), n);
  cpu_->GeluBackward(dinp.data(), inp.data(), dout.data(), n);
  Compare("gelu", "fwd", kFp32Tol, {out}, [&] {
    float* d = Up(inp);
    gpu_->GeluForward(d, d, n);
    return Outputs{Down(d, n)};
  });
  Compare("gelu", "bwd", kFp32Tol, {dinp}, [&] {
    float* d = Up(dout);
    gpu_->GeluBackward(d, Up(inp), d, n);
    return Outputs{Down(d, n)};
  });
}

void Parity::Residual() {
  const int64_t n = N_ * s_.C;
  const std::vector<float> a = Random(n), b = Random(n), dout = Random(n);
  std::vector<float> out(n), da = a, db = b;
  cpu_->ResidualForward(out.data(), a.data(), b.data(), n);
  cpu_->ResidualBackward(da.data(), db.data(), dout.data(), n);
  Compare("residual", "fwd", kFp32Tol, {out}, [&] {
    float* d = Up(a);
    gpu_->ResidualForward(d, d, Up(b), n);  // out == a
    return Outputs{Down(d, n)};
  });
  Compare("residual", "bwd", kFp32Tol, {da, db}, [&] {
    float *g_a = Up(a), *g_b = Up(b);
    gpu_->ResidualBackward(g_a, g_b, Up(dout), n);
    return Outputs{Down(g_a, n), Down(g_b, n)};
  });
}

// Padding columns hold large logits that must not count; the backward runs
// in place on the GPU (dlogits == logits), as the model calls it.
void Parity::CrossEntropy() {
  const int V = s_.V, Vp = s_.Vp;
  std::vector<float> logits = Random(N_ * Vp, 2.0f);
  for (int64_t r = 0; r < N_; ++r) {
    std::fill(logits.begin() + r * Vp + V, logits.begin() + (r + 1) * Vp, 50.f);
  }
  const std::vector<int> targets = Tokens(N_, V);
  const float dloss = 1.0f / N_;
  std::vector<float> losses(N_), dlogits(N_ * Vp);
  cpu_->CrossEntropyForward(losses.data(), logits.data(), targets.data(), N_, V,
                            Vp);
  cpu_->CrossEntropyBackward(dlogits.data(), logits.data(), targets.data(),
                             dloss, N_, V, Vp);
  Compare("crossentropy", "fwd", kFp32Tol, {losses}, [&] {
    float* d = Garbage(N_);
    gpu_->CrossEntropyForward(d, Up(logits), Up(targets), N_, V, Vp);
    return Outputs{Down(d, N_)};
  });
  Compare("crossentropy", "bwd", kFp32Tol, {dlogits}, [&] {
    float* d = Up(logits);
    gpu_->CrossEntropyBackward(d, d, Up(targets), dloss, N_, V, Vp);
    return Outputs{Down(d, N_ * Vp)};
  });
}

void Parity::Zero() {
  const int64_t n = N_ * s_.C + 3;
  const std::vector<float> x = Random(n);
  Compare("zero", "fwd", 0.0, {std::vector<float>(n, 0.0f)}, [&] {
    float* d = Up(x);
    gpu_->Zero(d, n);
    return Outputs{Down(d, n)};
  });
}

TEST(CudaKernelsTest, ParityWithCpuKernels) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  for (const Shape& s : kShapes) {
    for (CudaPrecision p : {CudaPrecision::kFp32, CudaPrecision::kBf16}) {
      SCOPED_TRACE(std::string(s.name) + " " + CudaPrecisionName(p));
      Parity t(s, p);
      ASSERT_TRUE(t.Init());
      t.Encoder();
      t.Layernorm();
      t.Matmul("matmul_qkv", s.C, 3 * s.C, /*bias=*/true);
      t.Matmul("matmul_fcproj", 4 * s.C, s.C, /*bias=*/true);
      t.Matmul("matmul_lmhead", s.C, s.Vp, /*bias=*/false);
      t.Attention();
      t.Gelu();
      t.Residual();
      t.CrossEntropy();
      t.Zero();
    }
    // Attention one batch entry at a time (CudaAttention::kPerEntry).
    Parity e(s, CudaPrecision::kFp32, CudaAttention::kPerEntry);
    ASSERT_TRUE(e.Init());
    e.Attention();
    // Causal row blocks (causal_plan.h), the last one shorter for T = 37.
    Parity blocks(s, CudaPrecision::kFp32, CudaAttention::kBatched, 3);
    ASSERT_TRUE(blocks.Init());
    blocks.Attention();
  }
  // A longer sequence: 4 blocks of 64 rows (the default for T = 1024) and
  // 7 uneven ones against the CPU.
  const Shape longer{"B2T256C64", 2, 256, 64, 2, 77, 96};
  for (int n : {4, 7}) {
    SCOPED_TRACE(std::string(longer.name) + " blocks " + std::to_string(n));
    Parity t(longer, CudaPrecision::kFp32, CudaAttention::kBatched, n);
    ASSERT_TRUE(t.Init());
    t.Attention();
  }
}

// Calls beyond the scratch sized by the options record OUT_OF_RANGE without
// touching memory (null pointers here), and later calls do nothing.
TEST(CudaKernelsTest, CallsBeyondCapacityAreRecorded) {
  if (const std::string why = NoDevice(); !why.empty()) GTEST_SKIP() << why;
  CudaKernelsOptions o;
  o.B = 1, o.T = 8, o.C = 16, o.NH = 2, o.Vp = 32;
  o.precision = CudaPrecision::kBf16;
  auto k = CudaKernels::Create(o);
  ASSERT_TRUE(k.ok()) << k.status();
  std::printf("%s\n", (*k)->Name());
  EXPECT_TRUE((*k)->status().ok());
  (*k)->MatmulForward(nullptr, nullptr, nullptr, nullptr, 1000, 16, 64);
  EXPECT_EQ((*k)->status().code(), absl::StatusCode::kOutOfRange)
      << (*k)->status();
  (*k)->Zero(nullptr, 1 << 20);  // would fault if it ran
  EXPECT_EQ((*k)->status().code(), absl::StatusCode::kOutOfRange);

  o.precision = CudaPrecision::kFp32;
  auto a = CudaKernels::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->AttentionBackward(nullptr, nullptr, nullptr, nullptr, 1, 16, 16, 2);
  EXPECT_EQ((*a)->status().code(), absl::StatusCode::kOutOfRange)
      << (*a)->status();
}

#endif  // ZEROSHARD_HAVE_CUDA

}  // namespace
}  // namespace zeroshard::gpt2
