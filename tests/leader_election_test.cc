// Leader election on a coordination.k8s.io/v1 Lease served by the fake API server, with short
// durations (lease 1s, renew deadline 0.6s, retry 0.2s): exactly one leader, take-over within a
// lease duration, and a leader that loses the lease (or cannot renew) stops at once.
#include "kube/leader_election.h"

#include <atomic>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;

constexpr char kLeasePath[] = "/apis/coordination.k8s.io/v1/namespaces/gpu-slice-extender/leases/gpu-slice-extender";

using testing::Eventually;

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
    // As LiveCluster::Connect does before any thread starts. (It also makes libcpp-httplib
    // build its function-local static regex in this thread: the library is not instrumented,
    // so TSan cannot see the guard that orders that for the electors' threads.)
    ASSERT_TRUE(client_->CheckReachable(1, absl::Milliseconds(10)).ok());
  }

  // Short leases (1 s / 600 ms / 200 ms) unless a test needs a wide gap between what it
  // expects and the alternative it rules out (then it passes longer ones).
  std::unique_ptr<LeaderElector> Elector(const std::string& id, bool release_on_stop = true,
                                         absl::Duration lease_duration = absl::Seconds(1),
                                         absl::Duration renew_deadline = absl::Milliseconds(600)) {
    LeaderElectionOptions o;
    o.identity = id;
    o.lease_duration = lease_duration;
    o.renew_deadline = renew_deadline;
    o.retry_period = absl::Milliseconds(200);
    o.release_on_stop = release_on_stop;
    o.log = [](const std::string&) {};
    o.on_change = [this, id](bool leading) {
      absl::MutexLock lock(&mu_);
      changes_.push_back(absl::StrCat(id, leading ? "+" : "-"));
    };
    return std::make_unique<LeaderElector>(client_.get(), o);
  }

  // A MicroTime field of the Lease's spec (renewTime, acquireTime).
  absl::Time LeaseTime(const char* field) {
    absl::Time t = absl::InfinitePast();
    std::string error;
    rapidjson::Document lease = Lease();
    EXPECT_TRUE(lease.IsObject() && lease["spec"].HasMember(field)) << field;
    if (!lease.IsObject() || !lease["spec"].HasMember(field)) return t;
    EXPECT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", lease["spec"][field].GetString(), &t, &error))
        << field << ": " << error;
    return t;
  }

  rapidjson::Document Lease() {
    rapidjson::Document doc;
    std::optional<std::string> lease = fake_.Get("leases", "gpu-slice-extender", "gpu-slice-extender");
    if (lease) doc.Parse(lease->c_str());
    return doc;
  }

  std::vector<std::string> Changes() {
    absl::MutexLock lock(&mu_);
    return changes_;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
  absl::Mutex mu_;
  std::vector<std::string> changes_ ABSL_GUARDED_BY(mu_);
};

TEST_F(LeaderElectionTest, ExactlyOneOfTwoLeadsAndTheLeaseNamesIt) {
  auto a = Elector("extender-a");
  auto b = Elector("extender-b");
  a->Start();
  b->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() || b->IsLeader(); }, absl::Seconds(3)));
  // Watch them for more than a lease duration: never two leaders, always one.
  absl::Time until = absl::Now() + absl::Milliseconds(1500);
  while (absl::Now() < until) {
    const int leaders = (a->IsLeader() ? 1 : 0) + (b->IsLeader() ? 1 : 0);
    ASSERT_EQ(leaders, 1);
    absl::SleepFor(absl::Milliseconds(5));
  }
  LeaderElector* leader = a->IsLeader() ? a.get() : b.get();
  rapidjson::Document lease = Lease();
  ASSERT_TRUE(lease.IsObject());
  EXPECT_STREQ(lease["kind"].GetString(), "Lease");
  EXPECT_EQ(std::string(lease["spec"]["holderIdentity"].GetString()), leader->identity());
  EXPECT_EQ(lease["spec"]["leaseDurationSeconds"].GetInt(), 1);
  const std::regex micro_time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  EXPECT_TRUE(std::regex_match(std::string(lease["spec"]["renewTime"].GetString()), micro_time));
  EXPECT_TRUE(std::regex_match(std::string(lease["spec"]["acquireTime"].GetString()), micro_time));
  EXPECT_EQ(leader->acquisitions(), 1);
  // Two electors racing for one lease (create, conditional updates) is not an API failure.
  EXPECT_EQ(a->lease_errors(), 0);
  EXPECT_EQ(b->lease_errors(), 0);
  b->Stop();
  a->Stop();
}

