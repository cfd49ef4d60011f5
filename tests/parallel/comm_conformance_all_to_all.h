// The all-to-all part of the Comm conformance suite (comm_conformance.h):
// equal splits of every scalar type, and uneven all_to_all_v layouts with
// zero counts, gaps and blocks out of peer order, every rank checking each
// element it received against the sender's regenerated input, bit for bit,
// and that nothing outside its receive blocks was written.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "comm_test_data.h"
#include "parallel/comm.h"

namespace mtrain::parallel::testing {

template <class T>
void check_all_to_all_type(Comm& c, int64_t chunk) {
  const uint64_t seed = 1300 + static_cast<uint64_t>(chunk);
  const int p = c.size(), r = c.rank();
  const std::vector<T> in = test_values<T>(seed, r, chunk * p);
  std::vector<T> out(chunk * p, T{});
  c.all_to_all(in.data(), out.data(), chunk);
  int64_t bad = 0;  // out[k * chunk + i] = rank k's element r * chunk + i
  for (int k = 0; k < p; ++k) {
    for (int64_t i = 0; i < chunk; ++i) bad += !same_bits(out[k * chunk + i], test_value<T>(seed, k, r * chunk + i));
  }
  EXPECT_EQ(bad, 0) << "all_to_all " << scalar_type_name(scalar_type_of<T>()) << " chunk=" << chunk << " on rank " << r;
}

// An uneven layout every rank can regenerate: what rank `from` sends to
// rank `to` (zero for some pairs, never the same for all), with `salt`
// choosing the pattern. Senders lay their blocks out in reverse peer order
// with one element of gap; receivers in peer order with two.
struct AllToAllLayout {
  std::vector<int64_t> send_counts, send_displs, recv_counts, recv_displs;  // (size) each
  int64_t send_extent = 0, recv_extent = 0;                                 // elements of the buffers
};

inline int64_t pair_count(int from, int to, int salt) {
  if (salt == 0) return 0;                                   // nothing moves at all
  if (salt == 1) return from == 0 && to == 1 ? 1000 : 0;     // one pair only (or a self block on one rank)
  return (salt + 7 * from + 3 * to + from * to) % 5 * salt;  // zeros and uneven sizes
}

inline AllToAllLayout all_to_all_layout(int rank, int size, int salt) {
  AllToAllLayout l;
  l.send_counts.resize(size), l.send_displs.resize(size), l.recv_counts.resize(size), l.recv_displs.resize(size);
  for (int k = size - 1; k >= 0; --k) {
    l.send_counts[k] = pair_count(rank, k, salt);
    l.send_displs[k] = l.send_extent + 1;
    l.send_extent += l.send_counts[k] + 1;
  }
  for (int k = 0; k < size; ++k) {
    l.recv_counts[k] = pair_count(k, rank, salt);
    l.recv_displs[k] = l.recv_extent + 2;
    l.recv_extent += l.recv_counts[k] + 2;
  }
  return l;
}

template <class T>
void check_all_to_all_v_type(Comm& c, int salt) {
  const uint64_t seed = 1500 + static_cast<uint64_t>(salt);
  const int p = c.size(), r = c.rank();
  const AllToAllLayout mine = all_to_all_layout(r, p, salt);
  const std::vector<T> in = test_values<T>(seed, r, mine.send_extent);
  const T sentinel = std::numeric_limits<T>::max();  // in the gaps, which nobody may write
  std::vector<T> out(mine.recv_extent, sentinel);
  std::vector<bool> written(mine.recv_extent, false);
  c.all_to_all_v(in.data(), mine.send_counts, mine.send_displs, out.data(), mine.recv_counts, mine.recv_displs);
  int64_t bad = 0;
  for (int k = 0; k < p; ++k) {
    const int64_t at = all_to_all_layout(k, p, salt).send_displs[r];  // where sender k keeps my block
    for (int64_t i = 0; i < mine.recv_counts[k]; ++i) {
      bad += !same_bits(out[mine.recv_displs[k] + i], test_value<T>(seed, k, at + i));
      written[mine.recv_displs[k] + i] = true;
    }
  }
  for (int64_t i = 0; i < mine.recv_extent; ++i) bad += !written[i] && !same_bits(out[i], sentinel);
  EXPECT_EQ(bad, 0) << "all_to_all_v " << scalar_type_name(scalar_type_of<T>()) << " salt=" << salt << " on rank " << r;
}

// The observer sees one kAllToAll with what this rank sent and received.
inline void check_all_to_all_observer(Comm& c) {
  std::vector<CommEvent> events;
  c.set_observer([&](const CommEvent& e) { events.push_back(e); });
  const AllToAllLayout l = all_to_all_layout(c.rank(), c.size(), 3);
  std::vector<float> in(l.send_extent, 1.0f), out(l.recv_extent);
  c.all_to_all_v(in.data(), l.send_counts, l.send_displs, out.data(), l.recv_counts, l.recv_displs,
                 Wire::of(DType::kBF16));
  c.all_to_all(in.data(), out.data(), 0);
  c.set_observer(nullptr);
  int64_t sent = 0, received = 0;
  for (int k = 0; k < c.size(); ++k) sent += l.send_counts[k], received += l.recv_counts[k];
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].op, CommOp::kAllToAll);
  EXPECT_STREQ(comm_op_name(events[0].op), "all_to_all");
  EXPECT_EQ(events[0].elements, sent);
  EXPECT_EQ(events[0].bytes, 2 * sent);
  EXPECT_EQ(events[0].recv_bytes, 2 * received);
  EXPECT_EQ(events[0].group_size, c.size());
  EXPECT_EQ(events[1].bytes, 0);
}

inline void check_all_to_all(Comm& c) {
  for (int64_t chunk : {0, 1, 5, 1000}) {
    check_all_to_all_type<float>(c, chunk);
    check_all_to_all_type<int64_t>(c, chunk);
  }
  check_all_to_all_type<double>(c, 33);
  check_all_to_all_type<int32_t>(c, 9);
  check_all_to_all_type<uint8_t>(c, 17);
  for (int salt : {0, 1, 2, 3, 250}) {
    check_all_to_all_v_type<float>(c, salt);
    check_all_to_all_v_type<int64_t>(c, salt);
  }
  check_all_to_all_v_type<double>(c, 4);
  check_all_to_all_v_type<int32_t>(c, 5);
  check_all_to_all_v_type<uint8_t>(c, 6);
  check_all_to_all_observer(c);
}

}  // namespace mtrain::parallel::testing
