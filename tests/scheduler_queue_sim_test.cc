// The kube-scheduler 1.26 queue peer (testsupport/scheduler_queue.h) against the local API
// server and a scripted extender, with its durations scaled down: a pod whose filter call
// failed is parked and stays parked until the leftover flush; a pod update that isPodUpdated
// counts (an annotation) moves it at once, to backoff while its backoff runs; a status-only
// update does not; a failed bind is a move request (backoff, retried without help); no ready
// endpoint is an error like any other. These are the rules the failover tests rely on.
#include "testsupport/scheduler_queue.h"

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {
namespace {

// An extender that answers as it is told: filter error or pass, bind error or bind (in the
// API server, as the real one does through the binding subresource).
class ScriptedExtender {
 public:
  explicit ScriptedExtender(FakeApiServer* api) : api_(api) {
    server_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      res.status = ready_.load() ? 200 : 503;
    });
    server_.Post("/filter", [this](const httplib::Request& req, httplib::Response& res) {
      ++filters_;
      if (filter_error_.load()) {
        res.set_content(R"({"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":null,"Error":"not the leader"})",
                        "application/json");
        return;
      }
      res.set_content(R"({"Nodes":null,"NodeNames":["mig-a"],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""})",
                      "application/json");
    });
    server_.Post("/prioritize", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"([{"Host":"mig-a","Score":5}])", "application/json");
    });
    server_.Post("/bind", [this](const httplib::Request& req, httplib::Response& res) {
      if (bind_error_.load()) {
        res.set_content(R"({"Error":"binding rejected"})", "application/json");
        return;
      }
      rapidjson::Document d;
      d.Parse(req.body.c_str());
      const std::string ns = d["PodNamespace"].GetString(), name = d["PodName"].GetString();
      (void)api_->Mutate("pods", ns, name, [](rapidjson::Document& pod) {
        pod["spec"].AddMember("nodeName", "mig-a", pod.GetAllocator());
      });
      res.set_content(R"({"Error":""})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i) absl::SleepFor(absl::Milliseconds(2));
  }
  ~ScriptedExtender() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  std::atomic<bool> ready_{true};
  std::atomic<bool> filter_error_{false};
  std::atomic<bool> bind_error_{false};
  std::atomic<int> filters_{0};

 private:
  FakeApiServer* api_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

class SchedulerQueueSimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(api_.Start().ok());
    extender_ = std::make_unique<ScriptedExtender>(&api_);
  }

  // Scaled: backoff 100 ms doubling to 400 ms, leftover flush of pods parked for 1.5 s.
  SchedulerQueueOptions Options() {
    SchedulerQueueOptions o;
    o.api_url = api_.url();
    o.extenders = {extender_->url()};
    o.nodes = {"mig-a"};
    o.readiness_period = absl::Milliseconds(20);
    o.initial_backoff = absl::Milliseconds(100);
    o.max_backoff = absl::Milliseconds(400);
    o.backoff_flush_period = absl::Milliseconds(50);
    o.max_in_unschedulable = absl::Milliseconds(1500);
    o.unschedulable_flush_period = absl::Milliseconds(300);
    return o;
  }

  std::unique_ptr<SchedulerQueueSim> Start(SchedulerQueueOptions o) {
    auto sim = std::make_unique<SchedulerQueueSim>(std::move(o));
    EXPECT_TRUE(sim->Start().ok());
    absl::SleepFor(absl::Milliseconds(60));  // a few readiness probes (every 20 ms) have run
    return sim;
  }

  std::string AddPod(const std::string& name) {
    PodSpec spec;
    spec.namespace_name = "team-a";
    spec.name = name;
    spec.requests = {{"nvidia.com/mig-1g.5gb.shared", "1"}};
    EXPECT_TRUE(api_.Apply("pods", PodJson(spec)).ok());
    return "team-a/" + name;
  }

  void Annotate(const std::string& name) {
    ASSERT_TRUE(api_.Mutate("pods", "team-a", name, [](rapidjson::Document& d) {
      rapidjson::Value& meta = d["metadata"];
      if (!meta.HasMember("annotations")) {
        meta.AddMember("annotations", rapidjson::Value(rapidjson::kObjectType), d.GetAllocator());
      }
      meta["annotations"].AddMember("gpu.themelio.io/requeue", "t/1", d.GetAllocator());
    }).ok());
  }

  static bool MovedBy(const std::vector<QueueMove>& moves, PodQueue from, const std::string& cause) {
    for (const QueueMove& m : moves) {
      if (m.from == from && m.cause == cause) return true;
    }
    return false;
  }

  FakeApiServer api_;
  std::unique_ptr<ScriptedExtender> extender_;
};