TEST_F(LeaderElectionTest, StoppedLeaderReleasesAndTheOtherTakesOverQuickly) {
  // A 20 s lease: b can only lead within the 5 s below because a released it, never by
  // waiting for it to expire (a renewed it every 200 ms until it stopped).
  const absl::Duration lease = absl::Seconds(20), renew = absl::Seconds(12);
  auto a = Elector("extender-a", /*release_on_stop=*/true, lease, renew);
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(2)));
  auto b = Elector("extender-b", /*release_on_stop=*/true, lease, renew);
  b->Start();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(b->IsLeader());
  a->Stop();
  EXPECT_FALSE(a->IsLeader());
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, absl::Seconds(5)));
  EXPECT_EQ(Lease()["spec"]["leaseTransitions"].GetInt(), 1);
  EXPECT_THAT(Changes(), ::testing::ElementsAre("extender-a+", "extender-a-", "extender-b+"));
  b->Stop();
}

TEST_F(LeaderElectionTest, CrashedLeaderIsReplacedAfterTheLeaseExpires) {
  auto a = Elector("extender-a", /*release_on_stop=*/false);  // as after SIGKILL: no release
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(2)));
  auto b = Elector("extender-b");
  b->Start();
  absl::SleepFor(absl::Milliseconds(300));
  a->Stop();
  const absl::Time last_renewal = LeaseTime("renewTime");  // a's, left as it crashed
  ASSERT_TRUE(Eventually([&] { return b->IsLeader(); }, absl::Seconds(5)));
  // Not before the lease expired: b took it a lease duration (1 s) or more after a's last
  // renewal, by the times the Lease itself records. (No wall-clock bound of the test's own:
  // "b does not lead 500 ms after the crash" failed on a loaded CI machine whose sleep ran
  // past the lease's expiry, with b's takeover as correct as ever.)
  EXPECT_GE(LeaseTime("acquireTime") - last_renewal, absl::Seconds(1));
  EXPECT_EQ(Lease()["spec"]["holderIdentity"].GetString(), std::string("extender-b"));
  b->Stop();
}

TEST_F(LeaderElectionTest, LeaderThatSeesAnotherHolderStopsAtOnce) {
  // A 12 s renew deadline: stepping down within the 5 s below shows it stopped on seeing the
  // other holder (its next renewal, every 200 ms), not on missing the deadline.
  auto a = Elector("extender-a", /*release_on_stop=*/true, absl::Seconds(20), absl::Seconds(12));
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(2)));
  // Someone else takes the lease (an operator, a replica with a skewed view).
  ASSERT_TRUE(fake_.Mutate("leases", "gpu-slice-extender", "gpu-slice-extender",
                           [](rapidjson::Document& d) {
                             d["spec"]["holderIdentity"].SetString("intruder", d.GetAllocator());
                           })
                  .ok());
  ASSERT_TRUE(Eventually([&] { return !a->IsLeader(); }, absl::Seconds(5)));
  EXPECT_FALSE(a->LeaseValid());  // fenced at once, long before its renew deadline
  // IsLeader() turns false before on_change runs (outside the elector's lock): wait for it.
  EXPECT_TRUE(Eventually([&] { return Changes().back() == "extender-a-"; }, absl::Seconds(1)));
  a->Stop();
}

TEST_F(LeaderElectionTest, LeaderThatCannotRenewStepsDownBeforeTheLeaseExpires) {
  auto a = Elector("extender-a");
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(2)));
  FakeApiServer::Fault down;
  down.path_contains = "/leases";
  down.times = -1;
  down.status = 503;
  fake_.AddFault(down);
  ASSERT_TRUE(Eventually([&] { return !a->IsLeader(); }, absl::Seconds(2)));
  const absl::Time stepped_down = absl::Now();
  EXPECT_GE(a->lease_errors(), 2);  // renewals kept failing until the renew deadline
  // The last successful renewal is what the lease says; the leader kept leading until the
  // renew deadline (600 ms) after it, not less. That it decides nothing after that point,
  // before a follower may take over (1 s), is the fencing test's exact check below (a timed
  // upper bound here would measure this machine's scheduling, not the elector).
  EXPECT_GE(stepped_down - LeaseTime("renewTime"), absl::Milliseconds(600));
  fake_.ClearFaults();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader(); }, absl::Seconds(3)));  // and it comes back
  a->Stop();
}

