// Communicators that need no other process:
// - SelfComm: a group of one rank (single-device runs, TP=1 groups without
//   MPI). Reductions and broadcasts leave data as is; reduce_scatter and
//   all_gather copy; send_recv and all_to_all(_v) to itself copy. Non-blocking collectives
//   complete at start (still reported at wait()).
// - MetaComm: rank `rank` of a group of `size` for shape-only dry runs. Moves
//   no data (buffers may be null) but reports every call to the observer, so
//   the cost model sees exactly the traffic a real run would make; a
//   non-blocking collective is complete at once and reported at wait().
#pragma once

#include "parallel/comm.h"

namespace mtrain::parallel {

class SelfComm final : public Comm {
 public:
  explicit SelfComm(std::string name = "self") : Comm(std::move(name)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  void do_all_reduce(void*, int64_t, ScalarType, ReduceOp) override {}
  void do_reduce_scatter(const void* in, void* out, int64_t chunk, ScalarType t, ReduceOp) override;
  void do_all_gather(const void* in, void* out, int64_t chunk, ScalarType t) override;
  void do_broadcast(void*, int64_t, ScalarType, int) override {}
  void do_send(const void*, int64_t, ScalarType, int, int) override {}  // unreachable: no peer exists
  void do_recv(void*, int64_t, ScalarType, int, int) override {}
  void do_send_recv(const void* send_data, int64_t send_n, int dest, void* recv_data, int64_t recv_n, int src,
                    ScalarType t, int tag) override;
  void do_barrier() override {}
  // Copies the one block (to itself).
  void do_all_to_all_v(const void* in, const int64_t* send_counts, const int64_t* send_displs, void* out,
                       const int64_t* recv_counts, const int64_t* recv_displs, ScalarType t) override;
  std::unique_ptr<detail::PendingSend> do_isend(const void*, int64_t, ScalarType, int, int) override {
    return nullptr;  // unreachable: no peer exists
  }
  // Complete at once: the sum over one rank is its own data.
  std::unique_ptr<detail::PendingCollective> do_start_all_reduce(void*, int64_t, ScalarType, ReduceOp) override {
    return nullptr;
  }
  std::unique_ptr<detail::PendingCollective> do_start_reduce_scatter(const void* in, void* out, int64_t chunk,
                                                                     ScalarType t, ReduceOp op) override {
    do_reduce_scatter(in, out, chunk, t, op);
    return nullptr;
  }
  std::unique_ptr<detail::PendingCollective> do_start_all_gather(const void* in, void* out, int64_t chunk,
                                                                 ScalarType t) override {
    do_all_gather(in, out, chunk, t);
    return nullptr;
  }
};

class MetaComm final : public Comm {
 public:
  MetaComm(std::string name, int rank, int size);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool moves_data() const override { return false; }

 protected:
  void do_all_reduce(void*, int64_t, ScalarType, ReduceOp) override {}
  void do_reduce_scatter(const void*, void*, int64_t, ScalarType, ReduceOp) override {}
  void do_all_gather(const void*, void*, int64_t, ScalarType) override {}
  void do_broadcast(void*, int64_t, ScalarType, int) override {}
  void do_send(const void*, int64_t, ScalarType, int, int) override {}
  void do_recv(void*, int64_t, ScalarType, int, int) override {}
  void do_send_recv(const void*, int64_t, int, void*, int64_t, int, ScalarType, int) override {}
  void do_barrier() override {}
  void do_all_to_all_v(const void*, const int64_t*, const int64_t*, void*, const int64_t*, const int64_t*,
                       ScalarType) override {}
  std::unique_ptr<detail::PendingSend> do_isend(const void*, int64_t, ScalarType, int, int) override {
    return nullptr;  // nothing to deliver: complete at once
  }
  std::unique_ptr<detail::PendingCollective> do_start_all_reduce(void*, int64_t, ScalarType, ReduceOp) override {
    return nullptr;
  }
  std::unique_ptr<detail::PendingCollective> do_start_reduce_scatter(const void*, void*, int64_t, ScalarType,
                                                                     ReduceOp) override {
    return nullptr;
  }
  std::unique_ptr<detail::PendingCollective> do_start_all_gather(const void*, void*, int64_t, ScalarType) override {
    return nullptr;
  }

 private:
  int rank_, size_;
};

}  // namespace mtrain::parallel
