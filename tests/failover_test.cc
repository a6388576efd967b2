// Failover of the real binary (issue 18), against the local API server, with kube-scheduler's
// 1.26 queueing played by testsupport/scheduler_queue.h and the extender reached through a
// "Service" (only replicas whose /readyz answers 200 get calls):
//  * after the leader is SIGKILLed, the pods that arrive while no replica leads are parked by
//    the scheduler (their filter calls fail); the new leader's take-over requeue touches them
//    and they are scheduled within seconds, by a PodUpdate move, never by the 5-minute
//    leftover flush; with --takeover-requeue=false they stay parked (the stall of the issue);
//  * a synced follower says it is not the leader and who is, on /readyz and every decision
//    verb; a replica that is not synced says that;
//  * SIGTERM stops decisions at once but releases the Lease only after the bind in flight has
//    committed (issue 12: the new leader must not act before a bind of ours can still land);
//  * the metrics show the take-over: transitions, leaderless time, pods touched;
//  * the banner names the API server, not the demo cluster.
// Leases here are short (2 s) so that a take-over costs seconds; the default durations are
// measured in leader_takeover_test.cc.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/testing/eventually.h"
#include "tests/testing/process.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/paths.h"
#include "testsupport/scheduler_queue.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;
using testing::FakeApiServer;
using testing::PodQueue;
using testing::QueueMove;

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kLease[] = "gpu-slice-extender";

// One extender binary.
struct Replica {
  std::string name;
  int port = 0;
  pid_t pid = -1;
  std::string log;
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port); }
};

std::optional<httplib::Result> Get(const Replica& r, const std::string& path) {
  httplib::Client c("127.0.0.1", r.port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(5, 0);
  return c.Get(path);
}

httplib::Result Post(const Replica& r, const std::string& path, const std::string& body) {
  httplib::Client c("127.0.0.1", r.port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(10, 0);
  return c.Post(path, body, "application/json");
}

bool Ready(const Replica& r) {
  auto res = Get(r, "/readyz");
  return res && *res && (*res)->status == 200;
}

// The value of one series in a /metrics text, -1 when absent.
double Metric(const Replica& r, const std::string& series) {
  auto res = Get(r, "/metrics");
  if (!res || !*res) return -1;
  const std::string& text = (*res)->body;
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  const size_t from = at + series.size() + 2;
  double v = -1;
  if (!absl::SimpleAtod(text.substr(from, text.find('\n', from) - from), &v)) return -1;
  return v;
}

bool MovedBy(const std::vector<QueueMove>& moves, PodQueue from, const std::string& cause) {
  for (const QueueMove& m : moves) {
    if (m.from == from && m.cause == cause) return true;
  }
  return false;
}

class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = testing::BinPath("gpu-slice-extender");
    ASSERT_EQ(access(binary_.c_str(), X_OK), 0) << binary_ << " is not built";
    ASSERT_TRUE(fake_.Start().ok());
    ASSERT_TRUE(fake_.LoadRecordedCluster().ok());
    dir_.Write("kubeconfig", fake_.Kubeconfig());
  }
  void TearDown() override {
    for (Replica& r : replicas_) Kill(r, SIGKILL);
    if (::testing::Test::HasFailure()) {
      for (const Replica& r : replicas_) {
        std::fprintf(stderr, "---- %s log\n%s\n", r.name.c_str(),
                     testing::ReadFileOrDie(r.log).c_str());
      }
    }
  }

  Replica& StartReplica(const std::string& name, std::vector<std::string> extra = {}) {
    Replica r;
    r.name = name;
    r.port = testing::FreePort();
    r.log = dir_.File(name + ".log");
    std::vector<std::string> args = {
        absl::StrCat("--listen=127.0.0.1:", r.port), absl::StrCat("--kubeconfig=", dir_.File("kubeconfig")),
        "--in-cluster=false", "--leader-elect", "--leader-elect-lease-duration=2s",
        "--leader-elect-renew-deadline=1500ms", "--leader-elect-retry-period=300ms",
        "--audit-interval=100ms", "--takeover-requeue-settle=1s", "--decision-log=failures"};
    args.insert(args.end(), extra.begin(), extra.end());
    r.pid = testing::SpawnProcess(binary_, args, r.log);
    EXPECT_GT(r.pid, 0);
    replicas_.push_back(r);
    return replicas_.back();
  }

  static void Kill(Replica& r, int sig) {
    if (r.pid <= 0) return;
    kill(r.pid, sig);
    waitpid(r.pid, nullptr, 0);
    r.pid = -1;
  }

  // The replica that is ready, once exactly one is.
  Replica* WaitForLeader(absl::Duration timeout = absl::Seconds(15)) {
    Replica* leader = nullptr;
    Eventually([&] {
      leader = nullptr;
      int ready = 0;
      for (Replica& r : replicas_) {
        if (r.pid > 0 && Ready(r)) {
          leader = &r;
          ++ready;
        }
      }
      return ready == 1;
    }, timeout, absl::Milliseconds(50));
    return leader;
  }

  std::string LeaseHolder() {
    std::optional<std::string> lease = fake_.Get("leases", kLease, kLease);
    if (!lease) return "";
    rapidjson::Document d;
    d.Parse(lease->c_str());
    return d["spec"].HasMember("holderIdentity") ? d["spec"]["holderIdentity"].GetString() : "";
  }

  std::string AddPod(const std::string& name) {
    testing::PodSpec spec;
    spec.namespace_name = "team-a";
    spec.name = name;
    spec.requests = {{kShared, "1"}};
    EXPECT_TRUE(fake_.Apply("pods", testing::PodJson(spec)).ok());
    return "team-a/" + name;
  }

  std::unique_ptr<testing::SchedulerQueueSim> Scheduler() {
    testing::SchedulerQueueOptions o;  // kube-scheduler 1.26's real durations
    o.api_url = fake_.url();
    for (const Replica& r : replicas_) o.extenders.push_back(r.url());
    o.nodes = {"gpu-node-a", "gpu-node-b", "mig-a"};
    o.readiness_period = absl::Milliseconds(200);
    auto sim = std::make_unique<testing::SchedulerQueueSim>(o);
    EXPECT_TRUE(sim->Start().ok());
    return sim;
  }

  // SIGKILLs the leader, adds pods while no replica leads, and waits until the scheduler
  // has parked each of them. Returns the pods, the new leader in *next.
  std::vector<std::string> KillLeaderAndParkPods(testing::SchedulerQueueSim& sim, Replica* leader,
                                                 Replica** next) {
    Kill(*leader, SIGKILL);
    std::vector<std::string> pods;
    for (int i = 0; i < 3; ++i) pods.push_back(AddPod(absl::StrCat("during-", i)));
    for (const std::string& p : pods) {
      EXPECT_TRUE(Eventually([&] { return sim.QueueOf(p) == PodQueue::kUnschedulable; },
                             absl::Seconds(30)))
          << p << " is " << testing::PodQueueName(sim.QueueOf(p));
    }
    *next = WaitForLeader();
    return pods;
  }

  std::string binary_;
  FakeApiServer fake_;
  testing::ScratchDir dir_;
  std::vector<Replica> replicas_;
};

