// run_pipeline / run_pipeline_forward_only on SimWorld with the toy model of
// pipeline_toy.h: every stage's gradients and the losses equal a sequential
// single-thread computation bit for bit, with synchronous and with buffered
// sends and with device receive buffers; every transfer is reported to the
// observer; dry runs on MetaComm report the same traffic; caller bugs are
// errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <sstream>

#include "common/errors.h"
#include "parallel/local_comm.h"
#include "parallel/sim_comm.h"
#include "pipeline_toy.h"

namespace mtrain::parallel {
namespace {

using testing::ToyResult;
using testing::ToyStage;

struct Case {
  int stages, chunks, microbatches;
};

std::string describe(const Case& c, bool synchronous) {
  std::ostringstream s;
  s << c.stages << " stages x " << c.chunks << " chunks, " << c.microbatches << " microbatches, "
    << (synchronous ? "synchronous" : "buffered") << " sends";
  return s.str();
}

// What one run saw on every rank: results, checks, p2p events.
struct ToyRun {
  std::vector<ToyResult> results;  // (stages)
  std::vector<int> violations, forwards, backwards, sends, recvs;
  std::vector<int64_t> send_bytes, recv_bytes;
};

// buffer_elems > 0: the messages land in device receive buffers of that many
// elements (PipelineBuffers); 0: in the runner's host buffers.
ToyRun run_toy(const Case& c, bool synchronous, bool training, int64_t buffer_elems = 0) {
  ToyRun run;
  const size_t n = c.stages;
  run.results.resize(n);
  run.violations.assign(n, 0), run.forwards.assign(n, 0), run.backwards.assign(n, 0);
  run.sends.assign(n, 0), run.recvs.assign(n, 0), run.send_bytes.assign(n, 0), run.recv_bytes.assign(n, 0);
  SimWorld world(c.stages, SimWorldOptions{.timeout_seconds = 5, .synchronous_send = synchronous});
  world.run([&](int s) {
    auto pp = world.make_world_comm(s);
    pp->set_observer([&](const CommEvent& e) {
      const bool send = e.op == CommOp::kSend && e.nonblocking, recv = e.op == CommOp::kRecv;
      run.sends[s] += send, run.recvs[s] += recv;
      (send ? run.send_bytes : run.recv_bytes)[s] += e.bytes;
      run.violations[s] += !send && !recv;  // the runner uses nothing else
    });
    const PipelineShape shape{c.stages, s, c.chunks, c.microbatches};
    ToyStage stage(shape, training);
    device::Device dev(device::DeviceProfile{}, s);
    PipelineBuffers device_buffers;
    if (buffer_elems > 0) device_buffers = PipelineBuffers(dev, shape, buffer_elems, DType::kBF16, /*meta=*/false);
    PipelineBuffers* buffers = buffer_elems > 0 ? &device_buffers : nullptr;
    if (training) {
      run_pipeline(*pp, shape, stage.callbacks(), Wire::of(DType::kBF16), buffers);
    } else {
      PipelineCallbacks cb = stage.callbacks();
      cb.backward = nullptr;  // not needed
      run_pipeline_forward_only(*pp, shape, cb, Wire::of(DType::kBF16), buffers);
    }
    run.results[s] = stage.result;
    run.violations[s] += stage.violations;
    run.forwards[s] = stage.forwards, run.backwards[s] = stage.backwards;
  });
  return run;
}

// Messages stage s sends (receives): M per chunk and direction, except out of
// (into) the last virtual stage forwards and the first one backwards; none
// with one stage (chunks hand over locally).
int expected_p2p(const Case& c, int s, bool training, bool sends) {
  if (c.stages == 1) return 0;
  const int M = c.microbatches, first = s == 0 ? 1 : 0, last = s == c.stages - 1 ? 1 : 0;
  const int activations = M * (c.chunks - (sends ? last : first));
  const int gradients = M * (c.chunks - (sends ? first : last));
  return training ? activations + gradients : activations;
}

int64_t width_sum(int microbatches) {
  int64_t sum = 0;
  for (int m = 0; m < microbatches; ++m) sum += testing::toy_width(m);
  return sum;
}

class ParallelPipelineSchedule : public ::testing::TestWithParam<std::tuple<Case, bool>> {};

TEST_P(ParallelPipelineSchedule, MatchesSequentialComputation) {
  const auto [c, synchronous] = GetParam();
  const ToyRun run = run_toy(c, synchronous, /*training=*/true);
  const ToyResult ref = testing::toy_reference(c.stages, c.chunks, c.microbatches);
  for (int s = 0; s < c.stages; ++s) {
    SCOPED_TRACE(::testing::Message() << "stage " << s << ", " << describe(c, synchronous));
    EXPECT_EQ(run.violations[s], 0);
    EXPECT_EQ(run.forwards[s], c.chunks * c.microbatches);
    EXPECT_EQ(run.backwards[s], c.chunks * c.microbatches);
    for (int chunk = 0; chunk < c.chunks; ++chunk) {
      const int k = chunk * c.stages + s;
      EXPECT_EQ(run.results[s].da[k], ref.da[k]) << "virtual stage " << k;
      EXPECT_EQ(run.results[s].db[k], ref.db[k]) << "virtual stage " << k;
    }
    // The loss is computed on the last stage only.
    for (int m = 0; m < c.microbatches; ++m) {
      if (s == c.stages - 1) {
        EXPECT_EQ(run.results[s].loss[m], ref.loss[m]) << "microbatch " << m;
      } else {
        EXPECT_TRUE(std::isnan(run.results[s].loss[m]));
      }
    }
    // Every transfer was reported, in wire bytes (bf16: 2 per element).
    EXPECT_EQ(run.sends[s], expected_p2p(c, s, true, true));
    EXPECT_EQ(run.recvs[s], expected_p2p(c, s, true, false));
  }
  int64_t sent = 0, received = 0;
  for (int s = 0; s < c.stages; ++s) sent += run.send_bytes[s], received += run.recv_bytes[s];
  const int64_t messages_per_mb = c.stages == 1 ? 0 : 2 * (c.stages * c.chunks - 1);
  EXPECT_EQ(sent, messages_per_mb * width_sum(c.microbatches) * 2);
  EXPECT_EQ(received, sent);
}

TEST_P(ParallelPipelineSchedule, ForwardOnlyMatchesSequentialLosses) {
  const auto [c, synchronous] = GetParam();
  const ToyRun run = run_toy(c, synchronous, /*training=*/false);
  const ToyResult ref = testing::toy_reference(c.stages, c.chunks, c.microbatches);
  const int last = c.stages - 1;
  EXPECT_EQ(run.results[last].loss, ref.loss) << describe(c, synchronous);
  for (int s = 0; s < c.stages; ++s) {
    EXPECT_EQ(run.violations[s], 0) << "stage " << s;
    EXPECT_EQ(run.forwards[s], c.chunks * c.microbatches);
    EXPECT_EQ(run.backwards[s], 0);
    EXPECT_EQ(run.sends[s], expected_p2p(c, s, false, true)) << "stage " << s;
    EXPECT_EQ(run.recvs[s], expected_p2p(c, s, false, false)) << "stage " << s;
  }
}

const Case kCases[] = {{2, 1, 1}, {2, 1, 4}, {4, 1, 3}, {4, 1, 8}, {2, 2, 4}, {4, 2, 8},
                       {2, 3, 6}, {1, 1, 3}, {1, 3, 2}, {3, 2, 3}, {4, 2, 4}};

std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, bool>>& info) {
  const Case& c = std::get<0>(info.param);
  std::ostringstream name;
  name << 'S' << c.stages << 'C' << c.chunks << 'M' << c.microbatches
       << (std::get<1>(info.param) ? "_sync" : "_buffered");
  return name.str();
}

INSTANTIATE_TEST_SUITE_P(Shapes, ParallelPipelineSchedule,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Bool()), case_name);

