// The local API server's fault injection and observation as the fault run relies on them
// (testsupport/fake_apiserver.h): errors after a commit, held watches, requests in flight,
// fault hit counts and the store's objects. The rest of its wire behaviour is exercised by the
// suites of the code that talks to it (kube_client, kube_reflector, api_binder, live_cluster).
#include "testsupport/fake_apiserver.h"

#include <httplib.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace gse::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kBinding[] =
    R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":"nb","namespace":"team-a",)"
    R"("annotations":{"gpu.themelio.io/unit":"mig-a/nvidia.com/mig-1g.5gb.shared/0"}},)"
    R"("target":{"apiVersion":"v1","kind":"Node","name":"mig-a"}})";

class FakeApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    PodSpec pod;
    pod.name = "nb";
    pod.requests = {{"nvidia.com/mig-1g.5gb.shared", "1"}};
    ASSERT_TRUE(fake_.Apply("pods", PodJson(pod)).ok());
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", fake_.port());
    c->set_bearer_token_auth("test-token");
    c->set_read_timeout(10, 0);
    return c;
  }

  httplib::Result Bind() const {
    return Client()->Post("/api/v1/namespaces/team-a/pods/nb/binding", kBinding, "application/json");
  }

  std::string NodeOfPod() const {
    for (const PodView& p : fake_.Pods()) {
      if (p.key == "team-a/nb") return p.node;
    }
    return "(gone)";
  }

  // A watch of every pod from the current resourceVersion, collecting what it is sent until
  // it is destroyed (which drops it).
  class PodWatch {
   public:
    explicit PodWatch(FakeApiServerTest& test)
        : test_(test), client_(test.Client()), from_(test.fake_.resource_version()) {
      thread_ = std::thread([this] {
        client_->Get(absl::StrCat("/api/v1/pods?watch=1&resourceVersion=", from_, "&timeoutSeconds=8").c_str(),
                     [this](const char* data, size_t n) {
                       absl::MutexLock lock(&mu_);
                       received_.append(data, n);
                       return true;
                     });
      });
    }
    ~PodWatch() {
      test_.fake_.DropWatches();
      thread_.join();
    }
    std::string Received() const {
      absl::MutexLock lock(&mu_);
      return received_;
    }

   private:
    FakeApiServerTest& test_;
    std::unique_ptr<httplib::Client> client_;
    const std::string from_;
    std::thread thread_;
    mutable absl::Mutex mu_;
    std::string received_ ABSL_GUARDED_BY(mu_);
  };

  FakeApiServer fake_;
};

TEST_F(FakeApiServerTest, AnErrorAfterCommitWritesAndThenAnswersTheError) {
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.status = 503;
  f.status_after_commit = true;
  f.label = "after";
  fake_.AddFault(f);
  httplib::Result r = Bind();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr(R"("reason":"ServiceUnavailable")"));
  EXPECT_THAT(r->body, HasSubstr(R"("code":503)"));
  EXPECT_EQ(NodeOfPod(), "mig-a") << "the write committed although the answer says it failed";
  EXPECT_EQ(fake_.FaultHits().at("after"), 1);
  ASSERT_EQ(fake_.FaultLog().size(), 1u);
  EXPECT_EQ(fake_.FaultLog()[0].label, "after");
  EXPECT_EQ(fake_.FaultLog()[0].request, "POST /api/v1/namespaces/team-a/pods/nb/binding");
  // The fault is used up: a retry meets the pod as it is, already assigned.
  r = Bind();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  EXPECT_THAT(r->body, HasSubstr("is already assigned to node"));
}

TEST_F(FakeApiServerTest, AnErrorBeforeCommitWritesNothing) {
  FakeApiServer::Fault f;
  f.method = "POST";
  f.path_contains = "/binding";
  f.status = 409;
  f.label = "before";
  f.times = 2;
  fake_.AddFault(f);
  httplib::Result r = Bind();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  EXPECT_THAT(r->body, HasSubstr(R"("reason":"Conflict")"));
  EXPECT_EQ(NodeOfPod(), "");
  EXPECT_EQ(fake_.FaultHits().at("before"), 1);
  EXPECT_EQ(fake_.FaultHits().count("never"), 0u);
}