TEST_F(FailoverTest, PodsParkedWhileNoReplicaLedAreScheduledSoonAfterTheTakeOver) {
  StartReplica("a");
  StartReplica("b");
  Replica* leader = WaitForLeader();
  ASSERT_NE(leader, nullptr);
  auto sim = Scheduler();
  const std::string first = AddPod("before");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(first) == PodQueue::kBound; }, absl::Seconds(60)))
      << first << " is " << testing::PodQueueName(sim->QueueOf(first)) << " after "
      << sim->Attempts(first) << " attempts; last move: "
      << (sim->Moves(first).empty() ? "none" : sim->Moves(first).back().cause + " " + sim->Moves(first).back().detail);
  // The follower measures the leaderless time from a change of the Lease it saw between two of
  // its polls; let it see the leader renew (every 300 ms) before the kill, or there is nothing
  // to measure from (a fast sanitizer run killed the leader before its first renewal).
  absl::SleepFor(absl::Seconds(1));

  const absl::Time killed = absl::Now();
  Replica* next = nullptr;
  const std::vector<std::string> parked = KillLeaderAndParkPods(*sim, leader, &next);
  ASSERT_NE(next, nullptr);
  ASSERT_NE(next, leader);
  const absl::Time took_over = absl::Now();
  // Within seconds, not minutes: far below the 5-minute leftover flush (generous for CI).
  for (const std::string& p : parked) {
    ASSERT_TRUE(Eventually([&] { return sim->QueueOf(p) == PodQueue::kBound; }, absl::Seconds(60)))
        << p << " is " << testing::PodQueueName(sim->QueueOf(p));
  }
  const absl::Time all_bound = absl::Now();
  for (const std::string& p : parked) {
    const std::vector<QueueMove> moves = sim->Moves(p);
    EXPECT_TRUE(MovedBy(moves, PodQueue::kUnschedulable, "PodUpdate")) << p;
    EXPECT_FALSE(MovedBy(moves, PodQueue::kUnschedulable, "UnschedulableTimeout")) << p;
  }
  for (const testing::PodView& pod : fake_.Pods()) {
    if (pod.key.rfind("team-a/during-", 0) != 0) continue;
    EXPECT_THAT(pod.annotations, ::testing::Contains(::testing::Key("gpu.themelio.io/requeue")));
    EXPECT_FALSE(pod.node.empty()) << pod.key;
  }
  std::printf("SIGKILL -> new leader ready: %s; ready -> parked pods bound: %s\n",
              absl::FormatDuration(took_over - killed).c_str(),
              absl::FormatDuration(all_bound - took_over).c_str());
  // The new leader's metrics show the take-over (reported every --audit-interval).
  EXPECT_TRUE(Eventually([&] {
    return Metric(*next, R"(gse_takeover_requeue_pods_total{outcome="touched"})") >= 3 &&
           Metric(*next, R"(gse_leader_transitions_total{event="acquired"})") == 1 &&
           Metric(*next, "gse_leader_last_leaderless_seconds") >= 2;  // >= the lease duration
  }, absl::Seconds(30)));  // reported every --audit-interval; generous for a loaded machine
  EXPECT_GE(Metric(*next, "gse_leader_leaderless_seconds_total"),
            Metric(*next, "gse_leader_last_leaderless_seconds"));
}

