// Model behaviour that needs no PyTorch: checkpointing gives the same bits,
// the gradient hook's order and ranges, caller-owned buffers, bad input.
// (Numerical parity with PyTorch: parity_test.cc.)
#include "worker/gpt2/model.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "worker/gpt2/reference_io.h"

namespace zeroshard::gpt2 {
namespace {

// C = 48 (not a multiple of 64), T = 70 (two attention row blocks, not a
// power of two), Vp > V.
Config SmallConfig() { return Config{80, 61, 64, 3, 4, 48}; }
constexpr int kB = 2, kT = 70;

struct StepResult {
  float loss = 0;
  std::vector<float> logits, grads;
  std::vector<GradSegment> segments;
};

StepResult RunStep(bool checkpoint, int threads,
                   absl::Span<float> params = {}) {
  const Config c = SmallConfig();
  ModelOptions opts;
  opts.threads = threads;
  opts.checkpoint = checkpoint;
  opts.params = params;
  auto model = Model::Create(c, kB, kT, opts);
  EXPECT_TRUE(model.ok()) << model.status();
  StepResult r;
  if (!model.ok()) return r;
  Model& m = **model;
  if (params.empty()) {
    const std::vector<float> p = RandomParams(m.layout(), 5);
    std::copy(p.begin(), p.end(), m.params().begin());
  }
  const std::vector<int> tok = RandomTokens(2 * kB * kT, c.vocab_size, 6);
  // Two steps with gradient accumulation: the second Forward/Backward reuses
  // every buffer (and, with checkpointing, the recompute path twice).
  for (int step = 0; step < 2; ++step) {
    auto loss =
        m.Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT});
    EXPECT_TRUE(loss.ok()) << loss.status();
    r.loss = *loss;
    r.logits.assign(m.logits().begin(), m.logits().end());
    r.segments.clear();
    EXPECT_TRUE(m.Backward([&](const GradSegment& s) {
                   r.segments.push_back(s);
                 }).ok());
  }
  r.grads.assign(m.grads().begin(), m.grads().end());
  return r;
}

TEST(ModelTest, CheckpointingGivesBitwiseIdenticalResults) {
  for (int threads : {1, 2}) {
    const StepResult plain = RunStep(false, threads);
    const StepResult ckpt = RunStep(true, threads);
    ASSERT_FALSE(plain.grads.empty());
    EXPECT_EQ(std::memcmp(&plain.loss, &ckpt.loss, sizeof(float)), 0);
    ASSERT_EQ(plain.logits.size(), ckpt.logits.size());
    EXPECT_EQ(std::memcmp(plain.logits.data(), ckpt.logits.data(),
                          plain.logits.size() * sizeof(float)),
              0);
    ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
    size_t first_diff = plain.grads.size();
    for (size_t i = 0; i < plain.grads.size(); ++i) {
      if (std::memcmp(&plain.grads[i], &ckpt.grads[i], sizeof(float)) != 0) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, plain.grads.size())
        << "threads " << threads << ": gradients differ first at flat index "
        << first_diff;
  }
}

TEST(ModelTest, GradHookReportsPartsInReverseOrderCoveringAllParams) {
  const StepResult r = RunStep(false, 2);
  auto layout = ParamLayout::Create(SmallConfig());
  ASSERT_TRUE(layout.ok());
  const int L = SmallConfig().num_layers;
  ASSERT_EQ(r.segments.size(), static_cast<size_t>(L + 2));
  EXPECT_EQ(r.segments[0].part, GradSegment::Part::kFinalNorm);
  EXPECT_EQ(r.segments[0].range, layout->FinalNormRange());
  for (int i = 0; i < L; ++i) {
    const GradSegment& s = r.segments[1 + i];
    EXPECT_EQ(s.part, GradSegment::Part::kBlock);
    EXPECT_EQ(s.layer, L - 1 - i);
    EXPECT_EQ(s.range, layout->LayerRange(L - 1 - i));
  }
  EXPECT_EQ(r.segments.back().part, GradSegment::Part::kEmbeddings);
  EXPECT_EQ(r.segments.back().range, layout->EmbeddingRange());
  // Announced in reverse memory order, back to back: they tile the space.
  uint64_t end = layout->num_params();
  for (const GradSegment& s : r.segments) {
    EXPECT_EQ(s.range.end, end);
    end = s.range.begin;
  }
  EXPECT_EQ(end, 0u);
}

