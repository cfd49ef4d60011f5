// The behaviour every Comm implementation must show (comm.h), as gtest
// checks that every rank of a group runs with its own Comm: under SimWorld
// threads (test_sim_comm.cc) and under mpirun (test_mpi_comm.cc). Each rank
// can regenerate every rank's input, so it computes the expected result
// locally, with a plain loop in group-rank order, and compares bit for bit.
//
// The checks only EXPECT (never ASSERT): a rank that returned early would
// leave the others waiting in the next collective.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "comm_conformance_all_to_all.h"
#include "comm_conformance_nonblocking.h"
#include "comm_test_data.h"
#include "parallel/comm.h"
#include "parallel/parallel_state.h"

namespace mtrain::parallel::testing {

template <class T>
void check_all_reduce_type(Comm& c, ReduceOp op) {
  const int64_t sizes[] = {0, 1, 3, 7, 64, 1000, 4099, 262147};
  for (int64_t n : sizes) {
    const uint64_t seed = 1000 + static_cast<uint64_t>(n);
    std::vector<T> data = test_values<T>(seed, c.rank(), n);
    c.all_reduce(data.data(), n, op);
    EXPECT_EQ(count_reduce_mismatches(data.data(), seed, c.size(), 0, n, op), 0)
        << "comm " << c.name() << " rank " << c.rank() << " " << scalar_type_name(scalar_type_of<T>()) << " "
        << reduce_op_name(op) << " n=" << n;
  }
}

inline void check_all_reduce(Comm& c) {
  check_all_reduce_type<float>(c, ReduceOp::kSum);
  check_all_reduce_type<double>(c, ReduceOp::kSum);
  check_all_reduce_type<float>(c, ReduceOp::kMax);
  check_all_reduce_type<double>(c, ReduceOp::kMin);
  check_all_reduce_type<int32_t>(c, ReduceOp::kSum);
  check_all_reduce_type<int64_t>(c, ReduceOp::kMax);
  check_all_reduce_type<int32_t>(c, ReduceOp::kMin);
  // Convenience forms.
  std::vector<float> f = test_values<float>(7, c.rank(), 5);
  c.all_reduce_sum(f.data(), 5);
  EXPECT_EQ(count_reduce_mismatches(f.data(), 7, c.size(), 0, 5, ReduceOp::kSum), 0);
  // A non-finite flag raised on the last rank only reaches everyone.
  const int32_t found = c.all_reduce_value(int32_t{c.rank() == c.size() - 1}, ReduceOp::kMax);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(c.all_reduce_value(int64_t{c.rank() + 1}, ReduceOp::kSum), int64_t{c.size()} * (c.size() + 1) / 2);
  EXPECT_EQ(c.all_reduce_value(int32_t{c.rank()}, ReduceOp::kMin), 0);
}

// NaN on one rank wins a max/min and a sum everywhere (a NaN gradient must not vanish).
inline void check_nan_propagation(Comm& c) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    for (int bad_rank = 0; bad_rank < c.size(); ++bad_rank) {
      float v[3] = {1.0f + c.rank(), c.rank() == bad_rank ? nan : -2.0f, 3.0f};
      c.all_reduce(v, 3, op);
      EXPECT_TRUE(std::isnan(v[1])) << reduce_op_name(op) << " NaN from rank " << bad_rank;
      EXPECT_FALSE(std::isnan(v[0]));
      EXPECT_FALSE(std::isnan(v[2]));
    }
  }
}

// All ranks end with the same bits: gather everyone's result and compare.
inline void check_bitwise_identical_across_ranks(Comm& c) {
  const int64_t n = 10007;
  std::vector<float> data = test_values<float>(99, c.rank(), n);
  c.all_reduce_sum(data.data(), n);
  std::vector<float> all(n * c.size());
  c.all_gather(data.data(), all.data(), n);
  for (int k = 0; k < c.size(); ++k) {
    EXPECT_EQ(std::memcmp(all.data() + k * n, data.data(), n * sizeof(float)), 0)
        << "rank " << k << " holds other bits than rank " << c.rank();
  }
}

