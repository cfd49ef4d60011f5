// The pure half of the pipeline schedules: pipeline_actions against orders
// derived by hand from Megatron's algorithm, the activation slots, and, over
// many shapes, that all ranks' orders together complete with non-blocking
// sends and blocking receives, each receive getting the message it expects.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "common/errors.h"
#include "parallel/pipeline_schedule.h"

namespace mtrain::parallel {
namespace {

// "F<chunk>.<microbatch>@<slot>" per action, space-separated.
std::string str(const std::vector<PipeAction>& actions) {
  std::ostringstream s;
  for (const PipeAction& a : actions) {
    if (&a != &actions.front()) s << ' ';
    s << (a.op == PipeOp::kForward ? 'F' : 'B') << a.chunk << '.' << a.microbatch << '@' << a.slot;
  }
  return s.str();
}

std::string order(int stages, int stage, int chunks, int microbatches) {
  return str(pipeline_actions(PipelineShape{stages, stage, chunks, microbatches}));
}

std::vector<int> slots(int stages, int stage, int chunks, int microbatches) {
  return pipeline_activation_slots(PipelineShape{stages, stage, chunks, microbatches});
}

// 1F1B, 4 stages, 8 microbatches: stage s warms up with 3 - s forwards, then
// alternates, then drains; microbatch m lives in slot m mod (4 - s).
TEST(ParallelPipelineOrder, OneFOneBByHand) {
  EXPECT_EQ(order(4, 0, 1, 8),
            "F0.0@0 F0.1@1 F0.2@2 F0.3@3 B0.0@0 F0.4@0 B0.1@1 F0.5@1 B0.2@2 F0.6@2 B0.3@3 F0.7@3 B0.4@0 B0.5@1 "
            "B0.6@2 B0.7@3");
  EXPECT_EQ(order(4, 1, 1, 8),
            "F0.0@0 F0.1@1 F0.2@2 B0.0@0 F0.3@0 B0.1@1 F0.4@1 B0.2@2 F0.5@2 B0.3@0 F0.6@0 B0.4@1 F0.7@1 B0.5@2 "
            "B0.6@0 B0.7@1");
  EXPECT_EQ(order(4, 2, 1, 8),
            "F0.0@0 F0.1@1 B0.0@0 F0.2@0 B0.1@1 F0.3@1 B0.2@0 F0.4@0 B0.3@1 F0.5@1 B0.4@0 F0.6@0 B0.5@1 F0.7@1 "
            "B0.6@0 B0.7@1");
  EXPECT_EQ(order(4, 3, 1, 8),
            "F0.0@0 B0.0@0 F0.1@0 B0.1@0 F0.2@0 B0.2@0 F0.3@0 B0.3@0 F0.4@0 B0.4@0 F0.5@0 B0.5@0 F0.6@0 B0.6@0 "
            "F0.7@0 B0.7@0");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(slots(4, s, 1, 8), std::vector<int>{4 - s});
}

// Fewer microbatches than stages: the warmup is capped at M.
TEST(ParallelPipelineOrder, OneFOneBFewMicrobatches) {
  EXPECT_EQ(order(4, 0, 1, 2), "F0.0@0 F0.1@1 B0.0@0 B0.1@1");
  EXPECT_EQ(order(4, 2, 1, 2), "F0.0@0 F0.1@1 B0.0@0 B0.1@1");
  EXPECT_EQ(order(4, 3, 1, 2), "F0.0@0 B0.0@0 F0.1@0 B0.1@0");
  EXPECT_EQ(order(3, 0, 1, 1), "F0.0@0 B0.0@0");
  for (int s = 0; s < 4; ++s) EXPECT_EQ(slots(4, s, 1, 2), std::vector<int>{std::min(4 - s, 2)});
}

// Interleaved, 2 stages x 2 chunks, 4 microbatches. Forward k: chunk
// (k mod 4) / 2, microbatch (k / 4) * 2 + k mod 2, i.e. c0m0 c0m1 c1m0 c1m1
// c0m2 c0m3 c1m2 c1m3; backward k: the same with the chunk reversed. Warmup:
// stage 0: (2-0-1)*2 + (2-1)*2 = 4, stage 1: 2.
TEST(ParallelPipelineOrder, InterleavedByHand) {
  EXPECT_EQ(order(2, 0, 2, 4),
            "F0.0@0 F0.1@1 F1.0@0 F1.1@1 F0.2@2 B1.0@0 F0.3@3 B1.1@1 F1.2@0 B0.0@0 F1.3@1 B0.1@1 B1.2@0 B1.3@1 "
            "B0.2@2 B0.3@3");
  EXPECT_EQ(order(2, 1, 2, 4),
            "F0.0@0 F0.1@1 F1.0@0 B1.0@0 F1.1@0 B1.1@0 F0.2@2 B0.0@0 F0.3@0 B0.1@1 F1.2@0 B1.2@0 F1.3@0 B1.3@0 "
            "B0.2@2 B0.3@0");
  EXPECT_EQ(slots(2, 0, 2, 4), (std::vector<int>{4, 2}));
  EXPECT_EQ(slots(2, 1, 2, 4), (std::vector<int>{3, 1}));
}

// 4 stages x 2 chunks, M = 4: stage 0's warmup (3*2 + 4 = 10) exceeds the 8
// forwards, so all forwards run first; the last stage warms up with 4.
TEST(ParallelPipelineOrder, InterleavedAllWarmup) {
  EXPECT_EQ(order(4, 0, 2, 4),
            "F0.0@0 F0.1@1 F0.2@2 F0.3@3 F1.0@0 F1.1@1 F1.2@2 F1.3@3 B1.0@0 B1.1@1 B1.2@2 B1.3@3 B0.0@0 B0.1@1 "
            "B0.2@2 B0.3@3");
  EXPECT_EQ(order(4, 3, 2, 4),
            "F0.0@0 F0.1@1 F0.2@2 F0.3@3 F1.0@0 B1.0@0 F1.1@0 B1.1@0 F1.2@0 B1.2@0 F1.3@0 B1.3@0 B0.0@0 B0.1@1 "
            "B0.2@2 B0.3@3");
  EXPECT_EQ(slots(4, 3, 2, 4), (std::vector<int>{4, 1}));
}

TEST(ParallelPipelineOrder, NoPipelining) {
  EXPECT_EQ(order(1, 0, 1, 3), "F0.0@0 B0.0@0 F0.1@0 B0.1@0 F0.2@0 B0.2@0");
  EXPECT_EQ(order(1, 0, 2, 2), "F0.0@0 F1.0@0 B1.0@0 B0.0@0 F0.1@0 F1.1@0 B1.1@0 B0.1@0");
  EXPECT_EQ(slots(1, 0, 2, 5), (std::vector<int>{1, 1}));
}

TEST(ParallelPipelineOrder, ForwardOnly) {
  EXPECT_EQ(str(pipeline_forward_only_actions({2, 1, 2, 4})),
            "F0.0@0 F0.1@0 F1.0@0 F1.1@0 F0.2@0 F0.3@0 F1.2@0 F1.3@0");
  EXPECT_EQ(str(pipeline_forward_only_actions({3, 0, 1, 3})), "F0.0@0 F0.1@0 F0.2@0");
  EXPECT_EQ(str(pipeline_forward_only_actions({1, 0, 2, 2})), "F0.0@0 F1.0@0 F0.1@0 F1.1@0");
}

// Chunks of one activation shape share a pool (a caching allocator reuses
// one chunk's freed activations for another's): with every chunk in one
// pool, stage s of the interleaved schedule holds Megatron's warm-up plus
// one, min((p - s - 1) * 2 + (v - 1) * p, M v) + 1 micro-batch chunks (at
// most all M v), where a pool per chunk sums each chunk's own peak: 144 at
// PP 8 x VP 12 on stage 0 (issue 24: Megatron's peak there is 103).
TEST(ParallelPipelineOrder, OnePoolHoldsMegatronsInFlightCount) {
  for (const auto& [p, v, m] :
       {std::tuple{8, 12, 16}, std::tuple{8, 12, 64}, std::tuple{4, 2, 4}, std::tuple{2, 3, 2}}) {
    for (int stage = 0; stage < p; ++stage) {
      PipelineShape shape{p, stage, v, m};
      int per_chunk = 0;
      for (int n : pipeline_activation_slots(shape)) per_chunk += n;
      shape.chunk_pool.assign(v, 0);
      const int warmup = std::min((p - stage - 1) * 2 + (v - 1) * p, m * v);
      EXPECT_EQ(pipeline_activation_slots(shape), std::vector<int>{std::min(warmup + 1, m * v)})
          << p << "x" << v << " M " << m << " stage " << stage;
      if (p == 8 && stage == 0) {
        EXPECT_EQ(per_chunk, 144);
        EXPECT_EQ(pipeline_activation_slots(shape)[0], 103);
      }
      // Every action's slot is its pool's, never shared by two live micro-batch chunks.
      std::map<int, std::pair<int, int>> owner;  // slot -> (chunk, microbatch)
      for (const PipeAction& a : pipeline_actions(shape)) {
        if (a.op == PipeOp::kForward) {
          EXPECT_TRUE(owner.emplace(a.slot, std::pair{a.chunk, a.microbatch}).second) << "slot " << a.slot;
        } else {
          EXPECT_EQ(owner[a.slot], (std::pair{a.chunk, a.microbatch}));
          owner.erase(a.slot);
        }
      }
    }
  }
  // The last stage's loss chunk in a pool of its own: two pools.
  PipelineShape last{4, 3, 2, 4};
  last.chunk_pool = {0, 1};
  EXPECT_EQ(pipeline_activation_slots(last), pipeline_activation_slots(PipelineShape{4, 3, 2, 4}));
}

TEST(ParallelPipelineOrder, UnsupportedShapes) {
  try {
    pipeline_actions({4, 0, 2, 6});
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "number of microbatches (6) is not divisible by pipeline-model-parallel-size (4) when using "
                 "interleaved schedule");
  }
  EXPECT_THROW(pipeline_forward_only_actions({2, 0, 3, 3}), ConfigError);
  for (const PipelineShape& bad : {PipelineShape{0, 0, 1, 1}, PipelineShape{2, 2, 1, 1}, PipelineShape{2, -1, 1, 1},
                                   PipelineShape{2, 0, 0, 2}, PipelineShape{2, 0, 1, 0}}) {
    try {
      pipeline_activation_slots(bad);
      ADD_FAILURE() << "expected an Error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ExitCode::kInternal) << e.what();
    }
  }
}

std::vector<PipelineShape> many_shapes() {
  std::vector<PipelineShape> shapes;
  for (int stages = 1; stages <= 6; ++stages) {
    for (int chunks = 1; chunks <= 4; ++chunks) {
      for (int m = 1; m <= 4 * stages + 1; ++m) {
        if (stages > 1 && chunks > 1 && m % stages != 0) continue;
        shapes.push_back(PipelineShape{stages, 0, chunks, m});
      }
    }
  }
  return shapes;
}

// Every (chunk, microbatch) runs forward then backward once, each chunk takes
// its microbatches in increasing order both ways (what makes the per-stream
// FIFO match), and a slot is never shared by two live microbatches.
TEST(ParallelPipelineOrder, InvariantsOverManyShapes) {
  for (PipelineShape shape : many_shapes()) {
    for (shape.stage = 0; shape.stage < shape.stages; ++shape.stage) {
      const std::vector<PipeAction> actions = pipeline_actions(shape);
      const std::vector<int> slot_count = pipeline_activation_slots(shape);
      ASSERT_EQ(actions.size(), 2u * shape.chunks * shape.microbatches);
      std::vector<int> next_forward(shape.chunks, 0), next_backward(shape.chunks, 0), live(shape.chunks, 0),
          peak(shape.chunks, 0);
      std::map<std::pair<int, int>, int> slot_owner;  // (chunk, slot) -> microbatch
      int bad = 0;
      for (const PipeAction& a : actions) {
        const bool fwd = a.op == PipeOp::kForward;
        bad += a.microbatch != (fwd ? next_forward : next_backward)[a.chunk]++;
        bad += a.slot < 0 || a.slot >= slot_count[a.chunk];
        if (fwd) {
          bad += !slot_owner.emplace(std::pair{a.chunk, a.slot}, a.microbatch).second;
          peak[a.chunk] = std::max(peak[a.chunk], ++live[a.chunk]);
        } else {
          bad += slot_owner[{a.chunk, a.slot}] != a.microbatch || a.microbatch >= next_forward[a.chunk];
          slot_owner.erase({a.chunk, a.slot});
          --live[a.chunk];
        }
      }
      EXPECT_EQ(bad, 0) << shape.stages << " stages, stage " << shape.stage << ", " << shape.chunks << " chunks, "
                        << shape.microbatches << " microbatches";
      EXPECT_EQ(peak, slot_count);
      if (shape.chunks == 1 && shape.stages > 1) {
        EXPECT_EQ(slot_count[0], std::min(shape.stages - shape.stage, shape.microbatches));
      }
    }
  }
}

std::string at_stage(int s, const char* what) {
  std::ostringstream o;
  o << "stage " << s << ' ' << what;
  return o.str();
}

// Runs every rank's order with sends that never block and receives that block
// until their stream has a message (the runner's transport), on one thread.
// Fails on a deadlock or on a receive that gets another (chunk, microbatch)
// than it needs. tag_by_chunk = false uses one stream per direction, as
// Megatron does: the orders also match without chunk tags.
std::string simulate(const PipelineShape& shape, bool tag_by_chunk) {
  const int S = shape.stages, C = shape.chunks;
  std::vector<std::vector<PipeAction>> orders;
  for (int s = 0; s < S; ++s) orders.push_back(pipeline_actions({S, s, C, shape.microbatches}));
  std::map<std::tuple<int, int, int>, std::deque<std::pair<int, int>>> streams;  // (from, to, tag) -> (chunk, mb)
  auto stream = [&](int from, int to, int dir, int into_chunk) -> auto& {
    return streams[{from, to, tag_by_chunk ? 2 * into_chunk + dir : dir}];
  };
  std::vector<size_t> pos(S, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < S; ++s) {
      const int prev = (s + S - 1) % S, next = (s + 1) % S;
      for (; pos[s] < orders[s].size(); ++pos[s], progress = true) {
        const PipeAction& a = orders[s][pos[s]];
        const int k = a.chunk * S + s;
        const bool fwd = a.op == PipeOp::kForward;
        const bool receives = fwd ? k > 0 : k < S * C - 1, sends = fwd ? k < S * C - 1 : k > 0;
        const int from_k = fwd ? k - 1 : k + 1, to_k = fwd ? k + 1 : k - 1;
        if (receives) {
          auto& in = stream(fwd ? prev : next, s, fwd ? 0 : 1, a.chunk);
          if (in.empty()) break;  // blocks here
          if (in.front() != std::pair{from_k / S, a.microbatch}) return at_stage(s, "mismatched");
          in.pop_front();
        }
        if (sends) stream(s, fwd ? next : prev, fwd ? 0 : 1, to_k / S).emplace_back(a.chunk, a.microbatch);
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    if (pos[s] < orders[s].size()) return at_stage(s, "deadlocked");
  }
  return "ok";
}

TEST(ParallelPipelineOrder, AllRanksTogetherCompleteAndMatch) {
  for (const PipelineShape& shape : many_shapes()) {
    for (bool tag_by_chunk : {true, false}) {
      EXPECT_EQ(simulate(shape, tag_by_chunk), "ok")
          << shape.stages << " stages, " << shape.chunks << " chunks, " << shape.microbatches
          << " microbatches, tag by chunk " << tag_by_chunk;
    }
  }
}

}  // namespace
}  // namespace mtrain::parallel
