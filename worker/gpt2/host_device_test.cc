// HostEmulatedDevice: the checks that make it CI's stand-in for a GPU (a
// copy outside a live allocation, from device memory, or after Free fails
// and changes nothing; the first error sticks), and a GPT-2 model on it
// computing the CPU model's bits while its buffers stay on the "device".
#include "worker/gpt2/host_device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "worker/gpt2/config.h"
#include "worker/gpt2/model.h"

namespace zeroshard::gpt2 {
namespace {

TEST(HostDeviceTest, CopiesInsideLiveAllocationsOnly) {
  auto d = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d.ok()) << d.status();
  auto p = (*d)->Alloc(64);
  ASSERT_TRUE(p.ok());
  float* dev = static_cast<float*>(*p);
  std::vector<float> host(16, 1.5f), back(16, 0.0f);
  ASSERT_TRUE((*d)->ToDevice(dev, host.data(), 64).ok());
  ASSERT_TRUE((*d)->ToHost(back.data(), dev, 64).ok());
  EXPECT_EQ(back, host);
  ASSERT_TRUE((*d)->ToDevice(dev + 8, host.data(), 32).ok());  // a tail
  EXPECT_EQ((*d)->bytes_to_device(), 96u);
  EXPECT_EQ((*d)->bytes_to_host(), 64u);
  EXPECT_EQ((*d)->live_bytes(), 64u);
  EXPECT_TRUE((*d)->status().ok());
}

TEST(HostDeviceTest, CopyPastTheEndFailsAndSticks) {
  auto d = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> host(32, 2.0f);
  absl::Status s = (*d)->ToDevice(dev + 1, host.data(), 64);  // 4 bytes over
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("not inside a live allocation"), std::string::npos)
      << s;
  EXPECT_EQ(dev[1], 0.0f);  // nothing was written
  EXPECT_EQ((*d)->status(), s);
  // Sticky: a good copy now fails with the first error.
  EXPECT_EQ((*d)->ToDevice(dev, host.data(), 4), s);
}

TEST(HostDeviceTest, HostSideMustNotBeDeviceMemory) {
  auto d = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d.ok());
  float* a = static_cast<float*>(*(*d)->Alloc(64));
  float* b = static_cast<float*>(*(*d)->Alloc(64));
  absl::Status s = (*d)->ToHost(b, a, 64);  // "host" b is device memory
  EXPECT_NE(s.message().find("destination is device memory"), std::string::npos)
      << s;
}

TEST(HostDeviceTest, AsyncCopyArrivesOnlyByWaitCopy) {
  // With a lag the bytes are not there before WaitCopy: a caller that reads
  // early sees the old ones here, as it could on a GPU. No copy runs before
  // its lag has passed; what was looked at before then must be the old
  // state (checked only when this thread got there in time: on a loaded
  // machine it may not).
  const absl::Duration lag = absl::Milliseconds(50);
  auto d = HostEmulatedDevice::Create(1, lag);
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> host(16, 3.0f), back(16, 0.0f), back2(16, 0.0f);
  ASSERT_TRUE((*d)->ToDevice(dev, host.data(), 64).ok());
  const absl::Time issued = absl::Now();
  auto t1 = (*d)->ToHostAsync(back.data(), dev, 64);
  auto t2 = (*d)->ToHostAsync(back2.data(), dev + 8, 32);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_EQ(*t2, *t1 + 1);
  const bool done_early = (*d)->CopyDone(*t1);
  const float early = back[0];
  if (absl::Now() - issued < lag) {
    EXPECT_FALSE(done_early);
    EXPECT_EQ(early, 0.0f);
  }
  ASSERT_TRUE((*d)->WaitCopy(*t2).ok());  // and every copy before it
  EXPECT_GE(absl::Now() - issued, lag);   // not before its lag
  EXPECT_TRUE((*d)->CopyDone(*t1));
  EXPECT_EQ(back, host);
  EXPECT_EQ(back2[7], 3.0f);
  EXPECT_EQ(back2[8], 0.0f);
  EXPECT_EQ((*d)->bytes_to_host(), 96u);
  EXPECT_EQ((*d)->WaitCopy(*t2 + 1).code(),
            absl::StatusCode::kInvalidArgument);  // never issued
}

TEST(HostDeviceTest, SynchronousCopyAndFreeWaitForAsyncCopies) {
  auto d = HostEmulatedDevice::Create(1, absl::Milliseconds(20));
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> host(16, 5.0f), back(16, 0.0f), other(16, 0.0f);
  ASSERT_TRUE((*d)->ToDevice(dev, host.data(), 64).ok());
  ASSERT_TRUE((*d)->ToHostAsync(back.data(), dev, 64).ok());
  ASSERT_TRUE((*d)->ToHost(other.data(), dev, 64).ok());
  EXPECT_EQ(back, host);  // the synchronous copy waited for it
  ASSERT_TRUE((*d)->ToHostAsync(back.data(), dev, 64).ok());
  (*d)->Free(dev);  // waits, then frees: no read of freed memory
  EXPECT_TRUE((*d)->status().ok());
}