// A dry run: MetaComm moves nothing, callbacks see no data, and every rank
// reports the same transfers as a real run, one rank at a time.
TEST(ParallelPipelineScheduleMeta, DryRunReportsTheSameTraffic) {
  const Case c{4, 2, 8};
  const ToyRun real = run_toy(c, true, true);
  for (int s = 0; s < c.stages; ++s) {
    MetaComm pp("pp", s, c.stages);
    int sends = 0, recvs = 0, non_null = 0;
    pp.set_observer([&](const CommEvent& e) { (e.op == CommOp::kSend ? sends : recvs) += 1; });
    PipelineCallbacks cb{.message_elems = [](int, int m) { return int64_t{testing::toy_width(m)}; },
                         .forward = [&](const PipeAction&, const float* in) -> const float* {
                           non_null += in != nullptr;
                           return nullptr;
                         },
                         .backward = [&](const PipeAction&, const float* g) -> const float* {
                           non_null += g != nullptr;
                           return nullptr;
                         }};
    run_pipeline(pp, {c.stages, s, c.chunks, c.microbatches}, cb, Wire::of(DType::kBF16));
    EXPECT_EQ(non_null, 0);
    EXPECT_EQ(sends, real.sends[s]);
    EXPECT_EQ(recvs, real.recvs[s]);
  }
}

