// The simulator's network model (core/network.h) on event sequences whose
// times can be worked out by hand.
#include "hsgd/core/network.h"

#include <gtest/gtest.h>

#include <cmath>

#include "hsgd/core/shards.h"

namespace hsgd {
namespace {

// Runs the network until it is empty: (delivery time, tag) in order.
std::vector<std::pair<double, int64_t>> drain(Network& net) {
  std::vector<std::pair<double, int64_t>> out;
  while (net.in_flight() > 0) {
    const double t = net.next_time();
    for (int64_t tag : net.advance(t)) out.push_back({t, tag});
  }
  return out;
}

std::vector<NodeLink> links(int n, double cap) { return std::vector<NodeLink>(n, {cap, cap}); }

TEST(Network, OneMessageBetweenIdleNodesTakesLatencyPlusBytesOverTheSlowerSide) {
  // Egress 100 B/s, the receiver's ingress 50 B/s: 100 bytes take 2 s.
  Network net({{100, 100}, {100, 50}}, 0.5, true);
  net.send(1.0, 0, 1, 100, 7);
  const auto d = drain(net);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_DOUBLE_EQ(d[0].first, 1.0 + 0.5 + 100.0 / 50.0);
  EXPECT_EQ(d[0].second, 7);
}

TEST(Network, TwoMessagesThroughOneInterfaceTakeTwiceAsLongAsOne) {
  Network one(links(3, 100), 0, true);
  one.send(0, 0, 1, 100, 1);
  const double alone = drain(one).back().first;
  Network two(links(3, 100), 0, true);
  two.send(0, 0, 1, 100, 1);  // both leave node 0's egress
  two.send(0, 0, 2, 100, 2);
  const auto d = drain(two);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_DOUBLE_EQ(alone, 1.0);
  EXPECT_DOUBLE_EQ(d[0].first, 2.0 * alone);
  EXPECT_DOUBLE_EQ(d[1].first, 2.0 * alone);
  EXPECT_EQ(d[0].second, 1);  // delivered together: in the order sent
  EXPECT_EQ(d[1].second, 2);
}

TEST(Network, ASaturatedServerDeliversCapacityOverNToEachOfNPushers) {
  // Workers 0..3 (1000 B/s each) push 100 bytes at once into server node 4
  // (100 B/s): 25 B/s each, all done at 4 s, then the latency.
  std::vector<NodeLink> l = links(5, 1000);
  l[4] = {100, 100};
  Network net(l, 0.01, true);
  for (int w = 0; w < 4; ++w) net.send(0, w, 4, 100, w);
  const auto d = drain(net);
  ASSERT_EQ(d.size(), 4u);
  for (int w = 0; w < 4; ++w) {
    EXPECT_DOUBLE_EQ(d[w].first, 4.0 + 0.01);
    EXPECT_EQ(d[w].second, w);
  }
}

TEST(Network, WhatASlowSenderLeavesIsSharedByTheOthers) {
  // Max-min: worker 0 sends at its own 10 B/s; the other three share the
  // server's remaining 90 B/s, 30 each. 60 bytes each: workers 1-3 done at
  // 2 s; worker 0 then has 40 bytes left, at 10 B/s (its egress): 6 s.
  std::vector<NodeLink> l = links(5, 1000);
  l[0] = {10, 1000};
  l[4] = {100, 100};
  Network net(l, 0, true);
  for (int w = 0; w < 4; ++w) net.send(0, w, 4, 60, w);
  const auto d = drain(net);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_DOUBLE_EQ(d[0].first, 2.0);
  EXPECT_DOUBLE_EQ(d[2].first, 2.0);
  EXPECT_EQ(d[3].second, 0);
  EXPECT_DOUBLE_EQ(d[3].first, 6.0);
}

TEST(Network, AMessageThatStartsLaterSharesFromThen) {
  // A (100 bytes) alone for 0.5 s at 100 B/s: 50 left. B (100 bytes) joins:
  // 50 B/s each, A done at 1.5 s; B has 50 left, alone again: 2.0 s.
  std::vector<NodeLink> l = links(3, 1000);
  l[2] = {100, 100};
  Network net(l, 0, true);
  net.send(0, 0, 2, 100, 1);
  EXPECT_TRUE(net.advance(0.5).empty());
  net.send(0.5, 1, 2, 100, 2);
  const auto d = drain(net);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_DOUBLE_EQ(d[0].first, 1.5);
  EXPECT_DOUBLE_EQ(d[1].first, 2.0);
}

TEST(Network, IndependentPricesEveryMessageAlone) {
  std::vector<NodeLink> l = links(5, 1000);
  l[4] = {100, 100};
  Network net(l, 0.01, false);
  for (int w = 0; w < 4; ++w) net.send(0, w, 4, 100, w);
  for (const auto& [t, tag] : drain(net)) EXPECT_DOUBLE_EQ(t, 1.0 + 0.01);
}

TEST(Network, EmptyMessagesTakeTheLatency) {
  Network net(links(2, 100), 0.25, true);
  net.send(2, 0, 1, 0, 3);
  const auto d = drain(net);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_DOUBLE_EQ(d[0].first, 2.25);
}

TEST(Network, BusiestInterfaceUtilisationAndBytesPerNode) {
  std::vector<NodeLink> l = links(3, 1000);
  l[2] = {100, 100};
  Network net(l, 0, true);
  const Network::Carried c0 = net.carried(0);
  net.send(0, 0, 2, 100, 1);
  net.send(0, 1, 2, 100, 2);
  // Half way: the server's ingress carried 100 bytes in 1 s of 100 B/s.
  const Network::Carried c1 = net.carried(1.0);
  EXPECT_DOUBLE_EQ(c1.received[2], 100);
  EXPECT_DOUBLE_EQ(net.busiest_util(c0, c1, 1.0), 1.0);
  drain(net);
  const Network::Carried c2 = net.carried(4.0);
  EXPECT_DOUBLE_EQ(c2.sent[0], 100);
  EXPECT_DOUBLE_EQ(c2.received[2], 200);
  EXPECT_DOUBLE_EQ(net.busiest_util(c0, c2, 4.0), 0.5);
}

TEST(Network, SaveAndLoadMidFlightDeliverTheSame) {
  std::vector<NodeLink> l = links(4, 1000);
  l[3] = {100, 300};
  const auto start = [&](Network& n) {
    n.send(0, 0, 3, 250, 1);
    n.send(0.1, 1, 3, 50, 2);
    n.send(0.2, 3, 2, 400, 3);
    n.advance(n.next_time());
  };
  Network a(l, 0.003, true);
  start(a);
  StateWriter w;
  a.save(w);
  Network b(l, 0.003, true);
  StateReader r(w.bytes(), "network");
  b.load(r);
  r.expect_end();
  b.send(0.9, 2, 3, 10, 4);
  a.send(0.9, 2, 3, 10, 4);
  const auto da = drain(a), db = drain(b);
  ASSERT_EQ(da.size(), db.size());
  for (size_t i = 0; i < da.size(); ++i) {
    EXPECT_EQ(da[i].first, db[i].first);  // bit for bit
    EXPECT_EQ(da[i].second, db[i].second);
  }
}

TEST(Network, ManyWorkersStayFast) {
  // 256 workers and 4 server shards, every worker with a message to every
  // shard and one back: completes (the test's timeout is the check).
  const int n = 256, S = 4;
  std::vector<NodeLink> l = links(n + S, 1.25e7);
  Network net(l, 1e-4, true);
  for (int w = 0; w < n; ++w) {
    for (int s = 0; s < S; ++s) {
      net.send(w * 1e-5, w, n + s, 2.5e5 / S, w);
      net.send(w * 1e-5, n + s, w, 2.5e5 / S, w);
    }
  }
  const auto d = drain(net);
  EXPECT_EQ(d.size(), static_cast<size_t>(2 * n * S));
  // Each shard's link carries 256 x 62.5 KB each way at 12.5 MB/s: 1.28 s.
  EXPECT_NEAR(d.back().first, 1.28, 0.01);
}

TEST(Shards, ContiguousSizesDifferingByAtMostOne) {
  const auto s = split_shards(10, 3);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].begin, 0u);
  EXPECT_EQ(s[0].size, 4u);
  EXPECT_EQ(s[1].begin, 4u);
  EXPECT_EQ(s[2].begin, 7u);
  EXPECT_EQ(s[2].size, 3u);
}

}  // namespace
}  // namespace hsgd
