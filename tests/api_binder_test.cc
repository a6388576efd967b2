// ApiBinder against the fake API server: the recorded v1.Binding wire format, one write that
// sets spec.nodeName and the annotations, every refusal surfaced with the API's reason, retries
// of ambiguous failures, and a bind that timed out but committed.
#include "kube/api_binder.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;
using testing::PodView;

const std::map<std::string, std::string> kAnnotations = {
    {"gpu.themelio.io/unit", "mig-a/nvidia.com/mig-1g.5gb.shared/0"}};
constexpr char kNb1Uid[] = "ff88a4c8-b864-4061-8738-bb5f0d63b1ed";  // list-pods.json

class ApiBinderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    ASSERT_TRUE(fake_.LoadRecordedCluster().ok());  // team-a/nb-1 is pending
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
  }

  ApiBinder Binder(absl::Duration deadline = absl::Seconds(4),
                   absl::Duration attempt = absl::Seconds(2)) {
    ApiBinderOptions o;
    o.deadline = deadline;
    o.attempt_timeout = attempt;
    o.retry_backoff = absl::Milliseconds(20);
    return ApiBinder(client_.get(), o);
  }

  PodView Pod(const std::string& key) {
    for (const PodView& p : fake_.Pods()) {
      if (p.key == key) return p;
    }
    return PodView();
  }

  BindTarget Nb1(const std::string& uid = kNb1Uid) { return BindTarget{"nb-1", "team-a", uid, "mig-a"}; }

  // A client whose writes are paced at `qps` with a burst of 1.
  std::unique_ptr<KubeClient> PacedClient(double qps) {
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    KubeClientOptions options;
    options.write_qps = qps;
    options.write_burst = 1;
    return std::move(*KubeClient::Create(config, options));
  }

  // A pending pod of team-a named `name`; returns its UID.
  std::string PendingPod(const std::string& name) {
    testing::PodSpec spec;
    spec.name = name;
    spec.uid = absl::StrCat("uid-", name);
    EXPECT_TRUE(fake_.Apply("pods", testing::PodJson(spec)).ok());
    return spec.uid;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(ApiBinderTest, BindingBodyIsTheRecordedRequest) {
  BindTarget t{"nb-0", "team-a", "de697f1e-d915-473c-a8ba-f0eadff79666", "mig-a"};
  std::string recorded =
      testing::ReadFileOrDie(testing::SharedPath("protocol/kube-api-1.26/binding-request.json"));
  while (!recorded.empty() && recorded.back() == '\n') recorded.pop_back();
  EXPECT_EQ(ApiBinder::BindingBody(t, kAnnotations), recorded);
}

TEST_F(ApiBinderTest, BindSetsNodeAndAnnotationsInOneWrite) {
  const std::string rv_before = fake_.resource_version();
  ApiBinder binder = Binder();
  ASSERT_TRUE(binder.Bind(Nb1(), kAnnotations).bound());
  PodView p = Pod("team-a/nb-1");
  EXPECT_EQ(p.node, "mig-a");
  EXPECT_EQ(p.annotations.at("gpu.themelio.io/unit"), "mig-a/nvidia.com/mig-1g.5gb.shared/0");
  int64_t before = 0, after = 0;
  ASSERT_TRUE(absl::SimpleAtoi(rv_before, &before));
  ASSERT_TRUE(absl::SimpleAtoi(fake_.resource_version(), &after));
  EXPECT_EQ(after, before + 1);  // one write
  EXPECT_EQ(fake_.RequestCount("POST", "/binding"), 1);
}

TEST_F(ApiBinderTest, UidPreconditionProtectsARecreatedPod) {
  ApiBinder binder = Binder();
  const BindResult r = binder.Bind(Nb1("00000000-0000-0000-0000-000000000000"), kAnnotations);
  const absl::Status& s = r.status;
  EXPECT_EQ(r.outcome, BindOutcome::kNotBound);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(KubeErrorOf(s).http_code, 409);
  EXPECT_EQ(KubeErrorOf(s).reason, "Conflict");
  EXPECT_THAT(s.message(), HasSubstr("Precondition failed: UID in precondition"));
  EXPECT_EQ(Pod("team-a/nb-1").node, "");
}

TEST_F(ApiBinderTest, PodBoundElsewhereIsAConflict) {
  ApiBinder binder = Binder();
  ASSERT_TRUE(binder.Bind(BindTarget{"nb-1", "team-a", kNb1Uid, "gpu-node-a"}, {}).bound());
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  const absl::Status& s = r.status;
  EXPECT_EQ(r.outcome, BindOutcome::kNotBound) << "read back: bound to another node";
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KubeErrorOf(s).reason, "Conflict");
  EXPECT_THAT(s.message(), HasSubstr("is already assigned to node \"gpu-node-a\""));
  EXPECT_EQ(Pod("team-a/nb-1").node, "gpu-node-a");
}