TEST_F(FailoverTest, WithoutTheRequeueParkedPodsWaitForTheFlush) {
  StartReplica("a", {"--takeover-requeue=false"});
  StartReplica("b", {"--takeover-requeue=false"});
  Replica* leader = WaitForLeader();
  ASSERT_NE(leader, nullptr);
  auto sim = Scheduler();
  Replica* next = nullptr;
  const std::vector<std::string> parked = KillLeaderAndParkPods(*sim, leader, &next);
  ASSERT_NE(next, nullptr);
  // The new leader could place them, but kube-scheduler does not ask again: nothing moves a
  // parked pod before the 5-minute flush. (Watched for 5 s, past every backoff.)
  absl::SleepFor(absl::Seconds(5));
  for (const std::string& p : parked) {
    EXPECT_EQ(sim->QueueOf(p), PodQueue::kUnschedulable) << p;
    EXPECT_EQ(sim->Attempts(p), 1) << p;
  }
  EXPECT_EQ(Metric(*next, R"(gse_takeover_requeue_pods_total{outcome="touched"})"), 0);
}

TEST_F(FailoverTest, TheFollowerSaysItIsNotTheLeaderAndWhoIs) {
  StartReplica("a");
  StartReplica("b");
  Replica* leader = WaitForLeader();
  ASSERT_NE(leader, nullptr);
  Replica& follower = &replicas_[0] == leader ? replicas_[1] : replicas_[0];
  const std::string holder = LeaseHolder();
  ASSERT_FALSE(holder.empty());
  ASSERT_TRUE(Eventually([&] {
    auto r = Get(follower, "/readyz");
    return r && *r && (*r)->body.find(holder) != std::string::npos;
  }));
  auto readyz = Get(follower, "/readyz");
  ASSERT_TRUE(readyz && *readyz);
  EXPECT_EQ((*readyz)->status, 503);
  rapidjson::Document r;
  r.Parse((*readyz)->body.c_str());
  ASSERT_FALSE(r.HasParseError()) << (*readyz)->body;
  EXPECT_FALSE(r["ready"].GetBool());
  EXPECT_STREQ(r["reason"].GetString(), "not_leader");
  EXPECT_EQ(std::string(r["leader"].GetString()), holder);
  EXPECT_EQ(std::string(r["Error"].GetString()),
            absl::StrCat("not the leader; ", holder, " leads (Lease gpu-slice-extender/gpu-slice-extender)"));

  const std::string pod = *fake_.Get("pods", "team-a", AddPod("asked").substr(7));
  const std::string args = absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":["mig-a"]})");
  auto filter = Post(follower, "/filter", args);
  ASSERT_TRUE(filter);
  EXPECT_EQ(filter->status, 200);
  EXPECT_THAT(filter->body, HasSubstr(absl::StrCat("not the leader; ", holder, " leads")));
  auto prioritize = Post(follower, "/prioritize", args);
  ASSERT_TRUE(prioritize);
  EXPECT_EQ(prioritize->status, 503);
  EXPECT_THAT(prioritize->body, HasSubstr("not the leader"));
  auto bind = Post(follower, "/bind", R"({"PodName":"asked","PodNamespace":"team-a","PodUID":"u","Node":"mig-a"})");
  ASSERT_TRUE(bind);
  EXPECT_THAT(bind->body, HasSubstr(absl::StrCat("not the leader; ", holder, " leads")));
  EXPECT_TRUE(Eventually([&] {
    return Metric(follower, R"(gse_bind_total{offering="none",outcome="not_leader"})") == 1;
  }));
  EXPECT_EQ(Metric(follower, "gse_mirror_synced"), 1);
  EXPECT_EQ(Metric(follower, "gse_leader"), 0);
  // The leader reports itself ready.
  auto leader_ready = Get(*leader, "/readyz");
  ASSERT_TRUE(leader_ready && *leader_ready);
  EXPECT_EQ((*leader_ready)->body, R"({"ready":true})");
}