TEST(ModelTest, GradientsAreFinalWhenAnnounced) {
  const Config c = SmallConfig();
  ModelOptions opts;
  opts.threads = 2;
  auto model = Model::Create(c, kB, kT, opts);
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  const std::vector<float> p = RandomParams(m.layout(), 5);
  std::copy(p.begin(), p.end(), m.params().begin());
  const std::vector<int> tok = RandomTokens(2 * kB * kT, c.vocab_size, 6);
  ASSERT_TRUE(
      m.Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT}).ok());
  std::vector<float> snapshot(m.grads().size());
  ASSERT_TRUE(m.Backward([&](const GradSegment& s) {
                 std::copy(m.grads().begin() + s.range.begin,
                           m.grads().begin() + s.range.end,
                           snapshot.begin() + s.range.begin);
               }).ok());
  EXPECT_EQ(std::memcmp(snapshot.data(), m.grads().data(),
                        snapshot.size() * sizeof(float)),
            0);
}

TEST(ModelTest, CallerOwnedParametersAreUsedInPlace) {
  auto layout = ParamLayout::Create(SmallConfig());
  ASSERT_TRUE(layout.ok());
  std::vector<float> params = RandomParams(*layout, 5);
  const StepResult owned = RunStep(false, 2);
  const StepResult borrowed = RunStep(false, 2, absl::MakeSpan(params));
  EXPECT_EQ(owned.loss, borrowed.loss);
  EXPECT_EQ(owned.grads, borrowed.grads);
}

// The parameter hook brackets every read: with each part's parameters
// present only between kNeeded and kReleased (NaN otherwise), loss and
// gradients keep their bits, with and without checkpointing; the events
// follow model.h's sequence; a hook error stops the call.
TEST(ModelTest, ParamHookBracketsEveryParameterRead) {
  const Config c = SmallConfig();
  auto layout = ParamLayout::Create(c);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> init = RandomParams(*layout, 5);
  const std::vector<int> tok = RandomTokens(2 * kB * kT, c.vocab_size, 6);
  for (const bool checkpoint : {false, true}) {
    const StepResult want = RunStep(checkpoint, 2);
    std::vector<float> params(init.size(), std::nanf(""));
    std::vector<ParamEvent> events;
    ModelOptions opts;
    opts.threads = 2;
    opts.checkpoint = checkpoint;
    opts.params = absl::MakeSpan(params);
    opts.param_hook = [&](const ParamEvent& e) {
      events.push_back(e);
      const bool need = e.kind == ParamEvent::Kind::kNeeded;
      for (uint64_t i = e.range.begin; i < e.range.end; ++i) {
        params[i] = need ? init[i] : std::nanf("");
      }
      return absl::OkStatus();
    };
    auto model = Model::Create(c, kB, kT, opts);
    ASSERT_TRUE(model.ok()) << model.status();
    Model& m = **model;
    float loss = 0;
    for (int step = 0; step < 2; ++step) {
      events.clear();
      auto l =
          m.Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT});
      ASSERT_TRUE(l.ok()) << l.status();
      loss = *l;
      ASSERT_TRUE(m.Backward().ok());
    }
    EXPECT_EQ(loss, want.loss);
    EXPECT_EQ(std::vector<float>(m.grads().begin(), m.grads().end()),
              want.grads);
    // need/release pairs: emb, blocks 0..L-1, (fn, emb) twice, blocks L-1..0.
    const int L = c.num_layers;
    using P = GradSegment::Part;
    std::vector<std::pair<P, int>> needs;
    for (const ParamEvent& e : events) {
      if (e.kind == ParamEvent::Kind::kNeeded)
        needs.push_back({e.part, e.layer});
    }
    std::vector<std::pair<P, int>> expect = {{P::kEmbeddings, -1}};
    for (int l = 0; l < L; ++l) expect.push_back({P::kBlock, l});
    for (int i = 0; i < 2; ++i) {
      expect.push_back({P::kFinalNorm, -1});
      expect.push_back({P::kEmbeddings, -1});
    }
    for (int l = L - 1; l >= 0; --l) expect.push_back({P::kBlock, l});
    EXPECT_EQ(needs, expect);
    EXPECT_EQ(events.size(), 2 * expect.size());
  }
  ModelOptions failing;
  failing.param_hook = [](const ParamEvent&) {
    return absl::UnavailableError("no parameters");
  };
  auto model = Model::Create(c, kB, kT, failing);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(
      (*model)
          ->Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT})
          .status()
          .code(),
      absl::StatusCode::kUnavailable);
  EXPECT_EQ((*model)->Backward().code(), absl::StatusCode::kFailedPrecondition);
}

