// WriteLimiter: the burst, then one turn per 1/qps in the order callers asked; a caller whose
// turn would come after its send_by takes nothing and learns it at once. Reserve() is given
// the time explicitly, so the pacing is checked without sleeping.
#include "kube/write_limiter.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace gse {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);
const absl::Time kNever = absl::InfiniteFuture();

TEST(WriteLimiterTest, BurstThenOneTurnPerIntervalInTheOrderAsked) {
  WriteLimiter limiter(/*qps=*/10, /*burst=*/3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0) << "burst token " << i;
  // Then every caller gets the next free 100 ms slot, none overtaking another.
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0 + absl::Milliseconds(100));
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0 + absl::Milliseconds(200));
  EXPECT_EQ(limiter.Reserve(kT0 + absl::Milliseconds(50), kNever), kT0 + absl::Milliseconds(300));
}

TEST(WriteLimiterTest, ACallerWhoseTurnIsAfterItsSendByTakesNothing) {
  WriteLimiter limiter(/*qps=*/2, /*burst=*/1);
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0);
  // The next turn is at +500 ms: a caller that must send within 100 ms is told at once.
  EXPECT_EQ(limiter.Reserve(kT0, kT0 + absl::Milliseconds(100)), std::nullopt);
  EXPECT_EQ(limiter.Reserve(kT0, kT0 + absl::Milliseconds(499)), std::nullopt);
  // ... and took no turn: the next caller still gets +500 ms, exactly at its send_by.
  EXPECT_EQ(limiter.Reserve(kT0, kT0 + absl::Milliseconds(500)), kT0 + absl::Milliseconds(500));
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0 + absl::Seconds(1));
}

TEST(WriteLimiterTest, TokensRefillUpToTheBurstOnly) {
  WriteLimiter limiter(/*qps=*/10, /*burst=*/2);
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0);
  EXPECT_EQ(limiter.Reserve(kT0, kNever), kT0);
  // An hour idle refills 2 tokens, not 36,000.
  const absl::Time later = kT0 + absl::Hours(1);
  EXPECT_EQ(limiter.Reserve(later, kNever), later);
  EXPECT_EQ(limiter.Reserve(later, kNever), later);
  EXPECT_EQ(limiter.Reserve(later, kNever), later + absl::Milliseconds(100));
  // Half an interval later half a token has come back: the queue does not lose it.
  EXPECT_EQ(limiter.Reserve(later + absl::Milliseconds(50), kNever), later + absl::Milliseconds(200));
}

TEST(WriteLimiterTest, ZeroQpsIsNoLimit) {
  WriteLimiter limiter(/*qps=*/0, /*burst=*/1);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(limiter.Reserve(kT0, kT0), kT0);
  WriteLimiter::Grant g = limiter.Acquire(absl::InfinitePast());
  EXPECT_TRUE(g.sent);
  EXPECT_EQ(g.waited, absl::ZeroDuration());
}

TEST(WriteLimiterTest, AcquireSleepsUntilTheTurnOrReturnsAtOnceWithoutOne) {
  WriteLimiter limiter(/*qps=*/20, /*burst=*/1);  // a turn every 50 ms
  WriteLimiter::Grant first = limiter.Acquire(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(first.sent);
  EXPECT_EQ(first.waited, absl::ZeroDuration());
  const absl::Time before = absl::Now();
  WriteLimiter::Grant second = limiter.Acquire(absl::Now() + absl::Seconds(30));
  EXPECT_TRUE(second.sent);
  EXPECT_GT(second.waited, absl::ZeroDuration());
  EXPECT_GE(absl::Now() - before, second.waited);  // it did wait that long
  // A send_by that has passed: not sent, and no wait.
  WriteLimiter::Grant none = limiter.Acquire(absl::Now() - absl::Seconds(1));
  EXPECT_FALSE(none.sent);
  EXPECT_EQ(none.waited, absl::ZeroDuration());
}

TEST(WriteLimiterTest, ConcurrentCallersEachGetOneDistinctTurn) {
  // 8 threads x 50 writes at 2,000 qps with a burst of 100: every write is sent, the burst
  // at once and the rest paced; nothing is lost or given twice.
  WriteLimiter limiter(/*qps=*/2000, /*burst=*/100);
  std::atomic<int> sent{0};
  std::atomic<int> waited{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        WriteLimiter::Grant g = limiter.Acquire(absl::Now() + absl::Seconds(60));
        if (g.sent) ++sent;
        if (g.waited > absl::ZeroDuration()) ++waited;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(sent.load(), 400);
  EXPECT_GE(waited.load(), 1);  // 400 writes cannot all fit a burst of 100
}

}  // namespace
}  // namespace gse
