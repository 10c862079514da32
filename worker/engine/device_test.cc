// The device path of the engine (gpt2::EngineModel with a Device) on CI's
// stand-in for a GPU, the host-emulated device: the model's parameters,
// gradients and activations in "device" memory, parameters copied up per
// unit as the engine's unit hook makes them available (stages 1-3) or all
// at each forward (stage 0), gradients copied down per unit as backward
// finishes them, every copy checked against the live allocations. Every
// stage gives the CPU engine's bits (parameters, every micro-batch's loss,
// the clip), with W = 2 ranks and K = 2 real servers, fp32 and bf16.
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/engine/testing.h"

namespace zeroshard::engine {
namespace {

struct Variant {
  int stage;
  bool offload;
  Precision precision;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << "stage " << v.stage << (v.offload ? " + offload " : " ")
      << PrecisionName(v.precision);
}

class DeviceTest : public ::testing::TestWithParam<Variant> {};

TEST_P(DeviceTest, HostEmulatedDeviceGivesTheCpuBits) {
  const Variant v = GetParam();
  train::TrainSpec spec = TinySpec(v.stage, v.offload, "device_test");
  spec.steps = 4;
  spec.zero.precision = v.precision;
  auto cpu = RunInProcess(spec, 2, 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  spec.device = "host-emulated";
  auto dev = RunInProcess(spec, 2, 2);
  ASSERT_TRUE(dev.ok()) << dev.status();
  for (int r = 0; r < 2; ++r) {
    const train::TrainResult &a = (*cpu)[r], &b = (*dev)[r];
    EXPECT_EQ(FirstDifference(b.params, a.params), -1) << "rank " << r;
    ASSERT_EQ(b.micro_losses.size(), a.micro_losses.size());
    for (size_t s = 0; s < a.micro_losses.size(); ++s) {
      EXPECT_EQ(b.micro_losses[s], a.micro_losses[s]) << "step " << s;
      EXPECT_EQ(b.stats[s].clip_coef, a.stats[s].clip_coef) << "step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, DeviceTest,
                         ::testing::Values(Variant{0, false, Precision::kFp32},
                                           Variant{1, false, Precision::kFp32},
                                           Variant{2, false, Precision::kFp32},
                                           Variant{3, false, Precision::kFp32},
                                           Variant{3, true, Precision::kFp32},
                                           Variant{2, false, Precision::kBf16},
                                           Variant{3, false, Precision::kBf16}),
                         [](const auto& info) {
                           return "stage" + std::to_string(info.param.stage) +
                                  (info.param.offload ? "_offload" : "") +
                                  (info.param.precision == Precision::kBf16
                                       ? "_bf16"
                                       : "_fp32");
                         });

TEST(DeviceKindTest, UnknownDeviceIsRefusedByName) {
  train::TrainSpec spec = TinySpec(2, false, "device_kind_test");
  spec.device = "tpu";
  auto got = RunInProcess(spec, 1, 1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("'tpu'"), std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace zeroshard::engine