// A forward that returns nothing on a stage that must send is a caller bug:
// the rank fails with Error(kInternal) and the world stops instead of hanging.
TEST(ParallelPipelineScheduleErrors, MissingOutputIsACallerBug) {
  SimWorld world(2, SimWorldOptions{.timeout_seconds = 5});
  try {
    world.run([&](int s) {
      auto pp = world.make_world_comm(s);
      const PipelineShape shape{2, s, 1, 2};
      ToyStage stage(shape, true);
      PipelineCallbacks cb = stage.callbacks();
      if (s == 0) cb.forward = [](const PipeAction&, const float*) -> const float* { return nullptr; };
      run_pipeline(*pp, shape, cb);
    });
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_STREQ(e.what(), "pipeline stage 0: the forward of chunk 0, microbatch 0 returned no output to send");
  }
}

// The trainer's path: messages arrive in device receive buffers sized for
// the largest message, and the results are still the sequential ones.
TEST(ParallelPipelineScheduleDevice, ReceiveBuffersCarryTheMessages) {
  for (const Case& c : {Case{2, 1, 4}, Case{4, 2, 8}, Case{3, 2, 3}}) {
    const ToyRun run = run_toy(c, /*synchronous=*/false, /*training=*/true, testing::kToyMaxWidth);
    const ToyResult ref = testing::toy_reference(c.stages, c.chunks, c.microbatches);
    for (int s = 0; s < c.stages; ++s) {
      for (int k = s; k < c.stages * c.chunks; k += c.stages) {
        EXPECT_EQ(run.results[s].da[k], ref.da[k]) << describe(c, false) << ", virtual stage " << k;
        EXPECT_EQ(run.results[s].db[k], ref.db[k]) << describe(c, false) << ", virtual stage " << k;
      }
    }
  }
}

// A message larger than its receive buffer is a caller bug (the buffers were
// sized for a smaller micro-batch), named before anything is written.
TEST(ParallelPipelineScheduleDevice, AMessageLargerThanItsBufferIsACallerBug) {
  try {
    run_toy({2, 1, 4}, false, true, testing::kToyMaxWidth - 1);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("message does not fit its 4-element receive buffer"), std::string::npos)
        << e.what();
  }
}

TEST(ParallelPipelineScheduleErrors, ShapeMustMatchTheComm) {
  MetaComm pp("pp", 1, 4);
  ToyStage stage({4, 1, 1, 4}, true);
  EXPECT_THROW(run_pipeline(pp, {4, 2, 1, 4}, stage.callbacks()), Error);
  EXPECT_THROW(run_pipeline(pp, {2, 1, 1, 4}, stage.callbacks()), Error);
  PipelineCallbacks no_backward = stage.callbacks();
  no_backward.backward = nullptr;
  EXPECT_THROW(run_pipeline(pp, {4, 1, 1, 4}, no_backward), Error);
  EXPECT_THROW(run_pipeline(pp, {4, 1, 2, 6}, stage.callbacks()), ConfigError);
}

}  // namespace
}  // namespace mtrain::parallel