template <class T>
void check_reduce_scatter_type(Comm& c, int64_t chunk, ReduceOp op, bool in_place) {
  const uint64_t seed = 300 + static_cast<uint64_t>(chunk);
  std::vector<T> in = test_values<T>(seed, c.rank(), chunk * c.size());
  std::vector<T> separate(chunk);
  T* out = in_place ? in.data() + c.rank() * chunk : separate.data();
  c.reduce_scatter(in.data(), out, chunk, op);
  EXPECT_EQ(count_reduce_mismatches(out, seed, c.size(), c.rank() * chunk, chunk, op), 0)
      << "reduce_scatter chunk=" << chunk << (in_place ? " in place" : "");
}

inline void check_reduce_scatter(Comm& c) {
  for (int64_t chunk : {0, 1, 5, 4097}) {
    check_reduce_scatter_type<float>(c, chunk, ReduceOp::kSum, false);
    check_reduce_scatter_type<float>(c, chunk, ReduceOp::kSum, true);
  }
  check_reduce_scatter_type<double>(c, 33, ReduceOp::kSum, false);
  check_reduce_scatter_type<int32_t>(c, 9, ReduceOp::kMax, true);
}

template <class T>
void check_all_gather_type(Comm& c, int64_t chunk, bool in_place) {
  const uint64_t seed = 500 + static_cast<uint64_t>(chunk);
  std::vector<T> out(chunk * c.size(), T{});
  std::vector<T> mine = test_values<T>(seed, c.rank(), chunk);
  const T* in = mine.data();
  if (in_place) {
    std::copy(mine.begin(), mine.end(), out.begin() + c.rank() * chunk);
    in = out.data() + c.rank() * chunk;
  }
  c.all_gather(in, out.data(), chunk);
  int64_t bad = 0;
  for (int k = 0; k < c.size(); ++k) {
    for (int64_t i = 0; i < chunk; ++i) bad += !same_bits(out[k * chunk + i], test_value<T>(seed, k, i));
  }
  EXPECT_EQ(bad, 0) << "all_gather chunk=" << chunk << (in_place ? " in place" : "");
}

inline void check_all_gather(Comm& c) {
  for (int64_t chunk : {0, 1, 3, 5000}) {
    check_all_gather_type<float>(c, chunk, false);
    check_all_gather_type<float>(c, chunk, true);
  }
  check_all_gather_type<int64_t>(c, 4, false);
  check_all_gather_type<uint8_t>(c, 11, true);
}

inline void check_broadcast(Comm& c) {
  for (int root = 0; root < c.size(); ++root) {
    const uint64_t seed = 700 + static_cast<uint64_t>(root);
    std::vector<double> data = test_values<double>(seed, c.rank(), 17);
    c.broadcast(data.data(), 17, root);
    int64_t bad = 0;
    for (int64_t i = 0; i < 17; ++i) bad += !same_bits(data[i], test_value<double>(seed, root, i));
    EXPECT_EQ(bad, 0) << "broadcast from root " << root;
  }
}

// Ring exchange: everyone sends to the next rank and receives from the previous.
inline void check_send_recv_ring(Comm& c) {
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  std::vector<float> out = test_values<float>(900, c.rank(), 1000), in(1000, 0.0f);
  c.send_recv(out.data(), 1000, next, in.data(), 1000, prev, /*tag=*/7);
  EXPECT_EQ(std::memcmp(in.data(), test_values<float>(900, prev, 1000).data(), 1000 * sizeof(float)), 0);
}