TEST_F(FakeApiServerTest, HeldWatchesSendNothingUntilReleasedThenEverythingInOrder) {
  fake_.HoldWatches(true);
  PodWatch watch(*this);
  ASSERT_TRUE(Eventually([&] { return fake_.open_watches() == 1; }));
  ASSERT_TRUE(fake_.SetPodPhase("team-a", "nb", "Running").ok());
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "nb"));
  absl::SleepFor(absl::Milliseconds(400));  // several of the watch's polls
  EXPECT_EQ(watch.Received(), "") << "a held watch sends nothing";
  EXPECT_FALSE(fake_.WatchesCaughtUp());
  fake_.HoldWatches(false);
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(watch.Received(), R"("type":"DELETED")"); }));
  EXPECT_LT(watch.Received().find(R"("type":"MODIFIED")"), watch.Received().find(R"("type":"DELETED")"));
  EXPECT_TRUE(Eventually([&] { return fake_.WatchesCaughtUp(); }));
}

TEST_F(FakeApiServerTest, OpenWatchesAreCountedPerResource) {
  {
    PodWatch watch(*this);
    ASSERT_TRUE(Eventually([&] { return fake_.open_watches() == 1; }));
    EXPECT_EQ(fake_.open_watches("pods"), 1);
    EXPECT_EQ(fake_.open_watches("nodes"), 0) << "a pod watch is not a node watch";
  }  // the watch is dropped
  EXPECT_TRUE(Eventually([&] { return fake_.open_watches("pods") == 0; }));
  EXPECT_EQ(fake_.open_watches(), 0);
}

TEST_F(FakeApiServerTest, HeldWatchesCanBeReleasedUpToAResourceVersion) {
  fake_.HoldWatches(true);
  PodWatch watch(*this);
  ASSERT_TRUE(Eventually([&] { return fake_.open_watches() == 1; }));
  ASSERT_TRUE(fake_.SetPodPhase("team-a", "nb", "Running").ok());
  const int64_t running = fake_.resource_version_number();
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "nb"));
  fake_.HoldWatchesAfter(running);
  ASSERT_TRUE(Eventually([&] { return absl::StrContains(watch.Received(), R"("type":"MODIFIED")"); }));
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_FALSE(absl::StrContains(watch.Received(), R"("type":"DELETED")")) << "held after " << running;
  fake_.HoldWatches(false);
  EXPECT_TRUE(Eventually([&] { return absl::StrContains(watch.Received(), R"("type":"DELETED")"); }));
}

TEST_F(FakeApiServerTest, RequestsInFlightCountHeldWritesButNotHeldAnswers) {
  FakeApiServer::Fault slow;
  slow.method = "POST";
  slow.path_contains = "/binding";
  slow.delay_before = absl::Milliseconds(600);
  fake_.AddFault(slow);
  std::atomic<int> status{0};
  std::thread t([&] {
    httplib::Result r = Bind();
    status = r ? r->status : -1;
  });
  ASSERT_TRUE(Eventually([&] { return fake_.InFlightRequests() == 1; }));
  EXPECT_EQ(NodeOfPod(), "") << "held before it commits";
  t.join();
  EXPECT_EQ(status.load(), 201);
  EXPECT_EQ(NodeOfPod(), "mig-a");
  EXPECT_EQ(fake_.InFlightRequests(), 0);

  // An answer held after the commit: nothing can change any more, so nothing is in flight.
  FakeApiServer::Fault lost;
  lost.method = "GET";
  lost.path_contains = "/pods/nb";
  lost.delay_after = absl::Seconds(2);
  fake_.AddFault(lost);
  std::atomic<bool> answered{false};
  std::thread u([&] {
    (void)Client()->Get("/api/v1/namespaces/team-a/pods/nb");
    answered = true;
  });
  ASSERT_TRUE(Eventually([&] { return fake_.RequestCount("GET", "/pods/nb") == 1; }));
  EXPECT_TRUE(Eventually([&] { return fake_.InFlightRequests() == 0; }, absl::Seconds(1)));
  EXPECT_FALSE(answered.load()) << "the answer is still held";
  u.join();
}

TEST_F(FakeApiServerTest, ObjectsReadsTheStoreWithKindAndApiVersion) {
  ASSERT_TRUE(fake_.Apply("namespaces", R"({"metadata":{"name":"team-a"}})").ok());
  ASSERT_TRUE(fake_.Apply("namespaces", R"({"metadata":{"name":"team-b"}})").ok());
  const std::vector<std::string> ns = fake_.Objects("namespaces");
  ASSERT_EQ(ns.size(), 2u);
  EXPECT_THAT(ns[0], HasSubstr(R"("kind":"Namespace","apiVersion":"v1")"));
  EXPECT_THAT(ns[0], HasSubstr(R"("name":"team-a")"));
  EXPECT_THAT(ns[1], HasSubstr(R"("name":"team-b")"));
  EXPECT_TRUE(fake_.Objects("nodes").empty());
  EXPECT_TRUE(fake_.Objects("no-such-resource").empty());
}

}  // namespace
}  // namespace gse::testing
