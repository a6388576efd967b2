// issue 14 end to end: the extender served over HTTP as in a cluster
// (testsupport/served_extender.h: LiveCluster's reflector, ApiBinder and write limiter) against
// the fake API server, driven as kube-scheduler drives it — filter and prioritize from one
// client, each bind from a connection of its own.
//
//  * Binds stalled at the API server hold every bind place; filter, prioritize and preempt are
//    still answered while they wait, and a bind beyond the places is answered at once.
//  * A bind waiting for the write limiter does not delay filter either; a bind whose turn would
//    come after its deadline is answered at once, sends nothing, is counted as
//    client_throttled and not as an API error, and frees its reservation.
// Order of events is asserted (the API server holds POSTs until the test releases them);
// timeouts are generous.
#include <httplib.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "extender/http_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/cluster_state.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/served_extender.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;

constexpr char kExclusive[] = "nvidia.com/mig-1g.5gb";  // gpu-node-a has 7 (recorded cluster)
const std::vector<std::string> kCandidates = {"gpu-node-a", "gpu-node-b", "mig-a"};

// The served extender (testsupport/served_extender.h) with what kube-scheduler sends it.
class Scheduler {
 public:
  struct Options {
    double write_qps = 1000;
    int write_burst = 1000;
    absl::Duration bind_deadline = absl::Seconds(30);
  };

  Scheduler(const FakeApiServer& fake, Options o) : fake_(fake) {
    testing::ServedExtenderOptions so;
    so.client.write_qps = o.write_qps;
    so.client.write_burst = o.write_burst;
    so.client.request_timeout = absl::Seconds(30);
    so.binder.deadline = o.bind_deadline;
    so.binder.attempt_timeout = o.bind_deadline;  // held POSTs must not time out first
    so.binder.retry_backoff = absl::Milliseconds(20);
    so.http.threads = 2;  // fewer ready workers than binds: the pool must grow
    so.http.max_concurrent_binds = 4;
    absl::StatusOr<std::unique_ptr<testing::ServedExtender>> e =
        testing::ServedExtender::Start(fake, so);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) extender_ = *std::move(e);
  }

  bool Ready() { return extender_ != nullptr && extender_->WaitReady(absl::Seconds(30)); }

  std::unique_ptr<httplib::Client> NewClient() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", extender_->port());
    c->set_tcp_nodelay(true);
    c->set_keep_alive(true);
    c->set_read_timeout(60, 0);
    return c;
  }

  // kube-scheduler's filter for team-c/`name` (the Pod as the API server has it): the nodes
  // that passed.
  std::vector<std::string> Filter(httplib::Client& client, const std::string& name) {
    httplib::Result r = client.Post("/filter", Args(name, kCandidates), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : httplib::to_string(r.error()));
    std::vector<std::string> passed;
    if (!r) return passed;
    rapidjson::Document doc;
    doc.Parse(r->body.c_str());
    if (!doc.HasParseError() && doc.HasMember("NodeNames") && doc["NodeNames"].IsArray()) {
      for (const auto& n : doc["NodeNames"].GetArray()) passed.emplace_back(n.GetString());
    }
    return passed;
  }

  std::string Args(const std::string& name, const std::vector<std::string>& nodes) const {
    std::optional<std::string> pod = fake_.Get("pods", "team-c", name);
    EXPECT_TRUE(pod.has_value()) << name;
    return absl::StrCat(R"({"Pod":)", pod.value_or("{}"), R"(,"Nodes":null,"NodeNames":[")",
                        absl::StrJoin(nodes, "\",\""), "\"]}");
  }

  std::string BindArgs(const std::string& name) const {
    return absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":"team-c","PodUID":"uid-)",
                        name, R"(","Node":"gpu-node-a"})");
  }

  testing::ServedExtender& extender() { return *extender_; }
  HttpServer& server() { return extender_->server(); }

 private:
  const FakeApiServer& fake_;
  std::unique_ptr<testing::ServedExtender> extender_;
};