TEST(HostDeviceTest, AsyncCopyChecksBoundsAndItsSource) {
  auto d = HostEmulatedDevice::Create(1, absl::Milliseconds(50));
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> back(32, 0.0f);
  // Out of bounds: an error at once, nothing queued.
  absl::StatusOr<uint64_t> bad = (*d)->ToHostAsync(back.data(), dev + 1, 64);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(bad.status().message().find("not inside a live allocation"),
            std::string::npos)
      << bad.status();

  // A "kernel" after the copy writes its source before the copy ran (the
  // write is in time when it came within the lag; on a loaded machine this
  // thread may be late, then the case is tried again).
  const absl::Duration lag = absl::Milliseconds(200);
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::fill(back.begin(), back.end(), 0.0f);
    auto e = HostEmulatedDevice::Create(1, lag);
    ASSERT_TRUE(e.ok());
    float* src = static_cast<float*>(*(*e)->Alloc(64));
    const absl::Time issued = absl::Now();
    auto t = (*e)->ToHostAsync(back.data(), src, 64);
    ASSERT_TRUE(t.ok());
    src[3] = 7.0f;
    const bool in_time = absl::Now() - issued < lag;
    absl::Status s = (*e)->WaitCopy(*t);
    if (!in_time) continue;
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
    EXPECT_NE(s.message().find("changed between ToHostAsync and the copy"),
              std::string::npos)
        << s;
    EXPECT_EQ(back[3], 0.0f);      // not copied
    EXPECT_EQ((*e)->status(), s);  // sticks
    return;
  }
  GTEST_SKIP() << "this thread never wrote the source within " << lag
               << " of the copy's issue in 10 tries (a loaded machine)";
}

// A copy up is in place when ToDeviceAsync returns (the CPU kernels read
// it at once), shares the tickets of the copies down, and its source is
// watched until WaitCopy (or a synchronous copy): a write before then is
// an error naming the copy; one after is not.
TEST(HostDeviceTest, AsyncCopyUpWatchesItsSourceUntilWaited) {
  auto d = HostEmulatedDevice::Create(1, absl::Milliseconds(1));
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> host(16, 3.0f), back(16, 0.0f);
  auto mark = (*d)->Mark(0);
  ASSERT_TRUE(mark.ok()) << mark.status();
  EXPECT_EQ(*mark, 1u);
  EXPECT_EQ(*(*d)->Mark(*mark), *mark);  // recorded again, same id
  auto up = (*d)->ToDeviceAsync(dev, host.data(), 64, *mark);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_EQ(dev[15], 3.0f);
  EXPECT_EQ((*d)->bytes_to_device(), 64u);
  auto down = (*d)->ToHostAsync(back.data(), dev, 64);
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(*down, *up + 1);
  ASSERT_TRUE((*d)->WaitCopy(*down).ok());  // waits for the copy up too
  host[0] = 9.0f;                           // allowed now
  EXPECT_EQ(back[0], 3.0f);
  ASSERT_TRUE((*d)->status().ok());

  // Out of bounds or from device memory: an error at once.
  EXPECT_EQ((*d)->ToDeviceAsync(dev + 1, host.data(), 64, 0).status().code(),
            absl::StatusCode::kInternal);
  auto e = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(e.ok());
  float* a = static_cast<float*>(*(*e)->Alloc(64));
  float* b = static_cast<float*>(*(*e)->Alloc(64));
  EXPECT_NE((*e)->ToDeviceAsync(a, b, 64, 0)
                .status()
                .message()
                .find("the source is device memory"),
            std::string::npos);

  // The source written before WaitCopy.
  auto f = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(f.ok());
  float* g = static_cast<float*>(*(*f)->Alloc(64));
  auto t = (*f)->ToDeviceAsync(g, host.data(), 64, 0);
  ASSERT_TRUE(t.ok());
  host[5] = -1.0f;
  absl::Status s = (*f)->WaitCopy(*t);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("source of copy 1 to the device"),
            std::string::npos)
      << s;
  EXPECT_FALSE((*f)->status().ok());  // the device is unusable after it

  // ... or before a synchronous copy, which waits for it.
  auto h = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(h.ok());
  float* k = static_cast<float*>(*(*h)->Alloc(64));
  ASSERT_TRUE((*h)->ToDeviceAsync(k, host.data(), 64, 0).ok());
  host[6] = -2.0f;
  EXPECT_FALSE((*h)->ToHost(back.data(), k, 64).ok());
}