// Blocking p2p: many messages with one tag arrive in order; alternating tags
// are matched by tag; a pipeline chain passes a value through every stage.
inline void check_p2p_ordering(Comm& c) {
  if (c.size() < 2) return;
  const int kMessages = 25;
  if (c.rank() == 0) {
    for (int m = 0; m < kMessages; ++m) {
      const int64_t v[2] = {m, 10 * m};
      c.send(v, 2, 1, /*tag=*/3);
    }
    for (int m = 0; m < 6; ++m) {
      const int32_t v = 100 + m;
      c.send(&v, 1, 1, /*tag=*/m % 2 == 0 ? 11 : 12);
    }
  } else if (c.rank() == 1) {
    int64_t out_of_order = 0;
    for (int m = 0; m < kMessages; ++m) {
      int64_t v[2] = {-1, -1};
      c.recv(v, 2, 0, /*tag=*/3);
      out_of_order += (v[0] != m || v[1] != 10 * m);
    }
    EXPECT_EQ(out_of_order, 0);
    for (int m = 0; m < 6; ++m) {
      int32_t v = -1;
      c.recv(&v, 1, 0, /*tag=*/m % 2 == 0 ? 11 : 12);
      EXPECT_EQ(v, 100 + m);
    }
  }
  // Chain 0 -> 1 -> ... -> size-1: each stage adds its rank.
  int64_t carried = 0;
  if (c.rank() > 0) c.recv(&carried, 1, c.rank() - 1, /*tag=*/5);
  carried += c.rank() + 1;
  if (c.rank() < c.size() - 1) c.send(&carried, 1, c.rank() + 1, /*tag=*/5);
  if (c.rank() == c.size() - 1) {
    EXPECT_EQ(carried, int64_t{c.size()} * (c.size() + 1) / 2);
  }
  c.barrier();
}

// The observer sees each call once, with the documented bytes and peers.
inline void check_observer(Comm& c) {
  std::vector<CommEvent> events;
  std::vector<std::string> names;
  c.set_observer([&](const CommEvent& e) {
    events.push_back(e);
    names.emplace_back(e.group);
  });
  const int p = c.size(), r = c.rank();
  std::vector<float> buf(12 * p, 1.0f), shard(12, 0.0f);
  c.all_reduce_sum(buf.data(), 10, Wire::of(DType::kBF16));
  c.reduce_scatter(buf.data(), shard.data(), 12);
  c.all_gather(shard.data(), buf.data(), 12);
  c.broadcast(buf.data(), 3, p - 1);
  c.send_recv(buf.data(), 4, (r + 1) % p, shard.data(), 4, (r + p - 1) % p, 1);
  c.barrier();
  c.set_observer(nullptr);
  c.barrier();  // not observed
  ASSERT_EQ(events.size(), 6u);
  const CommOp ops[] = {CommOp::kAllReduce, CommOp::kReduceScatter, CommOp::kAllGather,
                        CommOp::kBroadcast, CommOp::kSendRecv,      CommOp::kBarrier};
  const int64_t bytes[] = {10 * 2, 12 * p * 4, 12 * p * 4, 3 * 4, 4 * 4, 0};
  for (size_t i = 0; i < events.size(); ++i) {
    const CommEvent& e = events[i];
    EXPECT_EQ(e.op, ops[i]) << i;
    EXPECT_EQ(e.bytes, bytes[i]) << comm_op_name(ops[i]);
    EXPECT_EQ(names[i], c.name());
    EXPECT_EQ(e.group_size, p);
    EXPECT_EQ(e.rank, r);
    EXPECT_GE(e.seconds, 0.0);
  }
  EXPECT_EQ(events[0].elements, 10);
  EXPECT_EQ(events[3].peer, p - 1);
  EXPECT_EQ(events[4].peer, (r + 1) % p);
  EXPECT_EQ(events[4].recv_peer, (r + p - 1) % p);
  EXPECT_EQ(events[4].recv_bytes, 16);
}

