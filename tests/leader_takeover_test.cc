// What a take-over looks like from the Lease, on the local API server: the follower reports
// who leads (holderIdentity while the record is live on its clock), takes over only after the
// dead leader's record expired on its clock and then without waiting another retry period,
// counts its transitions and bounds the leaderless time; and with kube-scheduler's default
// durations (15 s / 10 s / 2 s) a crashed leader is replaced within the documented
// lease duration + 1.2 x retry period after its last renewal (docs/failover.md). The last test
// takes ~16 s of wall time (sleeping) and prints the measurement.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/leader_election.h"
#include "rapidjson/document.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using testing::Eventually;
using testing::FakeApiServer;

class LeaderTakeoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
    ASSERT_TRUE(client_->CheckReachable(1, absl::Milliseconds(10)).ok());
  }

  // Short durations by default (lease 1 s, renew deadline 600 ms, retry 200 ms).
  std::unique_ptr<LeaderElector> Elector(const std::string& id, bool release_on_stop,
                                         std::optional<LeaderElectionOptions> base = std::nullopt) {
    LeaderElectionOptions o;
    if (base) {
      o = *base;
    } else {
      o.lease_duration = absl::Seconds(1);
      o.renew_deadline = absl::Milliseconds(600);
      o.retry_period = absl::Milliseconds(200);
    }
    o.identity = id;
    o.release_on_stop = release_on_stop;
    o.log = [](const std::string&) {};
    o.on_change = [this, id](bool leading) {
      absl::MutexLock lock(&mu_);
      events_.push_back({absl::Now(), absl::StrCat(id, leading ? "+" : "-")});
    };
    o.on_holder = [this, id](const std::string& holder) {
      absl::MutexLock lock(&mu_);
      events_.push_back({absl::Now(), absl::StrCat(id, " sees ", holder.empty() ? "nobody" : holder)});
    };
    return std::make_unique<LeaderElector>(client_.get(), o);
  }

  struct Event {
    absl::Time at;
    std::string what;
  };
  std::optional<absl::Time> When(const std::string& what) {
    absl::MutexLock lock(&mu_);
    for (const Event& e : events_) {
      if (e.what == what) return e.at;
    }
    return std::nullopt;
  }

  // The renewTime the Lease carries now (written by the holder, on this machine's clock).
  absl::Time RenewTime() {
    rapidjson::Document d;
    d.Parse(fake_.Get("leases", "gpu-slice-extender", "gpu-slice-extender")->c_str());
    absl::Time t;
    std::string error;
    EXPECT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", d["spec"]["renewTime"].GetString(), &t, &error))
        << error;
    return t;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
  absl::Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
};

TEST_F(LeaderTakeoverTest, TheFollowerKnowsWhoLeadsAndMeasuresTheGapAtATakeOver) {
  auto a = Elector("extender-a", /*release_on_stop=*/false);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(3)));
  EXPECT_EQ(a->holder(), "extender-a");
  auto b = Elector("extender-b", true);
  b->Start();
  ASSERT_TRUE(Eventually([&] { return b->holder() == "extender-a"; }, absl::Seconds(3)));
  EXPECT_FALSE(b->IsLeader());
  // b watches a renew a few times (every 200 ms): it sees the last renewal happen between two
  // of its reads, which is what bounds the leaderless time. (A follower that never saw the
  // record change cannot bound it and does not report one.)
  absl::SleepFor(absl::Milliseconds(800));
  a->Stop();  // as after SIGKILL: the lease stays as it was
  const absl::Time last_renewal = RenewTime();
  // Wait for the callback's record, not IsLeader(): the elector flips its flag first and
  // calls on_change after, so reading the events as soon as IsLeader() is true races it.
  ASSERT_TRUE(Eventually([&] { return When("extender-b+").has_value(); }, absl::Seconds(5)));
  // Order, not tight times: b took over no earlier than a lease duration after a's last
  // renewal, and in between it stopped reporting a as the leader (expired on its clock).
  const std::optional<absl::Time> nobody = When("extender-b sees nobody");
  const std::optional<absl::Time> took = When("extender-b+");
  ASSERT_TRUE(nobody && took);
  EXPECT_GE(*took - last_renewal, absl::Seconds(1));
  EXPECT_LE(*nobody, *took);
  EXPECT_EQ(b->holder(), "extender-b");
  const LeadershipStats stats = b->stats();
  EXPECT_EQ(stats.acquisitions, 1);
  EXPECT_EQ(stats.losses, 0);
  EXPECT_EQ(stats.leaderless_measured, 1);
  // An upper bound of the gap since a's last renewal: at least the lease duration.
  EXPECT_GE(stats.last_leaderless, absl::Seconds(1));
  EXPECT_EQ(stats.leaderless_total, stats.last_leaderless);
  EXPECT_EQ(a->stats().losses, 1);
  b->Stop();
}

TEST_F(LeaderTakeoverTest, AReleasedLeaseIsTakenAtTheNextPollWithASmallGap) {
  auto a = Elector("extender-a", /*release_on_stop=*/true);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(3)));
  auto b = Elector("extender-b", true);
  b->Start();
  ASSERT_TRUE(Eventually([&] { return b->holder() == "extender-a"; }, absl::Seconds(3)));
  a->Stop();
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, absl::Seconds(3)));
  const LeadershipStats stats = b->stats();
  EXPECT_EQ(stats.leaderless_measured, 1);
  // The released record is taken at b's first look at it: the bound is b's poll period
  // (200-240 ms) plus the calls, far below the lease duration.
  EXPECT_LT(stats.last_leaderless, absl::Seconds(1));
  b->Stop();
}

// kube-scheduler's defaults, as the binary's flags default to: the figure docs/failover.md
// states (take-over at most lease duration + 1.2 x retry period = 17.4 s after the leader's
// last renewal, never before 15 s) is what happens. Before the fix a follower could wait up
// to another 2.4 s past the expiry (its next jittered poll): 19.8 s.
TEST_F(LeaderTakeoverTest, WithDefaultDurationsACrashedLeaderIsReplacedWithinTheDocumentedTime) {
  const LeaderElectionOptions defaults;
  ASSERT_EQ(defaults.lease_duration, absl::Seconds(15));
  ASSERT_EQ(defaults.retry_period, absl::Seconds(2));
  auto a = Elector("extender-a", /*release_on_stop=*/false, defaults);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(5)));
  auto b = Elector("extender-b", true, defaults);
  b->Start();
  ASSERT_TRUE(Eventually([&] { return b->holder() == "extender-a"; }, absl::Seconds(5)));
  // Let b see a few renewals, then crash a right after one (b's next look at the record may
  // come up to 2.4 s later: the worst case for the observation lag is covered by the bound).
  absl::SleepFor(absl::Seconds(1));
  a->Stop();
  const absl::Time crashed = absl::Now();
  const absl::Time last_renewal = RenewTime();
  ASSERT_TRUE(Eventually([&] { return When("extender-b+").has_value(); }, absl::Seconds(30)));
  const absl::Time took = *When("extender-b+");
  std::printf("default durations: take-over %s after the last renewal, %s after the crash\n",
              absl::FormatDuration(took - last_renewal).c_str(),
              absl::FormatDuration(took - crashed).c_str());
  EXPECT_GE(took - last_renewal, defaults.lease_duration);
  // The documented bound, plus one second for the Lease calls on a loaded CI machine.
  EXPECT_LE(took - last_renewal,
            defaults.lease_duration + defaults.retry_period * 1.2 + absl::Seconds(1));
  b->Stop();
}

}  // namespace
}  // namespace gse