// A mark that was never made is refused by name, by Mark and by a copy up
// that would wait for it, and the device stays usable.
TEST(HostDeviceTest, UnknownMarkIsRefused) {
  auto d = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d.ok());
  float* dev = static_cast<float*>(*(*d)->Alloc(64));
  std::vector<float> host(16, 1.0f);
  absl::Status s = (*d)->Mark(3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("mark 3 was never made"), std::string::npos) << s;
  s = (*d)->ToDeviceAsync(dev, host.data(), 64, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("after mark 1"), std::string::npos) << s;
  EXPECT_EQ((*d)->bytes_to_device(), 0u);
  EXPECT_TRUE((*d)->status().ok());
}

TEST(HostDeviceTest, UseAfterFreeAndBadFreeFail) {
  auto d = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d.ok());
  void* p = *(*d)->Alloc(64);
  (*d)->Free(p);
  EXPECT_EQ((*d)->live_bytes(), 0u);
  float x = 1;
  EXPECT_FALSE((*d)->ToDevice(p, &x, sizeof x).ok());
  auto d2 = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(d2.ok());
  int stack = 0;
  (*d2)->Free(&stack);
  EXPECT_NE((*d2)->status().message().find("not a live allocation"),
            std::string::npos)
      << (*d2)->status();
}

// maxT 16, V 50, Vp 64, L 2, NH 2, C 16.
Config Tiny() { return Config{16, 50, 64, 2, 2, 16}; }

TEST(HostDeviceTest, ModelOnTheDeviceGivesTheCpuBits) {
  const Config c = Tiny();
  const int B = 2, T = 8;
  auto cpu = Model::Create(c, B, T, ModelOptions{});
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto dev = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(dev.ok());
  ModelOptions mo;
  mo.device = dev->get();
  auto on = Model::Create(c, B, T, mo);
  ASSERT_TRUE(on.ok()) << on.status();
  const size_t n = (*cpu)->params().size();
  // The model's own parameters and gradients live on the device.
  EXPECT_GE((*dev)->live_bytes(), 2 * n * sizeof(float));
  std::vector<float> init(n);
  for (size_t i = 0; i < n; ++i) {
    init[i] = 0.02f * (static_cast<int>((i * 7919) % 201) - 100) / 100;
  }
  std::copy(init.begin(), init.end(), (*cpu)->params().begin());
  ASSERT_TRUE(
      (*dev)
          ->ToDevice((*on)->params().data(), init.data(), n * sizeof(float))
          .ok());
  std::vector<int> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = (i * 13) % 50;
  for (int i = 0; i < B * T; ++i) tg[i] = (i * 7 + 3) % 50;
  auto l1 = (*cpu)->Forward(in, tg);
  auto l2 = (*on)->Forward(in, tg);
  ASSERT_TRUE(l1.ok() && l2.ok()) << l2.status();
  ASSERT_TRUE(std::isfinite(*l1));
  EXPECT_EQ(*l1, *l2);
  EXPECT_EQ(
      std::vector<float>((*cpu)->losses().begin(), (*cpu)->losses().end()),
      std::vector<float>((*on)->losses().begin(), (*on)->losses().end()));
  ASSERT_TRUE((*cpu)->Backward().ok());
  ASSERT_TRUE((*on)->Backward().ok());
  std::vector<float> g(n);
  ASSERT_TRUE(
      (*dev)->ToHost(g.data(), (*on)->grads().data(), n * sizeof(float)).ok());
  EXPECT_EQ(0,
            std::memcmp(g.data(), (*cpu)->grads().data(), n * sizeof(float)));
  // Bad tokens are refused before anything is copied.
  const uint64_t before = (*dev)->bytes_to_device();
  std::vector<int> bad = in;
  bad[3] = 50;
  EXPECT_EQ((*on)->Forward(bad, tg).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*dev)->bytes_to_device(), before);
  on->reset();
  EXPECT_EQ((*dev)->live_bytes(), 0u);  // the model freed what it took
  EXPECT_TRUE((*dev)->status().ok()) << (*dev)->status();
}

TEST(HostDeviceTest, DeviceAndKernelsTogetherAreRefused) {
  auto dev = HostEmulatedDevice::Create(1);
  ASSERT_TRUE(dev.ok());
  ModelOptions mo;
  mo.device = dev->get();
  mo.kernels = &(*dev)->kernels();
  EXPECT_EQ(Model::Create(Tiny(), 1, 4, mo).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zeroshard::gpt2