// Non-blocking sends: an exchange that would deadlock with blocking sends,
// the payload copied at the call, FIFO per (pair, tag) with many requests in
// flight, tags matched independently, an abandoned request still delivered,
// and one observer event (a non-blocking kSend) per isend.
inline void check_isend(Comm& c) {
  EXPECT_TRUE(SendRequest().done());
  if (c.size() < 2) return;
  const int p = c.size(), r = c.rank(), next = (r + 1) % p, prev = (r + p - 1) % p;
  std::vector<CommEvent> events;
  c.set_observer([&](const CommEvent& e) { events.push_back(e); });
  const int64_t n = 1 << 17;  // 512 KiB: past MPI's eager limit, so a blocking send would wait for the recv
  std::vector<float> out = test_values<float>(1100, r, n), in(n, 0.0f);
  SendRequest request = c.isend(out.data(), n, next, /*tag=*/21, Wire::of(DType::kBF16));
  std::fill(out.begin(), out.end(), -1.0f);  // the request owns a copy
  c.recv(in.data(), n, prev, /*tag=*/21);
  request.wait();
  request.wait();  // idempotent
  EXPECT_TRUE(request.done());
  c.set_observer(nullptr);
  EXPECT_EQ(std::memcmp(in.data(), test_values<float>(1100, prev, n).data(), n * sizeof(float)), 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].op, CommOp::kSend);
  EXPECT_TRUE(events[0].nonblocking);
  EXPECT_EQ(events[0].bytes, 2 * n);
  EXPECT_EQ(events[0].peer, next);
  EXPECT_EQ(events[1].op, CommOp::kRecv);
  EXPECT_FALSE(events[1].nonblocking);
  // Rank 0 posts 10 messages on each of two tags before rank 1 receives any;
  // rank 1 takes tag 23 first. Then an abandoned request.
  const int kMessages = 10;
  if (r == 0) {
    std::vector<SendRequest> requests;
    for (int m = 0; m < kMessages; ++m) {
      const int64_t v[2] = {m, 100 + m};
      requests.push_back(c.isend(&v[0], 1, 1, /*tag=*/22));
      requests.push_back(c.isend(&v[1], 1, 1, /*tag=*/23));
    }
    const int32_t dropped = 77;
    static_cast<void>(c.isend(&dropped, 1, 1, /*tag=*/24));  // destroyed unfinished: abandoned
    for (SendRequest& q : requests) q.wait();
  } else if (r == 1) {
    int64_t wrong = 0, v = -1;
    for (int m = 0; m < kMessages; ++m) {
      c.recv(&v, 1, 0, /*tag=*/23);
      wrong += v != 100 + m;
    }
    for (int m = 0; m < kMessages; ++m) {
      c.recv(&v, 1, 0, /*tag=*/22);
      wrong += v != m;
    }
    EXPECT_EQ(wrong, 0);
    int32_t dropped = -1;
    c.recv(&dropped, 1, 0, /*tag=*/24);
    EXPECT_EQ(dropped, 77);
  }
  c.barrier();
}

inline void run_comm_conformance(Comm& c) {
  check_all_reduce(c);
  check_nan_propagation(c);
  check_bitwise_identical_across_ranks(c);
  check_reduce_scatter(c);
  check_all_gather(c);
  check_broadcast(c);
  check_send_recv_ring(c);
  check_p2p_ordering(c);
  check_observer(c);
  check_isend(c);
  check_nonblocking(c);
  check_all_to_all(c);
}

// Each group communicator of `ps` spans exactly the grid's members, in order:
// gathering the members' global ranks over the communicator gives the list.
inline void check_groups_match_grid(ParallelState& ps) {
  const ProcessGrid& grid = ps.grid();
  EXPECT_EQ(ps.world().size(), grid.world_size());
  EXPECT_EQ(ps.world().rank(), ps.rank());
  for (int k = 0; k < kGroupKindCount; ++k) {
    const auto kind = static_cast<GroupKind>(k);
    const RankGroup& members = grid.group_of(kind, ps.rank());
    EXPECT_EQ(ps.in_group(kind), !members.empty()) << group_kind_name(kind);
    if (members.empty()) continue;
    Comm& c = ps.group(kind);
    EXPECT_EQ(c.name(), group_kind_name(kind));
    EXPECT_EQ(c.size(), static_cast<int>(members.size())) << group_kind_name(kind);
    const int32_t me = ps.rank();
    std::vector<int32_t> gathered(c.size(), -1);
    c.all_gather(&me, gathered.data(), 1);
    EXPECT_EQ(std::vector<int>(gathered.begin(), gathered.end()), members)
        << "group '" << group_kind_name(kind) << "' on rank " << ps.rank();
  }
}

}  // namespace mtrain::parallel::testing
