// The launchers' line protocol on MASTER_ADDR:MASTER_PORT (rendezvous_protocol.h).
#include <gtest/gtest.h>

#include "mtrain/launch/rendezvous_protocol.h"

namespace mtrain::launch {
namespace {

std::string strip_newline(std::string s) {
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s.back(), '\n');
  s.pop_back();
  return s;
}

TEST(RdzvProtocol, HelloRoundTrips) {
  const std::string line = strip_newline(format_hello({3, 4, 8}));
  EXPECT_EQ(line, "MTRAIN-RDZV 1 node=3 nnodes=4 nproc=8");
  const auto h = parse_hello(line);
  ASSERT_TRUE(h);
  EXPECT_EQ(h->node, 3);
  EXPECT_EQ(h->nnodes, 4);
  EXPECT_EQ(h->nproc, 8);
}

TEST(RdzvProtocol, ForeignTrafficIsNotAHello) {
  for (const char* bad :
       {"", "GET / HTTP/1.1", "MTRAIN-RDZV 2 node=1 nnodes=2 nproc=1", "MTRAIN-RDZV 1 node=1 nnodes=2",
        "MTRAIN-RDZV 1 node=x nnodes=2 nproc=1", "MTRAIN-RDZV 1 node=1 nnodes=2 nproc=1 extra"}) {
    EXPECT_FALSE(parse_hello(bad)) << bad;
  }
}

TEST(RdzvProtocol, Node0ChecksEveryHello) {
  EXPECT_EQ(check_hello({1, 2, 2}, 2, 2, {}), "");
  EXPECT_EQ(check_hello({1, 3, 2}, 2, 2, {}), "NNODES differs: node 1 has NNODES=3, node 0 has 2");
  EXPECT_EQ(check_hello({1, 2, 4}, 2, 2, {}),
            "NPROC_PER_NODE differs: node 1 has 4, node 0 has 2 (every node must run the same count)");
  EXPECT_EQ(check_hello({0, 2, 2}, 2, 2, {}), "NODE_RANK=0 is not in 1..1");
  EXPECT_EQ(check_hello({2, 3, 2}, 3, 2, {2}), "NODE_RANK=2 joined twice (two nodes with the same NODE_RANK?)");
}

TEST(RdzvProtocol, RepliesCarryTheUriVerbatim) {
  const auto ok = parse_reply(strip_newline(format_ok("mtrain29500x1f", "882507776.0;tcp://10.0.0.1,10.1.0.1:52339")));
  ASSERT_TRUE(ok);
  EXPECT_TRUE(ok->ok);
  EXPECT_EQ(ok->job_id, "mtrain29500x1f");
  EXPECT_EQ(ok->uri, "882507776.0;tcp://10.0.0.1,10.1.0.1:52339");
  const auto err = parse_reply(strip_newline(format_err("NNODES differs")));
  ASSERT_TRUE(err);
  EXPECT_FALSE(err->ok);
  EXPECT_EQ(err->error, "NNODES differs");
  EXPECT_FALSE(parse_reply("OK onlyone"));
  EXPECT_FALSE(parse_reply("HELLO"));
}

TEST(RdzvProtocol, DoneCarriesTheExitCode) {
  EXPECT_EQ(parse_done(strip_newline(format_done(0))), 0);
  EXPECT_EQ(parse_done(strip_newline(format_done(137))), 137);
  EXPECT_FALSE(parse_done("DONE"));
  EXPECT_FALSE(parse_done("DONE -1"));
  EXPECT_FALSE(parse_done("DONE 999"));
}

}  // namespace
}  // namespace mtrain::launch