// A placed model (ModelOptions::placed) reads and accumulates each part
// where the hook put it: parts in buffers of their own, placed at their
// first need, give the flat model's loss and gradients (two passes
// accumulating); a part never placed fails the pass naming it, and a
// placed model takes no flat buffers.
TEST(ModelTest, PlacedPartsAreReadAndAccumulatedWhereTheyArePut) {
  const Config c = SmallConfig();
  auto layout = ParamLayout::Create(c);
  ASSERT_TRUE(layout.ok());
  const std::vector<float> init = RandomParams(*layout, 5);
  const std::vector<int> tok = RandomTokens(2 * kB * kT, c.vocab_size, 6);
  const StepResult want = RunStep(false, 2);
  const int L = c.num_layers;
  std::vector<std::vector<float>> p(L + 2), g(L + 2);
  std::vector<Range> ranges(L + 2);
  ModelOptions opts;
  opts.threads = 2;
  opts.placed = true;
  Model* model = nullptr;
  opts.param_hook = [&](const ParamEvent& e) {
    const int i = e.part == GradSegment::Part::kEmbeddings  ? 0
                  : e.part == GradSegment::Part::kFinalNorm ? L + 1
                                                            : 1 + e.layer;
    if (e.kind == ParamEvent::Kind::kNeeded && p[i].empty()) {
      ranges[i] = e.range;
      p[i].assign(init.begin() + e.range.begin, init.begin() + e.range.end);
      g[i].assign(e.range.size(), 0.0f);
      model->Place(e.part, e.layer, p[i].data(), g[i].data());
    }
    return absl::OkStatus();
  };
  auto m = Model::Create(c, kB, kT, opts);
  ASSERT_TRUE(m.ok()) << m.status();
  model = m->get();
  EXPECT_TRUE(model->params().empty());
  float loss = 0;
  for (int step = 0; step < 2; ++step) {
    auto l =
        model->Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT});
    ASSERT_TRUE(l.ok()) << l.status();
    loss = *l;
    ASSERT_TRUE(model->Backward().ok());
  }
  EXPECT_EQ(loss, want.loss);
  std::vector<float> grads(layout->num_params());
  for (int i = 0; i < L + 2; ++i) {
    std::copy(g[i].begin(), g[i].end(), grads.begin() + ranges[i].begin);
  }
  EXPECT_EQ(grads, want.grads);
  model->ZeroGrad();  // the placed parts' gradients
  for (int i = 0; i < L + 2; ++i) {
    EXPECT_EQ(g[i], std::vector<float>(g[i].size(), 0.0f)) << "part " << i;
  }

  // Block 1 taken away: the next pass stops at its need, naming it.
  model->Place(GradSegment::Part::kBlock, 1, nullptr, nullptr);
  auto l =
      model->Forward({tok.data(), kB * kT}, {tok.data() + kB * kT, kB * kT});
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("parameters of part 2"),
            std::string::npos)
      << l.status();

  // Without a hook nothing places the parts: the first need says so.
  ModelOptions bare;
  bare.placed = true;
  auto unplaced = Model::Create(c, kB, kT, bare);
  ASSERT_TRUE(unplaced.ok()) << unplaced.status();
  l = (*unplaced)->Forward({tok.data(), kB * kT},
                           {tok.data() + kB * kT, kB * kT});
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("parameters of part 0"),
            std::string::npos)
      << l.status();

  ModelOptions both = opts;
  std::vector<float> flat(layout->num_params());
  both.params = absl::MakeSpan(flat);
  EXPECT_EQ(Model::Create(c, kB, kT, both).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, CreateRejectsBadShapesAndBuffers) {
  const Config c = SmallConfig();
  ModelOptions opts;
  struct Bad {
    int B, T;
    const char* needle;
  } bad[] = {{0, 10, "B=0"},
             {2, 0, "T=0"},
             {2, c.max_seq_len + 1, "max_seq_len"},
             {INT_MAX, 2, "exceeds"}};
  for (const Bad& b : bad) {
    auto m = Model::Create(c, b.B, b.T, opts);
    ASSERT_FALSE(m.ok()) << b.B << " " << b.T;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(b.needle), std::string::npos)
        << m.status();
  }
  // Attention probabilities B*NH*T*T overflow int64 (the config is valid).
  const Config huge{1 << 20, 10, 10, 1, 1 << 21, 1 << 21};
  auto m = Model::Create(huge, 1, 1 << 20, opts);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("overflow"), std::string::npos)
      << m.status();
  // Heads that do not divide channels: ValidateConfig's error.
  EXPECT_FALSE(Model::Create(Config{80, 61, 64, 3, 5, 48}, 2, 8, opts).ok());
  std::vector<float> short_buffer(10);
  opts.params = absl::MakeSpan(short_buffer);
  m = Model::Create(c, 2, 8, opts);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("params buffer"), std::string::npos);
  opts.threads = 0;
  opts.params = {};
  EXPECT_FALSE(Model::Create(c, 2, 8, opts).ok());
}