TEST_F(FailoverTest, AReplicaThatIsNotSyncedSaysSo) {
  FakeApiServer::Fault slow;  // the initial pod list hangs: the mirror is not synced
  slow.method = "GET";
  slow.path_contains = "/api/v1/pods";
  slow.query_contains = "limit";
  slow.delay_before = absl::Seconds(30);
  fake_.AddFault(slow);
  Replica& r = StartReplica("slow");
  ASSERT_TRUE(Eventually([&] {
    auto res = Get(r, "/readyz");
    return res && *res && (*res)->status == 503;
  }));
  auto res = Get(r, "/readyz");
  rapidjson::Document d;
  d.Parse((*res)->body.c_str());
  EXPECT_STREQ(d["reason"].GetString(), "not_synced");
  EXPECT_STREQ(d["Error"].GetString(), "extender cache not synced yet");
  EXPECT_FALSE(d.HasMember("leader"));
  // The banner names where the state comes from; no demo cluster.
  std::string log;
  EXPECT_TRUE(Eventually([&] {
    log = testing::ReadFileOrDie(r.log);
    return log.find("serving on") != std::string::npos;
  }));
  EXPECT_THAT(log, HasSubstr(absl::StrCat("cluster state: the Kubernetes API server ", fake_.url())));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("embedded demo cluster")));
  fake_.ClearFaults();
  Kill(r, SIGKILL);
}

TEST_F(FailoverTest, SigtermReleasesTheLeaseOnlyAfterTheBindInFlightCommitted) {
  Replica& a = StartReplica("a");
  ASSERT_EQ(WaitForLeader(), &a);
  const std::string pod_json = *fake_.Get("pods", "team-a", AddPod("in-flight").substr(7));
  rapidjson::Document pod;
  pod.Parse(pod_json.c_str());
  auto filter = Post(a, "/filter", absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":["mig-a"]})"));
  ASSERT_TRUE(filter && filter->status == 200) << (filter ? filter->body : "no answer");
  // The API server holds the binding 1.5 s before committing it.
  FakeApiServer::Fault slow;
  slow.method = "POST";
  slow.path_contains = "/binding";
  slow.delay_before = absl::Milliseconds(1500);
  fake_.AddFault(slow);
  std::string bind_answer;
  std::thread binder([&] {
    auto b = Post(a, "/bind", absl::StrCat(R"({"PodName":"in-flight","PodNamespace":"team-a","PodUID":")",
                                           pod["metadata"]["uid"].GetString(), R"(","Node":"mig-a"})"));
    bind_answer = b ? b->body : "no answer";
  });
  ASSERT_TRUE(Eventually([&] { return fake_.RequestCount("POST", "/binding") == 1; }));
  kill(a.pid, SIGTERM);
  // Decisions stop at once, while the bind is still held by the API server.
  ASSERT_TRUE(Eventually([&] {
    auto r = Get(a, "/readyz");
    return r && *r && (*r)->body.find("shutting down") != std::string::npos;
  }, absl::Seconds(1)));
  binder.join();
  int status = 0;
  waitpid(a.pid, &status, 0);
  a.pid = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(bind_answer, R"({"Error":""})");
  // The fake's resourceVersions are one counter over all its writes: they order them.
  rapidjson::Document lease, bound;
  lease.Parse(fake_.Get("leases", kLease, kLease)->c_str());
  bound.Parse(fake_.Get("pods", "team-a", "in-flight")->c_str());
  EXPECT_STREQ(lease["spec"]["holderIdentity"].GetString(), "");  // released
  ASSERT_TRUE(bound["spec"].HasMember("nodeName"));
  int64_t lease_rv = 0, bind_rv = 0;
  ASSERT_TRUE(absl::SimpleAtoi(lease["metadata"]["resourceVersion"].GetString(), &lease_rv));
  ASSERT_TRUE(absl::SimpleAtoi(bound["metadata"]["resourceVersion"].GetString(), &bind_rv));
  EXPECT_GT(lease_rv, bind_rv) << "the Lease was released before the bind committed";
}

}  // namespace
}  // namespace gse
