// The simulators' shared cores (runtime/sim_cores.h): unlimited cores start
// every task at once; C cores start C tasks and line up the rest, first
// come first served; a task that leaves the line is dropped from it; the
// state round-trips.
#include "hsgd/runtime/sim_cores.h"

#include <gtest/gtest.h>

#include "hsgd/core/error.h"

namespace hsgd {
namespace {

TEST(CorePool, UnlimitedStartsEveryTask) {
  CorePool pool(0);
  EXPECT_FALSE(pool.limited());
  for (int w = 0; w < 100; ++w) EXPECT_TRUE(pool.acquire(w));
}

TEST(CorePool, TasksBeyondTheCoresWaitInLineFirstComeFirstServed) {
  CorePool pool(2);
  EXPECT_TRUE(pool.limited());
  EXPECT_TRUE(pool.acquire(3));
  EXPECT_TRUE(pool.acquire(-1));  // a server shard
  EXPECT_FALSE(pool.acquire(0));
  EXPECT_FALSE(pool.acquire(2));
  EXPECT_FALSE(pool.acquire(1));
  pool.drop(2);  // worker 2 left while in line
  EXPECT_EQ(pool.release(), (std::vector<int64_t>{0}));
  EXPECT_EQ(pool.release(), (std::vector<int64_t>{1}));
  EXPECT_EQ(pool.release(), std::vector<int64_t>{});  // a core free now
  EXPECT_TRUE(pool.acquire(4));
  EXPECT_FALSE(pool.acquire(5));
}

TEST(CorePool, SaveLoadRoundTripsAndRefusesMoreFreeCoresThanCores) {
  CorePool a(1);
  a.acquire(0);
  a.acquire(2);
  a.acquire(1);
  StateWriter w;
  a.save(w);
  CorePool b(1);
  StateReader r(w.bytes(), "cores");
  b.load(r);
  StateWriter w2;
  b.save(w2);
  EXPECT_EQ(w.bytes(), w2.bytes());
  EXPECT_EQ(b.release(), (std::vector<int64_t>{2}));
  EXPECT_EQ(b.release(), (std::vector<int64_t>{1}));

  StateWriter bad;
  bad.put<int32_t>(3);
  bad.put_vec(std::vector<int64_t>{});
  CorePool c(2);
  StateReader rb(bad.bytes(), "cores");
  EXPECT_THROW(c.load(rb), InputError);
}

}  // namespace
}  // namespace hsgd