TEST(ModelTest, ForwardRejectsBadTokensNamingThePosition) {
  const Config c = SmallConfig();
  auto model = Model::Create(c, 2, 5, ModelOptions{});
  ASSERT_TRUE(model.ok());
  Model& m = **model;
  std::vector<int> in(10, 1), tgt(10, 2);
  in[7] = c.vocab_size;  // b=1, t=2
  auto r = m.Forward(in, tgt);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("inputs token 61 at position (b=1, t=2)"),
            std::string::npos)
      << r.status();
  in[7] = 1;
  tgt[4] = -3;
  r = m.Forward(in, tgt);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("targets token -3 at position (b=0, "
                                      "t=4)"),
            std::string::npos)
      << r.status();
  EXPECT_FALSE(m.Forward({in.data(), 9}, tgt).ok());
  EXPECT_FALSE(m.Forward(in, {tgt.data(), 11}).ok());
  // Nothing ran: no loss to backpropagate.
  EXPECT_EQ(m.Backward().code(), absl::StatusCode::kFailedPrecondition);
  // Inference only (no targets): logits, but no backward.
  tgt[4] = 0;
  ASSERT_TRUE(m.Forward(in, {}).ok());
  EXPECT_EQ(m.logits().size(), size_t{10} * c.padded_vocab_size);
  EXPECT_EQ(m.Backward().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.Forward(in, tgt).ok());
  EXPECT_TRUE(m.Backward().ok());
  EXPECT_EQ(m.Backward().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace zeroshard::gpt2