// One bind on a connection of its own (one of kube-scheduler's binding goroutines).
class AsyncBind {
 public:
  AsyncBind(const Scheduler& e, const std::string& name) {
    thread_ = std::thread([this, client = e.NewClient(), body = e.BindArgs(name)] {
      httplib::Result r = client->Post("/bind", body, "application/json");
      error_ = r ? (r->status == 200 ? ErrorOf(r->body) : absl::StrCat("HTTP ", r->status))
                 : httplib::to_string(r.error());
      done_.store(true);
    });
  }
  ~AsyncBind() { Join(); }
  bool done() const { return done_.load(); }
  // The bind's protocol Error ("" = bound).
  std::string Join() {
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  static std::string ErrorOf(const std::string& body) {
    rapidjson::Document doc;
    doc.Parse(body.c_str());
    if (doc.HasParseError() || !doc.HasMember("Error") || !doc["Error"].IsString()) return "bad answer: " + body;
    return doc["Error"].GetString();
  }
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::string error_;
};

class BindStarvationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    ASSERT_TRUE(fake_.LoadRecordedCluster().ok());
    ASSERT_TRUE(fake_.Apply("namespaces", R"({"metadata":{"name":"team-c"}})").ok());
    for (int i = 0; i < 8; ++i) {
      PodSpec spec;
      spec.namespace_name = "team-c";
      spec.name = absl::StrCat("p-", i);
      spec.uid = absl::StrCat("uid-p-", i);
      spec.requests = {{kExclusive, "1"}};
      ASSERT_TRUE(fake_.Apply("pods", PodJson(spec)).ok());
    }
  }

  // Binding POSTs wait at the API server until ReleaseHeld().
  void HoldBindings() {
    FakeApiServer::Fault hold;
    hold.method = "POST";
    hold.path_contains = "/binding";
    hold.times = -1;
    hold.hold = true;
    fake_.AddFault(hold);
  }
  void Unhold() {
    fake_.ClearFaults();
    fake_.ReleaseHeld();
  }
  std::string NodeOf(const std::string& name) {
    for (const auto& p : fake_.Pods()) {
      if (p.key == "team-c/" + name) return p.node;
    }
    return "?";
  }
  int64_t Bindings() const { return fake_.RequestCount("POST", "/binding"); }

  FakeApiServer fake_;
};

TEST_F(BindStarvationTest, BindsStalledAtTheApiServerDoNotDelayFilterPrioritizePreempt) {
  Scheduler e(fake_, {});
  ASSERT_TRUE(e.Ready());
  auto scheduler = e.NewClient();  // the scheduling goroutine's connection
  HoldBindings();
  std::vector<std::unique_ptr<AsyncBind>> binds;
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrCat("p-", i);
    ASSERT_THAT(e.Filter(*scheduler, name), ::testing::Contains("gpu-node-a"));
    binds.push_back(std::make_unique<AsyncBind>(e, name));
  }
  // Every bind place (4) is held by a bind whose POST the API server does not answer.
  ASSERT_TRUE(Eventually([&] { return fake_.held() == 4; }, absl::Seconds(30)));
  EXPECT_EQ(e.server().BindsInFlight(), 4);

  // The scheduling loop goes on: its pooled connection and new ones are answered at once.
  for (int round = 0; round < 2; ++round) {
    auto fresh = e.NewClient();
    httplib::Client& client = round == 0 ? *scheduler : *fresh;
    const std::string name = absl::StrCat("p-", 4 + round);
    std::vector<std::string> passed = e.Filter(client, name);
    EXPECT_THAT(passed, ::testing::Contains("gpu-node-a"));
    httplib::Result r = client.Post("/prioritize", e.Args(name, passed), "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    r = client.Post("/preempt",
                    absl::StrCat(R"({"Pod":)", *fake_.Get("pods", "team-c", name),
                                 R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{}})"),
                    "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    // ... while every bind still waits at the API server.
    EXPECT_EQ(fake_.held(), 4);
    for (const auto& b : binds) EXPECT_FALSE(b->done());
  }
  // A fifth bind finds no place: answered at once without a POST; the pod is not bound.
  {
    AsyncBind fifth(e, "p-4");
    const std::string error = fifth.Join();
    EXPECT_THAT(error, HasSubstr("bind not attempted"));
    EXPECT_EQ(Bindings(), 4);
    EXPECT_EQ(NodeOf("p-4"), "");
  }
  EXPECT_GT(e.server().Workers().threads, 2u);

  Unhold();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(binds[i]->Join(), "") << "p-" << i;
    EXPECT_EQ(NodeOf(absl::StrCat("p-", i)), "gpu-node-a");
  }
  const std::string metrics = e.extender().metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("gse_bind_total{offering=\"", kExclusive,
                                              "\",outcome=\"bound\"} 4")));
  EXPECT_THAT(metrics, HasSubstr("gse_bind_total{offering=\"none\",outcome=\"overloaded\"} 1"));
}

