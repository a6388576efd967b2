// ElasticThreadPool: a task never waits while a thread may be started (up to `max`), spares
// are started off the caller's path, extra workers end when idle (spares stay while others are
// busy), Shutdown runs what is queued and joins, many enqueuers at once.
#include "extender/elastic_thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace gse {
namespace {

using testing::Eventually;

// A task that blocks until released, as a connection whose bind waits on the API server.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<int> entered{0};
  std::atomic<int> finished{0};
  std::function<void()> Task() {
    return [this] {
      ++entered;
      while (!open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++finished;
    };
  }
};

TEST(ElasticThreadPoolTest, BlockedTasksDoNotHoldBackANewOneWhileThreadsMayBeStarted) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 5;
  ElasticThreadPool pool(o);
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.Enqueue(gate.Task());
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 4; }));
  // Four tasks block, one warm worker: the fifth still runs at once, on a fifth thread.
  std::atomic<bool> ran{false};
  pool.Enqueue([&] { ran.store(true); });
  EXPECT_TRUE(Eventually([&] { return ran.load(); }));
  // The launcher counts a start once the thread exists, which may be after the new worker
  // ran the task (seen under TSan): wait for the count, not for a moment.
  EXPECT_TRUE(Eventually([&] { return pool.stats().started == 5; })) << pool.stats().started;
  ElasticThreadPool::Stats s = pool.stats();
  EXPECT_EQ(s.threads, 5u);
  EXPECT_EQ(s.started, 5);
  EXPECT_EQ(s.waited_at_max, 0);
  gate.open.store(true);
  EXPECT_TRUE(Eventually([&] { return gate.finished.load() == 4; }));
}

TEST(ElasticThreadPoolTest, AtTheMaximumTasksWaitForAWorker) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 2;
  ElasticThreadPool pool(o);
  Gate gate;
  pool.Enqueue(gate.Task());
  pool.Enqueue(gate.Task());
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 2; }));
  std::atomic<bool> ran{false};
  pool.Enqueue([&] { ran.store(true); });
  EXPECT_EQ(pool.stats().queued, 1u);
  EXPECT_EQ(pool.stats().threads, 2u);
  EXPECT_GE(pool.stats().waited_at_max, 1);
  EXPECT_FALSE(ran.load());
  gate.open.store(true);
  EXPECT_TRUE(Eventually([&] { return ran.load(); }));
  EXPECT_EQ(pool.stats().started, 2);
}

TEST(ElasticThreadPoolTest, SpareWorkersAreStartedAheadOfDemand) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 16;
  o.spare = 3;
  ElasticThreadPool pool(o);
  Gate gate;
  pool.Enqueue(gate.Task());
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 1; }));
  // One task busy: three more workers wait idle for the next ones, before they come.
  EXPECT_TRUE(Eventually([&] { return pool.stats().threads == 4u && pool.stats().busy == 1u; }));
  gate.open.store(true);
}

// Enqueue runs on cpp-httplib's accept thread: while spares are ready it hands the task over
// and never starts a thread itself (a thread start there delays this connection and the ones
// behind it); the keeper restores the spares.
TEST(ElasticThreadPoolTest, EnqueueStartsNoThreadWhileASpareIsReady) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 16;
  o.spare = 2;
  ElasticThreadPool pool(o);
  Gate gate;
  pool.Enqueue(gate.Task());  // the warm worker takes it
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 1; }));
  for (int i = 2; i <= 4; ++i) {
    // Ready before each task: `spare` idle workers besides the busy ones.
    ASSERT_TRUE(Eventually([&] {
      const ElasticThreadPool::Stats s = pool.stats();
      return s.threads == static_cast<size_t>(i - 1) + 2 && s.busy == static_cast<size_t>(i - 1);
    })) << "task " << i;
    pool.Enqueue(gate.Task());
    ASSERT_TRUE(Eventually([&] { return gate.entered.load() == i; }));
  }
  EXPECT_TRUE(Eventually([&] { return pool.stats().threads == 6u; }));
  EXPECT_EQ(pool.stats().started_by_enqueue, 0);
  EXPECT_EQ(pool.stats().waited_at_max, 0);
  gate.open.store(true);
  EXPECT_TRUE(Eventually([&] { return gate.finished.load() == 4; }));
}

