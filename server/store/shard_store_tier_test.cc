// Pushes into the NVMe tier's gradient (through its GradWriter) against a
// store with RAM state: neighbouring ranges that share file chunks pushed
// concurrently, in wire chunks that do not line up with file chunks, some
// pushes breaking off halfway and being sent again. After each step the
// parameters are bit-identical to the RAM store's, which saw only the
// pushes that finished.
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/env/mem_env.h"
#include "common/model_spec.h"
#include "gtest/gtest.h"
#include "server/storage/nvme_tier.h"
#include "server/store/shard_store.h"

namespace zeroshard {
namespace {

constexpr uint64_t kElements = 40000;  // ~39 chunks of 1024 fp32
constexpr uint64_t kRanges = 16;
constexpr char kJob[] = "tier";

// Two tensors in two parameter groups, so tiles and group spans split
// inside the tier's chunks too.
v1::ModelSpec Spec(uint32_t slots) {
  v1::ModelSpec spec;
  spec.set_job_id(kJob);
  spec.set_num_servers(1);
  spec.set_alignment(8);
  spec.set_serving_dtype(v1::DTYPE_BF16);
  spec.set_contributions_per_step(slots);
  const uint64_t sizes[] = {kElements - 1500, 1500};
  for (uint32_t i = 0; i < 2; ++i) {
    *spec.add_param_groups() = DefaultParamGroup(i == 0 ? 0.01 : 0.0);
    v1::TensorSpec* t = spec.add_tensors();
    t->set_name(i == 0 ? "w" : "b");
    t->add_shape(static_cast<int64_t>(sizes[i]));
    t->set_param_group(i);
  }
  return spec;
}

std::unique_ptr<ShardStore> NvmeStore(Env* env) {
  StoreOptions o;
  o.storage_name = "nvme";
  o.make_tier = [env](const storage::TierLayout& layout, ThreadPool* pool)
      -> absl::StatusOr<std::unique_ptr<storage::StorageTier>> {
    storage::NvmeOptions n;
    n.path = "/tier";
    n.env = env;
    n.pool = pool;
    n.block_size = 4096;
    n.sub_group_size = 6144;
    n.buffer_count = 3;
    n.queue_depth = 4;
    n.read_cache_bytes = 3 * 4096;
    auto t = storage::NvmeTier::Create(n, layout);
    if (!t.ok()) return t.status();
    return std::unique_ptr<storage::StorageTier>(std::move(*t));
  };
  return std::make_unique<ShardStore>(o);
}

float Grad(uint64_t step, uint32_t slot, uint64_t i) {
  return std::sin(0.001f * i + step + 0.5f * slot);
}

// Pushes slot `slot` of `step` as kRanges neighbouring ranges (8-aligned,
// not chunk-aligned), one thread each, in wire chunks of 1000 elements.
// With `breaks`, every third range is first sent halfway with junk and
// abandoned.
void PushStep(ShardStore* store, uint64_t step, uint32_t slot, bool breaks) {
  const uint64_t each = kElements / kRanges / 8 * 8;
  std::vector<std::thread> threads;
  std::vector<absl::Status> status(kRanges);
  for (uint64_t r = 0; r < kRanges; ++r) {
    threads.emplace_back([&, r] {
      const uint64_t b = r * each;
      const uint64_t e = r + 1 == kRanges ? kElements : b + each;
      v1::PushHeader h;
      h.set_job_id(kJob);
      h.set_offset(b);
      h.set_length(e - b);
      h.set_dtype(v1::DTYPE_FP32);
      h.set_step(step);
      h.set_slot(slot);
      std::vector<float> g(e - b), junk(e - b, 1e30f);
      for (uint64_t i = b; i < e; ++i) g[i - b] = Grad(step, slot, i);
      auto send = [&](const std::vector<float>& v, uint64_t n,
                      const std::string& key) -> absl::Status {
        h.set_idempotency_key(key);
        auto push = store->BeginPush(h);
        if (!push.ok()) return push.status();
        for (uint64_t o = 0; o < n; o += 1000) {
          const uint64_t len = std::min<uint64_t>(1000, n - o);
          absl::Status s = (*push)->AddChunk(v.data() + o, len * 4);
          if (!s.ok()) return s;
        }
        return n == v.size() ? (*push)->Finish() : absl::OkStatus();
      };
      const std::string key = absl::StrCat(step, "/", slot, "/", r);
      if (breaks && r % 3 == 0) {
        status[r] = send(junk, junk.size() / 2, key + "-broken");
        if (!status[r].ok()) return;
      }
      status[r] = send(g, g.size(), key);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
}

void Step(ShardStore* store, uint64_t step, uint32_t slots, bool breaks) {
  for (uint32_t s = 0; s < slots; ++s) PushStep(store, step, s, breaks);
  absl::StatusOr<PrepareResult> p = store->Prepare(kJob, 0, step);
  ASSERT_TRUE(p.ok() && p->complete) << p.status();
  v1::CommitStepRequest c;
  c.set_job_id(kJob);
  c.set_step(step);
  c.set_lr(1e-2);
  c.set_clip_coef(1.0);
  ASSERT_TRUE(store->Commit(c).ok());
}

std::vector<float> Params(ShardStore* store) {
  std::vector<float> p(kElements);
  uint64_t step = 0;
  EXPECT_TRUE(
      store->GatherInto(0, kElements, v1::DTYPE_FP32, p.data(), &step).ok());
  return p;
}

class ShardStoreTierTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(ShardStoreTierTest, BrokenAndConcurrentPushesMatchRam) {
  const uint32_t slots = GetParam();
  MemEnv env;
  ShardStore ram{StoreOptions()};
  std::unique_ptr<ShardStore> nvme = NvmeStore(&env);
  ASSERT_TRUE(ram.RegisterModel(Spec(slots)).ok());
  ASSERT_TRUE(nvme->RegisterModel(Spec(slots)).ok());
  for (uint64_t step = 0; step < 3; ++step) {
    Step(&ram, step, slots, false);
    Step(nvme.get(), step, slots, true);
    ASSERT_EQ(Params(&ram), Params(nvme.get())) << "step " << step;
  }
  EXPECT_GT(nvme->Stats().storage_bytes_written, 0u);
}

INSTANTIATE_TEST_SUITE_P(Slots, ShardStoreTierTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace zeroshard