TEST_F(ApiBinderTest, MissingPodIsNotFound) {
  ApiBinder binder = Binder();
  const BindResult r = binder.Bind(BindTarget{"ghost", "team-a", "", "mig-a"}, kAnnotations);
  const absl::Status& s = r.status;
  EXPECT_EQ(r.outcome, BindOutcome::kNotBound);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(KubeErrorOf(s).message, "pods \"ghost\" not found");
}

TEST_F(ApiBinderTest, TransientServerErrorIsRetried) {
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.status = 500;
  fake_.AddFault(f);
  ApiBinder binder = Binder();
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  const absl::Status& s = r.status;
  EXPECT_EQ(r.outcome, BindOutcome::kBound);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(binder.attempts(), 2);
  EXPECT_EQ(binder.bind_errors(), 1);  // the 500, counted for gse_api_errors_total
  EXPECT_EQ(binder.get_errors(), 0);
  EXPECT_EQ(Pod("team-a/nb-1").node, "mig-a");
}

TEST_F(ApiBinderTest, PersistentServerErrorFailsWithinTheDeadlineWithTheReason) {
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.status = 500;
  f.times = -1;
  fake_.AddFault(f);
  // Attempts long enough to be answered even on a loaded sanitizer run: a timed-out attempt
  // would make the outcome unknown (it may still commit), which is not this test's case.
  ApiBinder binder = Binder(absl::Milliseconds(1500), absl::Milliseconds(700));
  absl::Time start = absl::Now();
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  const absl::Status& s = r.status;
  // The pod read back pending: not bound when every 500 was answered; unknown when the last
  // attempt, cut short by the deadline, got no answer (it may still commit). Which of the two
  // depends on timing (TSan runs get the second); never bound.
  EXPECT_NE(r.outcome, BindOutcome::kBound) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(4));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KubeErrorOf(s).http_code, 500);
  EXPECT_EQ(KubeErrorOf(s).reason, "InternalError");
  EXPECT_THAT(s.message(), HasSubstr("injected failure"));
  EXPECT_GE(binder.attempts(), 2);
  EXPECT_EQ(binder.bind_errors(), binder.attempts());
  EXPECT_EQ(Pod("team-a/nb-1").node, "");
}

// The error names what the API server answered, also when the last attempt was then cut short
// by the deadline (a timeout says less than the 500 before it, and on a loaded machine the
// last attempt is often the one the deadline cuts).
TEST_F(ApiBinderTest, ErrorKeepsTheServersAnswerWhenTheLastAttemptTimesOut) {
  FakeApiServer::Fault five_hundred;
  five_hundred.method = "POST";
  five_hundred.path_contains = "/binding";
  five_hundred.status = 500;
  five_hundred.times = 1;
  fake_.AddFault(five_hundred);
  FakeApiServer::Fault held;
  held.method = "POST";
  held.path_contains = "/binding";
  held.hold = true;
  held.times = -1;
  fake_.AddFault(held);
  // Attempts long enough for the 500 to be answered on a slow sanitizer run; the held ones
  // then time out.
  ApiBinder binder = Binder(absl::Milliseconds(3000), absl::Milliseconds(1000));
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  fake_.ReleaseHeld();
  // The held POST got no answer and may still commit: unknown, reported with the 500.
  EXPECT_EQ(r.outcome, BindOutcome::kUnknown);
  const absl::Status& s = r.status;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(KubeErrorOf(s).http_code, 500);
  EXPECT_EQ(KubeErrorOf(s).reason, "InternalError");
  EXPECT_THAT(s.message(), HasSubstr("injected failure"));
  EXPECT_THAT(s.message(), HasSubstr("the last attempt:"));
  EXPECT_GE(binder.attempts(), 2);
}