TEST_F(BindStarvationTest, BindWaitingForTheWriteLimiterDoesNotDelayFilterAndOneWithoutATurnIsNotSent) {
  // One write turn every 5 s after the first; a bind may be sent until 7.5 s - 0.5 s after it
  // started. The first bind is sent at once (and held at the API server); of the next two,
  // the one that asks first gets the turn at +5 s and waits for it, the other's turn (+10 s)
  // is after its deadline.
  Scheduler::Options o;
  o.write_qps = 0.2;
  o.write_burst = 1;
  o.bind_deadline = absl::Milliseconds(7500);
  Scheduler e(fake_, o);
  ASSERT_TRUE(e.Ready());
  const size_t held_before = e.extender().mirror().Read([](const ClusterState& s) { return s.pods().size(); });
  auto scheduler = e.NewClient();
  for (int i = 0; i < 4; ++i) {
    ASSERT_THAT(e.Filter(*scheduler, absl::StrCat("p-", i)), ::testing::Contains("gpu-node-a"));
  }
  HoldBindings();
  AsyncBind first(e, "p-0");
  ASSERT_TRUE(Eventually([&] { return fake_.held() == 1; }, absl::Seconds(30)));
  AsyncBind b1(e, "p-1");
  AsyncBind b2(e, "p-2");
  ASSERT_TRUE(Eventually([&] { return b1.done() || b2.done(); }, absl::Seconds(30)));
  const bool p1_waits = !b1.done();
  AsyncBind& waiting = p1_waits ? b1 : b2;
  AsyncBind& refused = p1_waits ? b2 : b1;
  const std::string refused_error = refused.Join();
  EXPECT_THAT(refused_error, HasSubstr("timed out before it could be sent"));
  EXPECT_THAT(refused_error, HasSubstr("not bound"));

  // The other bind waits for its turn; filter is answered meanwhile.
  EXPECT_THAT(e.Filter(*scheduler, "p-3"), ::testing::Contains("gpu-node-a"));
  EXPECT_EQ(Bindings(), 1) << "the waiting bind was sent before filter was answered";
  EXPECT_FALSE(waiting.done());

  ASSERT_TRUE(Eventually([&] { return fake_.held() == 2; }, absl::Seconds(30)));
  Unhold();
  EXPECT_EQ(first.Join(), "");
  EXPECT_EQ(waiting.Join(), "");
  EXPECT_EQ(NodeOf("p-0"), "gpu-node-a");
  EXPECT_EQ(NodeOf(p1_waits ? "p-1" : "p-2"), "gpu-node-a");
  EXPECT_EQ(NodeOf(p1_waits ? "p-2" : "p-1"), "");
  EXPECT_EQ(Bindings(), 2);
  // The refused bind freed what it reserved: two more pods hold units, not three.
  EXPECT_EQ(e.extender().mirror().Read([](const ClusterState& s) { return s.pods().size(); }), held_before + 2);
  // Metrics: not an API error; counted as client_throttled; one write not sent, two sent.
  EXPECT_EQ(e.extender().live().api_call_errors().bind, 0);
  const std::string metrics = e.extender().metrics().Serialize();
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("gse_bind_total{offering=\"", kExclusive,
                                              "\",outcome=\"client_throttled\"} 1")));
  EXPECT_THAT(metrics, HasSubstr("gse_api_writes_not_sent_total{op=\"bind\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("gse_api_write_wait_seconds_count{op=\"bind\"} 2"));
}

}  // namespace
}  // namespace gse