// Fencing (issue 12): while renewals fail, the Lease stays valid for binds until the start of
// the last successful renewal (the renewTime it wrote) plus the renew deadline, on this
// replica's clock, and no longer: the leader steps down then, and a follower may take over
// only a lease duration after it saw that renewal.
TEST_F(LeaderElectionTest, LeaseValidityEndsAtTheLastRenewalsStartPlusTheRenewDeadline) {
  auto a = Elector("extender-a");
  EXPECT_FALSE(a->LeaseValid());  // not started: never valid
  a->Start();
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() && a->LeaseValid(); }, absl::Seconds(2)));
  FakeApiServer::Fault down;
  down.path_contains = "/leases";
  down.times = -1;
  down.status = 503;
  fake_.AddFault(down);
  // Sample validity against the clock until the elector steps down: every sample taken
  // wholly before the end must say valid, every sample taken wholly after it must not.
  absl::Time end = absl::InfinitePast();  // the last end seen while it led
  int samples_before_end = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (absl::Now() < give_up) {
    const bool leading = a->IsLeader();
    const absl::Time until = a->lease_valid_until();
    const absl::Time t1 = absl::Now();
    const bool valid = a->LeaseValid();
    const absl::Time t2 = absl::Now();
    // A renewal (one in flight when the fault was added) or the step-down may move the end
    // meanwhile: such a sample says nothing.
    if (a->lease_valid_until() != until) continue;
    if (until != absl::InfinitePast()) end = until;
    if (until != absl::InfinitePast() && t2 < until) {
      ASSERT_TRUE(valid) << "invalid " << absl::FormatDuration(until - t2) << " before the end";
      ++samples_before_end;
    } else if (t1 >= until) {
      ASSERT_FALSE(valid) << "valid " << absl::FormatDuration(t1 - until) << " after the end";
    }
    if (!leading) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_FALSE(a->IsLeader()) << "renewals failed for 5 s and it still leads";
  EXPECT_FALSE(a->LeaseValid());
  EXPECT_EQ(a->lease_valid_until(), absl::InfinitePast());  // stepped down: invalid for good
  EXPECT_GT(samples_before_end, 0);
  EXPECT_GE(a->lease_errors(), 1);
  EXPECT_TRUE(Eventually([&] { return Changes().back() == "extender-a-"; }, absl::Seconds(1)));
  // The end was the last successful renewal's start — the renewTime the Lease still holds,
  // written with microseconds — plus the renew deadline (600 ms): not the moment its answer
  // came. A follower counts its lease duration (1 s) from when it saw that write, later.
  absl::Time last_renewal;
  std::string error;
  ASSERT_TRUE(absl::ParseTime("%Y-%m-%dT%H:%M:%E*SZ", Lease()["spec"]["renewTime"].GetString(),
                              &last_renewal, &error))
      << error;
  EXPECT_GE(end - (last_renewal + absl::Milliseconds(600)), absl::ZeroDuration());
  EXPECT_LT(end - (last_renewal + absl::Milliseconds(600)), absl::Microseconds(1));
  fake_.ClearFaults();
  // It comes back, valid again.
  ASSERT_TRUE(Eventually([&] { return a->IsLeader() && a->LeaseValid(); }, absl::Seconds(3)));
  a->Stop();
  EXPECT_FALSE(a->LeaseValid());  // released: never valid after Stop
}

TEST_F(LeaderElectionTest, StaleLeaseUpdateIsAConflict) {
  ASSERT_TRUE(client_->Post("/apis/coordination.k8s.io/v1/namespaces/gpu-slice-extender/leases",
                            R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"gpu-slice-extender"},"spec":{"holderIdentity":"x"}})")
                  .ok());
  absl::StatusOr<std::string> r = client_->Put(
      kLeasePath,
      R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"gpu-slice-extender","resourceVersion":"1"},"spec":{"holderIdentity":"y"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 409);
  EXPECT_THAT(r.status().message(), HasSubstr("the object has been modified"));
  // Creating it twice is AlreadyExists.
  absl::StatusOr<std::string> again = client_->Post(
      "/apis/coordination.k8s.io/v1/namespaces/gpu-slice-extender/leases",
      R"({"metadata":{"name":"gpu-slice-extender"},"spec":{}})");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(LeaderElectionOptionsTest, InconsistentDurationsNameTheFlags) {
  LeaderElectionOptions o;
  EXPECT_TRUE(ValidateLeaderElectionOptions(o).ok());
  o.renew_deadline = absl::Seconds(20);
  absl::Status s = ValidateLeaderElectionOptions(o);
  EXPECT_THAT(s.message(), HasSubstr("--leader-elect-lease-duration (15s) must be greater than "
                                     "--leader-elect-renew-deadline (20s)"));
  o = LeaderElectionOptions();
  o.retry_period = absl::Seconds(10);
  EXPECT_THAT(ValidateLeaderElectionOptions(o).message(), HasSubstr("--leader-elect-renew-deadline"));
  o = LeaderElectionOptions();
  o.lease_name = "";
  EXPECT_THAT(ValidateLeaderElectionOptions(o).message(), HasSubstr("--leader-elect-resource-name"));
  EXPECT_NE(DefaultIdentity(), DefaultIdentity());  // hostname + random: unique per process
  EXPECT_EQ(FormatMicroTime(absl::FromUnixSeconds(1795860000)), "2026-11-28T10:00:00.000000Z");
}

}  // namespace
}  // namespace gse