// issue 14: a bind waits for the client's write limiter within its own deadline, and one
// whose turn would come too late sends nothing, says so, and is no API error.
TEST_F(ApiBinderTest, BindWaitsForTheWriteLimiterWithinItsDeadline) {
  auto paced = PacedClient(/*qps=*/4);  // a turn every 250 ms after the first
  ApiBinderOptions o;
  o.deadline = absl::Seconds(4);
  ApiBinder binder(paced.get(), o);
  const std::string uid = PendingPod("paced-0");
  ASSERT_TRUE(binder.Bind(Nb1(), kAnnotations).bound());
  absl::Status second = binder.Bind(BindTarget{"paced-0", "team-a", uid, "mig-a"}, kAnnotations).status;
  EXPECT_TRUE(second.ok()) << second;
  EXPECT_EQ(Pod("team-a/paced-0").node, "mig-a");
  EXPECT_EQ(binder.attempts(), 2);
  EXPECT_EQ(binder.not_sent(), 0);
  EXPECT_EQ(binder.bind_errors(), 0);
}

TEST_F(ApiBinderTest, BindWithoutATurnBeforeItsDeadlineSendsNothing) {
  auto paced = PacedClient(/*qps=*/0.05);  // the next turn is 20 s away
  ApiBinderOptions o;
  o.deadline = absl::Seconds(2);
  ApiBinder binder(paced.get(), o);
  const std::string uid = PendingPod("paced-1");
  ASSERT_TRUE(binder.Bind(Nb1(), kAnnotations).bound());
  const absl::Time start = absl::Now();
  absl::Status s = binder.Bind(BindTarget{"paced-1", "team-a", uid, "mig-a"}, kAnnotations).status;
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(IsNotSent(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("not sent"));
  // Answered at once rather than at the deadline (generous bound for sanitizer builds).
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // One POST went out (the first bind); the second was never sent and is no API error.
  EXPECT_EQ(fake_.RequestCount("POST", "/binding"), 1);
  EXPECT_EQ(binder.attempts(), 1);
  EXPECT_EQ(binder.not_sent(), 1);
  EXPECT_EQ(binder.bind_errors(), 0);
  EXPECT_EQ(Pod("team-a/paced-1").node, "");
}

// Fencing (issue 12): a leader whose Lease is no longer valid on its own clock sends no
// binding. The first attempt gets a 503 (it may have committed: ambiguous); before the retry
// the Lease turns invalid, so the retry is not sent; the pod read back pending (the 503 was
// answered) makes the outcome a definite "not bound", reported as fenced.
TEST_F(ApiBinderTest, RetryIsNotSentOnceTheLeaseIsNoLongerValid) {
  FakeApiServer::Fault unavailable;
  unavailable.method = "POST";
  unavailable.path_contains = "/binding";
  unavailable.status = 503;
  fake_.AddFault(unavailable);
  std::atomic<int> checks{0};
  ApiBinderOptions o;
  o.deadline = absl::Seconds(4);
  o.attempt_timeout = absl::Seconds(2);
  o.retry_backoff = absl::Milliseconds(20);
  // Valid for the first POST only: the elector stepped down between the two attempts.
  o.lease_valid = [&checks] { return checks.fetch_add(1) == 0; };
  ApiBinder binder(client_.get(), o);
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  EXPECT_EQ(r.outcome, BindOutcome::kNotBound) << r.status;
  EXPECT_TRUE(IsFenced(r.status)) << r.status;
  EXPECT_FALSE(IsNotSent(r.status));
  EXPECT_THAT(r.status.message(), HasSubstr("Lease is no longer valid"));
  EXPECT_THAT(r.status.message(), HasSubstr("after 1 attempt, the last:"));  // the 503
  EXPECT_EQ(checks.load(), 2);  // asked before each POST
  EXPECT_EQ(fake_.RequestCount("POST", "/binding"), 1);  // no second POST
  EXPECT_EQ(binder.attempts(), 1);
  EXPECT_EQ(binder.lease_lost(), 1);
  EXPECT_EQ(binder.bind_errors(), 1);  // the 503 only; the fenced retry is no API error
  EXPECT_EQ(Pod("team-a/nb-1").node, "");
}

// The same when the first attempt's answer was lost (it may still commit): the read-back
// cannot tell, so the outcome stays unknown (the holding is kept), never "not bound".
TEST_F(ApiBinderTest, FencedRetryAfterAnUnansweredAttemptStaysUnknown) {
  FakeApiServer::Fault held;
  held.method = "POST";
  held.path_contains = "/binding";
  held.hold = true;
  fake_.AddFault(held);
  std::atomic<int> checks{0};
  ApiBinderOptions o;
  o.deadline = absl::Seconds(3);
  o.attempt_timeout = absl::Milliseconds(500);
  o.retry_backoff = absl::Milliseconds(20);
  o.lease_valid = [&checks] { return checks.fetch_add(1) == 0; };
  ApiBinder binder(client_.get(), o);
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  fake_.ReleaseHeld();
  EXPECT_EQ(r.outcome, BindOutcome::kUnknown) << r.status;
  EXPECT_EQ(binder.attempts(), 1);
  EXPECT_EQ(binder.lease_lost(), 1);
}

TEST_F(ApiBinderTest, BindWithAnInvalidLeaseSendsNothing) {
  ApiBinderOptions o;
  o.lease_valid = [] { return false; };
  ApiBinder binder(client_.get(), o);
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  EXPECT_EQ(r.outcome, BindOutcome::kNotBound);
  EXPECT_TRUE(IsFenced(r.status)) << r.status;
  EXPECT_THAT(r.status.message(), HasSubstr("binding POST not sent"));
  EXPECT_EQ(fake_.RequestCount("POST", "/binding"), 0);
  EXPECT_EQ(fake_.RequestCount("GET", "/pods/nb-1"), 0);  // nothing to read back either
  EXPECT_EQ(binder.attempts(), 0);
  EXPECT_EQ(binder.lease_lost(), 1);
  EXPECT_EQ(binder.bind_errors(), 0);
  EXPECT_EQ(Pod("team-a/nb-1").node, "");
  // A valid lease binds as before.
  ApiBinderOptions valid;
  valid.lease_valid = [] { return true; };
  ApiBinder leader(client_.get(), valid);
  EXPECT_TRUE(leader.Bind(Nb1(), kAnnotations).bound());
  EXPECT_EQ(leader.lease_lost(), 0);
}

TEST_F(ApiBinderTest, TooManyRequestsIsRetriedAfterTheServersRetryAfter) {
  // The API server takes one write per 2 s (its flow control answers 429, Retry-After: 1).
  FakeApiServer limited([] {
    FakeApiServer::Options o;
    o.write_qps = 0.5;
    o.write_burst = 1;
    // The binder waits Retry-After (1 s) between POSTs, as long as the server's default
    // keep-alive: its next POST could meet a connection the server is closing, a transport
    // error that is not a 429. kube-apiserver keeps idle connections far longer.
    o.keep_alive_seconds = 5;
    return o;
  }());
  ASSERT_TRUE(limited.Start().ok());
  ASSERT_TRUE(limited.LoadRecordedCluster().ok());
  KubeConfig config;
  config.server = limited.url();
  config.token = "test-token";
  auto client = std::move(*KubeClient::Create(config));
  testing::PodSpec spec;
  spec.name = "limited-0";
  spec.uid = "uid-limited-0";
  ASSERT_TRUE(limited.Apply("pods", testing::PodJson(spec)).ok());
  ApiBinderOptions o;
  o.deadline = absl::Seconds(4);
  o.retry_backoff = absl::Milliseconds(20);
  ApiBinder binder(client.get(), o);
  ASSERT_TRUE(binder.Bind(Nb1(), kAnnotations).bound());
  absl::Status s = binder.Bind(BindTarget{"limited-0", "team-a", "uid-limited-0", "mig-a"}, kAnnotations).status;
  EXPECT_TRUE(s.ok()) << s;
  // 20 ms backoffs would have spent ~50 attempts on 429s; Retry-After keeps it to a few.
  EXPECT_GE(limited.throttled(), 1);
  EXPECT_LE(limited.throttled(), 3);
  EXPECT_EQ(binder.bind_errors(), limited.throttled());  // each 429 was a failed POST
  EXPECT_EQ(binder.not_sent(), 0);
}

TEST_F(ApiBinderTest, AnswerLostAfterCommitIsRecognisedAsBound) {
  // The binding commits, but its answer comes later than the attempt's timeout: the retry
  // meets "already assigned" and reading the pod shows our node and annotations.
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.delay_after = absl::Seconds(2);
  fake_.AddFault(f);
  ApiBinder binder = Binder(absl::Seconds(2), absl::Milliseconds(300));
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  const absl::Status& s = r.status;
  EXPECT_EQ(r.outcome, BindOutcome::kBound);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(binder.confirmed_by_read(), 1);
  EXPECT_EQ(binder.get_errors(), 0);
  EXPECT_EQ(Pod("team-a/nb-1").node, "mig-a");
}

// The binding commits but its answer is lost, and the pod cannot be read back to tell: the
// outcome is unknown (never "not bound": the service must not free the unit, issue 12,
// finding 1) and the failed read is counted.
TEST_F(ApiBinderTest, UnreadablePodAfterALostAnswerIsCountedAsAFailedGet) {
  FakeApiServer::Fault lost;
  lost.method = "POST";
  lost.path_contains = "/binding";
  lost.delay_after = absl::Seconds(2);
  fake_.AddFault(lost);
  FakeApiServer::Fault unreadable;
  unreadable.method = "GET";
  unreadable.path_contains = "/pods/nb-1";
  unreadable.status = 500;
  unreadable.times = -1;
  fake_.AddFault(unreadable);
  ApiBinder binder = Binder(absl::Seconds(2), absl::Milliseconds(300));
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  EXPECT_EQ(r.outcome, BindOutcome::kUnknown) << r.status;
  EXPECT_THAT(r.status.message(), HasSubstr("whether the pod is bound is unknown"));
  EXPECT_GE(binder.get_errors(), 1);
  EXPECT_GE(binder.bind_errors(), 2);  // the lost answer, then "already assigned"
  EXPECT_EQ(binder.confirmed_by_read(), 0);
}

TEST_F(ApiBinderTest, TimeoutsWithThePodStillPendingAreAnUnknownOutcome) {
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.times = -1;
  f.delay_before = absl::Seconds(5);
  fake_.AddFault(f);
  ApiBinder binder = Binder(absl::Milliseconds(700), absl::Milliseconds(300));
  absl::Time start = absl::Now();
  const BindResult r = binder.Bind(Nb1(), kAnnotations);
  const absl::Status& s = r.status;
  // The attempts got no answer: reading the pod back pending cannot tell whether one of them
  // is still inside the API server (here it is: the fake holds them 5 s, then commits).
  EXPECT_EQ(r.outcome, BindOutcome::kUnknown);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("timed out"));
  EXPECT_EQ(Pod("team-a/nb-1").node, "");
}

}  // namespace
}  // namespace gse