TEST_F(SchedulerQueueSimTest, AFilterErrorParksThePodUntilTheLeftoverFlush) {
  extender_->filter_error_ = true;
  auto sim = Start(Options());
  const std::string pod = AddPod("parked");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kUnschedulable; }));
  const absl::Time parked = absl::Now();
  extender_->filter_error_ = false;  // the extender could place it now; nothing tells the queue
  absl::SleepFor(absl::Milliseconds(700));  // well past its 100 ms backoff
  EXPECT_EQ(sim->QueueOf(pod), PodQueue::kUnschedulable);
  EXPECT_EQ(sim->Attempts(pod), 1);
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kBound; }));
  EXPECT_GE(absl::Now() - parked, absl::Milliseconds(1500));  // not before the flush threshold
  const std::vector<QueueMove> moves = sim->Moves(pod);
  EXPECT_TRUE(MovedBy(moves, PodQueue::kUnschedulable, "UnschedulableTimeout"));
  EXPECT_FALSE(MovedBy(moves, PodQueue::kUnschedulable, "PodUpdate"));
  EXPECT_THAT(moves.front().cause, "PodAdd");
}

TEST_F(SchedulerQueueSimTest, AnAnnotationUpdateMovesAParkedPodAtOnce) {
  extender_->filter_error_ = true;
  SchedulerQueueOptions o = Options();
  o.max_in_unschedulable = absl::Minutes(5);  // the real flush: out of reach of this test
  auto sim = Start(o);
  const std::string pod = AddPod("touched");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kUnschedulable; }));
  extender_->filter_error_ = false;
  absl::SleepFor(absl::Milliseconds(200));  // its backoff has run out
  Annotate("touched");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kBound; }));
  const std::vector<QueueMove> moves = sim->Moves(pod);
  ASSERT_TRUE(MovedBy(moves, PodQueue::kUnschedulable, "PodUpdate"));
  for (const QueueMove& m : moves) {
    if (m.from == PodQueue::kUnschedulable) {
      EXPECT_EQ(m.to, PodQueue::kActive);  // its backoff was over
    }
  }
}

TEST_F(SchedulerQueueSimTest, AnUpdateDuringBackoffGoesToTheBackoffQueueFirst) {
  extender_->filter_error_ = true;
  SchedulerQueueOptions o = Options();
  o.initial_backoff = absl::Seconds(1);
  o.max_in_unschedulable = absl::Minutes(5);
  auto sim = Start(o);
  const std::string pod = AddPod("early");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kUnschedulable; }));
  extender_->filter_error_ = false;
  Annotate("early");  // within its 1 s backoff
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kBound; }));
  const std::vector<QueueMove> moves = sim->Moves(pod);
  bool via_backoff = false;
  for (const QueueMove& m : moves) {
    if (m.from == PodQueue::kUnschedulable && m.cause == "PodUpdate") via_backoff = m.to == PodQueue::kBackoff;
  }
  EXPECT_TRUE(via_backoff);
  EXPECT_TRUE(MovedBy(moves, PodQueue::kBackoff, "BackoffComplete"));
}

TEST_F(SchedulerQueueSimTest, AStatusOnlyUpdateLeavesItParked) {
  extender_->filter_error_ = true;
  SchedulerQueueOptions o = Options();
  o.max_in_unschedulable = absl::Minutes(5);
  auto sim = Start(o);
  const std::string pod = AddPod("status");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kUnschedulable; }));
  extender_->filter_error_ = false;
  ASSERT_TRUE(api_.Mutate("pods", "team-a", "status", [](rapidjson::Document& d) {
    rapidjson::Value reason("Unschedulable", d.GetAllocator());
    d["status"].AddMember("reason", reason, d.GetAllocator());
  }).ok());
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(sim->QueueOf(pod), PodQueue::kUnschedulable);
  EXPECT_EQ(sim->Attempts(pod), 1);
}

TEST_F(SchedulerQueueSimTest, AFailedBindIsRetriedThroughBackoffWithoutHelp) {
  extender_->bind_error_ = true;
  SchedulerQueueOptions o = Options();
  o.max_in_unschedulable = absl::Minutes(5);
  auto sim = Start(o);
  const std::string pod = AddPod("rebind");
  ASSERT_TRUE(Eventually([&] { return sim->Attempts(pod) >= 1 && sim->QueueOf(pod) == PodQueue::kBackoff; }));
  extender_->bind_error_ = false;
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kBound; }));
  EXPECT_FALSE(MovedBy(sim->Moves(pod), PodQueue::kUnschedulable, "UnschedulableTimeout"));
}

TEST_F(SchedulerQueueSimTest, NoReadyEndpointIsAFailureThatParksThePod) {
  extender_->ready_ = false;
  SchedulerQueueOptions o = Options();
  o.max_in_unschedulable = absl::Minutes(5);
  auto sim = Start(o);
  const std::string pod = AddPod("nobody");
  ASSERT_TRUE(Eventually([&] { return sim->QueueOf(pod) == PodQueue::kUnschedulable; }));
  EXPECT_EQ(extender_->filters_.load(), 0);
  std::vector<QueueMove> moves = sim->Moves(pod);
  EXPECT_THAT(moves.back().detail, ::testing::HasSubstr("no endpoints"));
  EXPECT_EQ(sim->LastEndpoint(), "");
}

}  // namespace
}  // namespace gse::testing