// Beyond the warm ones idle workers end, but while others are busy `spare` of them stay: the
// next connection must not find none ready after a quiet minute.
TEST(ElasticThreadPoolTest, SparesStayWhileWorkersAreBusy) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 16;
  o.spare = 2;
  o.idle_timeout = absl::Milliseconds(20);
  ElasticThreadPool pool(o);
  Gate gate;
  for (int i = 0; i < 6; ++i) pool.Enqueue(gate.Task());
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 6; }));
  absl::SleepFor(absl::Milliseconds(200));  // several idle timeouts
  EXPECT_EQ(pool.stats().threads, 8u);  // 6 busy + 2 spare
  gate.open.store(true);
  // Nothing busy: down to the warm one.
  EXPECT_TRUE(Eventually([&] { return pool.stats().threads == 1u; }));
}

TEST(ElasticThreadPoolTest, ExtraWorkersEndWhenIdleAndTheWarmOnesStay) {
  ElasticThreadPoolOptions o;
  o.warm = 2;
  o.max = 8;
  o.idle_timeout = absl::Milliseconds(50);
  ElasticThreadPool pool(o);
  Gate gate;
  for (int i = 0; i < 8; ++i) pool.Enqueue(gate.Task());
  ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 8; }));
  EXPECT_EQ(pool.stats().threads, 8u);
  gate.open.store(true);
  EXPECT_TRUE(Eventually([&] { return pool.stats().threads == 2u; }));
  // Ended workers are joined and replaced on demand.
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) pool.Enqueue([&] { ++ran; });
  EXPECT_TRUE(Eventually([&] { return ran.load() == 3; }));
  absl::SleepFor(absl::Milliseconds(200));  // several idle timeouts: still the warm two
  EXPECT_EQ(pool.stats().threads, 2u);
}

TEST(ElasticThreadPoolTest, ShutdownRunsWhatIsQueuedAndJoins) {
  ElasticThreadPoolOptions o;
  o.warm = 1;
  o.max = 1;
  std::atomic<int> ran{0};
  {
    ElasticThreadPool pool(o);
    Gate gate;
    pool.Enqueue(gate.Task());
    ASSERT_TRUE(Eventually([&] { return gate.entered.load() == 1; }));
    for (int i = 0; i < 5; ++i) pool.Enqueue([&] { ++ran; });
    std::thread opener([&] {
      absl::SleepFor(absl::Milliseconds(20));
      gate.open.store(true);
    });
    pool.Shutdown();
    opener.join();
    EXPECT_EQ(ran.load(), 5);
    EXPECT_EQ(pool.stats().threads, 0u);
    // After Shutdown a task runs on the caller's thread.
    pool.Enqueue([&] { ++ran; });
    EXPECT_EQ(ran.load(), 6);
  }
}

TEST(ElasticThreadPoolTest, ManyEnqueuersAtOnce) {
  ElasticThreadPoolOptions o;
  o.warm = 2;
  o.max = 16;
  o.idle_timeout = absl::Milliseconds(5);  // workers come and go while tasks arrive
  std::atomic<int> ran{0};
  {
    ElasticThreadPool pool(o);
    std::vector<std::thread> enqueuers;
    for (int t = 0; t < 8; ++t) {
      enqueuers.emplace_back([&] {
        for (int i = 0; i < 200; ++i) {
          pool.Enqueue([&] { ++ran; });
          if (i % 50 == 0) absl::SleepFor(absl::Milliseconds(10));
        }
      });
    }
    for (std::thread& t : enqueuers) t.join();
    pool.Shutdown();
    EXPECT_LE(pool.stats().started, 8 * 200 + 2);
  }
  EXPECT_EQ(ran.load(), 1600);
}

}  // namespace
}  // namespace gse
