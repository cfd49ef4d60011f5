// The non-blocking collectives of the Comm conformance suite (comm.h):
// start_all_reduce / start_reduce_scatter / start_all_gather give the
// blocking calls' bits;
// several requests in flight complete whatever order each rank waits them
// in; they interleave with blocking collectives and point-to-point calls on
// the same Comm, each rank placing its waits differently; every request is
// reported once, when it completes. Run by run_comm_conformance.
//
// Like the rest of the suite: EXPECT only until the last collective call.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm_test_data.h"
#include "parallel/comm.h"

namespace mtrain::parallel::testing {

template <class T>
bool same_buffers(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// start_all_reduce + wait == all_reduce == the rank-order fold, bit for bit.
template <class T>
void check_start_all_reduce_type(Comm& c, ReduceOp op) {
  for (int64_t n : {0, 1, 7, 4099, 262147}) {
    const uint64_t seed = 2000 + static_cast<uint64_t>(n);
    std::vector<T> nonblocking = test_values<T>(seed, c.rank(), n), blocking = nonblocking;
    CollectiveRequest request = c.start_all_reduce(nonblocking.data(), n, op);
    request.wait();
    c.all_reduce(blocking.data(), n, op);
    EXPECT_EQ(count_reduce_mismatches(nonblocking.data(), seed, c.size(), 0, n, op), 0)
        << "start_all_reduce " << scalar_type_name(scalar_type_of<T>()) << " " << reduce_op_name(op) << " n=" << n;
    EXPECT_TRUE(same_buffers(nonblocking, blocking)) << "start_all_reduce n=" << n << " differs from all_reduce";
  }
}

// start_reduce_scatter + wait == reduce_scatter, separate output and in place.
template <class T>
void check_start_reduce_scatter_type(Comm& c, int64_t chunk, ReduceOp op, bool in_place) {
  const uint64_t seed = 2300 + static_cast<uint64_t>(chunk);
  std::vector<T> nonblocking = test_values<T>(seed, c.rank(), chunk * c.size()), blocking = nonblocking;
  std::vector<T> out_nb(chunk), out_b(chunk);
  T* out = in_place ? nonblocking.data() + c.rank() * chunk : out_nb.data();
  c.start_reduce_scatter(nonblocking.data(), out, chunk, op).wait();
  c.reduce_scatter(blocking.data(), in_place ? blocking.data() + c.rank() * chunk : out_b.data(), chunk, op);
  EXPECT_EQ(count_reduce_mismatches(out, seed, c.size(), c.rank() * chunk, chunk, op), 0)
      << "start_reduce_scatter chunk=" << chunk << (in_place ? " in place" : "");
  EXPECT_TRUE(in_place ? same_buffers(nonblocking, blocking) : same_buffers(out_nb, out_b))
      << "start_reduce_scatter chunk=" << chunk << " differs from reduce_scatter";
}

// start_all_gather + wait == all_gather, separate input and in place; a
// gather in flight beside a reduction, waited in the other order.
template <class T>
void check_start_all_gather_type(Comm& c, int64_t chunk, bool in_place) {
  const uint64_t seed = 2600 + static_cast<uint64_t>(chunk);
  const std::vector<T> mine = test_values<T>(seed, c.rank(), chunk);
  std::vector<T> nonblocking(chunk * c.size(), T{}), blocking = nonblocking;
  if (in_place) std::copy(mine.begin(), mine.end(), nonblocking.begin() + c.rank() * chunk);
  const T* in = in_place ? nonblocking.data() + c.rank() * chunk : mine.data();
  std::vector<float> sum = test_values<float>(seed + 1, c.rank(), 257);
  CollectiveRequest gather = c.start_all_gather(in, nonblocking.data(), chunk);
  CollectiveRequest reduce = c.start_all_reduce_sum(sum.data(), 257);
  reduce.wait();
  gather.wait();
  c.all_gather(mine.data(), blocking.data(), chunk);
  EXPECT_TRUE(same_buffers(nonblocking, blocking)) << "start_all_gather chunk=" << chunk << " differs from all_gather";
  EXPECT_EQ(count_reduce_mismatches(sum.data(), seed + 1, c.size(), 0, 257, ReduceOp::kSum), 0);
}

inline void check_nonblocking_bits(Comm& c) {
  for (int64_t chunk : {0, 1, 5, 4097}) {
    check_start_all_gather_type<float>(c, chunk, false);
    check_start_all_gather_type<float>(c, chunk, true);
  }
  check_start_all_gather_type<int64_t>(c, 9, true);
  check_start_all_reduce_type<float>(c, ReduceOp::kSum);
  check_start_all_reduce_type<double>(c, ReduceOp::kSum);
  check_start_all_reduce_type<float>(c, ReduceOp::kMax);
  check_start_all_reduce_type<int32_t>(c, ReduceOp::kSum);
  for (int64_t chunk : {0, 1, 5, 4097}) {
    check_start_reduce_scatter_type<float>(c, chunk, ReduceOp::kSum, false);
    check_start_reduce_scatter_type<float>(c, chunk, ReduceOp::kSum, true);
  }
  check_start_reduce_scatter_type<int64_t>(c, 9, ReduceOp::kMin, true);
}

// Four requests in flight; each rank waits them in its own order (rotated by
// rank), then one more is polled with done() until it completes.
inline void check_nonblocking_out_of_order(Comm& c) {
  const int p = c.size(), r = c.rank();
  const int64_t n_a = 100003, chunk = 2049, n_c = 17, n_d = 5000, n_e = 1000;
  std::vector<float> a = test_values<float>(3001, r, n_a), b = test_values<float>(3002, r, chunk * p);
  std::vector<float> b_out(chunk), cc = test_values<float>(3003, r, n_c), e = test_values<float>(3005, r, n_e);
  std::vector<double> d = test_values<double>(3004, r, n_d);
  std::vector<CollectiveRequest> requests;
  requests.push_back(c.start_all_reduce_sum(a.data(), n_a));
  requests.push_back(c.start_reduce_scatter_sum(b.data(), b_out.data(), chunk));
  requests.push_back(c.start_all_reduce_sum(cc.data(), n_c));
  requests.push_back(c.start_all_reduce(d.data(), n_d));
  for (int k = 0; k < 4; ++k) requests[(3 - k + r) % 4].wait();
  for (CollectiveRequest& q : requests) EXPECT_TRUE(q.done());
  EXPECT_EQ(count_reduce_mismatches(a.data(), 3001, p, 0, n_a, ReduceOp::kSum), 0);
  EXPECT_EQ(count_reduce_mismatches(b_out.data(), 3002, p, r * chunk, chunk, ReduceOp::kSum), 0);
  EXPECT_EQ(count_reduce_mismatches(cc.data(), 3003, p, 0, n_c, ReduceOp::kSum), 0);
  EXPECT_EQ(count_reduce_mismatches(d.data(), 3004, p, 0, n_d, ReduceOp::kSum), 0);
  CollectiveRequest polled = c.start_all_reduce_sum(e.data(), n_e);
  while (!polled.done()) std::this_thread::yield();
  EXPECT_EQ(count_reduce_mismatches(e.data(), 3005, p, 0, n_e, ReduceOp::kSum), 0);
}

// Requests interleaved with blocking calls on the same Comm, started in the
// same order everywhere; even ranks wait before the blocking calls that
// follow, odd ranks after them. Then a request whose wait rank 0 places
// before a send that rank 1 receives before its own wait.
inline void check_nonblocking_with_blocking(Comm& c) {
  const int p = c.size(), r = c.rank();
  const int64_t n = 4099, chunk = 333;
  std::vector<float> a = test_values<float>(3101, r, n), x = test_values<float>(3102, r, 1000);
  std::vector<float> b = test_values<float>(3103, r, chunk * p);
  CollectiveRequest ra = c.start_all_reduce_sum(a.data(), n);
  if (r % 2 == 0) ra.wait();
  c.all_reduce_sum(x.data(), 1000);
  std::vector<int32_t> ranks(p, -1);
  const int32_t me = r;
  c.all_gather(&me, ranks.data(), 1);
  CollectiveRequest rb = c.start_reduce_scatter_sum(b.data(), b.data() + r * chunk, chunk);
  c.barrier();
  rb.wait();
  double root_value = r;
  c.broadcast(&root_value, 1, p - 1);
  ra.wait();
  EXPECT_EQ(count_reduce_mismatches(a.data(), 3101, p, 0, n, ReduceOp::kSum), 0);
  EXPECT_EQ(count_reduce_mismatches(x.data(), 3102, p, 0, 1000, ReduceOp::kSum), 0);
  EXPECT_EQ(count_reduce_mismatches(b.data() + r * chunk, 3103, p, r * chunk, chunk, ReduceOp::kSum), 0);
  for (int k = 0; k < p; ++k) EXPECT_EQ(ranks[k], k);
  EXPECT_EQ(root_value, p - 1);
  if (p < 2) return;
  std::vector<float> y = test_values<float>(3104, r, 300);
  CollectiveRequest ry = c.start_all_reduce_sum(y.data(), 300);
  int32_t token = r == 0 ? 42 : -1;
  if (r == 0) {
    ry.wait();
    c.send(&token, 1, 1, /*tag=*/31);
  } else if (r == 1) {
    c.recv(&token, 1, 0, /*tag=*/31);
    ry.wait();
    EXPECT_EQ(token, 42);
  }
  ry.wait();
  EXPECT_EQ(count_reduce_mismatches(y.data(), 3104, p, 0, 300, ReduceOp::kSum), 0);
}

// One observer event per request, when it completes (not when started), with
// the blocking call's op, elements and wire bytes and nonblocking = true;
// moved, reassigned and destroyed requests complete and report once.
inline void check_nonblocking_observer(Comm& c) {
  const int p = c.size();
  std::vector<CommEvent> events;
  std::vector<std::string> names;
  c.set_observer([&](const CommEvent& e) {
    events.push_back(e);
    names.emplace_back(e.group);  // the view is only valid during the callback
  });
  EXPECT_TRUE(CollectiveRequest().done());
  std::vector<float> a(10, 1.0f), in(12 * p, 1.0f), out(12, 0.0f), z = test_values<float>(3201, c.rank(), 64);
  CollectiveRequest ra = c.start_all_reduce_sum(a.data(), 10, Wire::of(DType::kBF16));
  CollectiveRequest rb = c.start_reduce_scatter_sum(in.data(), out.data(), 12);
  const size_t reported_at_start = events.size();
  rb.wait();
  const size_t after_first_wait = events.size();
  CollectiveRequest moved = std::move(ra);
  moved.wait();
  moved.wait();
  EXPECT_TRUE(moved.done());
  {
    CollectiveRequest dropped = c.start_all_reduce_sum(z.data(), 64);  // destroyed unfinished: waits
  }
  std::vector<float> f(10, 1.0f), g(10, 2.0f);
  CollectiveRequest reassigned = c.start_all_reduce_sum(f.data(), 10);
  reassigned = c.start_all_reduce_sum(g.data(), 10);  // waits for the first before taking the second
  const float f_after_reassignment = f[3];
  reassigned.wait();
  c.set_observer(nullptr);
  EXPECT_EQ(reported_at_start, 0u);
  EXPECT_EQ(after_first_wait, 1u);
  EXPECT_EQ(count_reduce_mismatches(z.data(), 3201, p, 0, 64, ReduceOp::kSum), 0) << "destroyed request";
  EXPECT_EQ(a[3], static_cast<float>(p));
  EXPECT_EQ(f_after_reassignment, static_cast<float>(p));
  EXPECT_EQ(g[3], static_cast<float>(2 * p));
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].op, CommOp::kReduceScatter);
  EXPECT_EQ(events[0].elements, 12 * p);
  EXPECT_EQ(events[0].bytes, 12 * p * 4);
  EXPECT_EQ(events[1].op, CommOp::kAllReduce);
  EXPECT_EQ(events[1].elements, 10);
  EXPECT_EQ(events[1].bytes, 20);
  EXPECT_EQ(events[2].elements, 64);
  for (size_t k = 0; k < events.size(); ++k) {
    const CommEvent& e = events[k];
    EXPECT_TRUE(e.nonblocking);
    EXPECT_EQ(names[k], c.name());
    EXPECT_EQ(e.group_size, p);
    EXPECT_EQ(e.rank, c.rank());
    EXPECT_GE(e.seconds, 0.0);
  }
}

inline void check_nonblocking(Comm& c) {
  check_nonblocking_bits(c);
  check_nonblocking_out_of_order(c);
  check_nonblocking_with_blocking(c);
  check_nonblocking_observer(c);
}

}  // namespace mtrain::parallel::testing
