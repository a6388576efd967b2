// The take-over requeue (kube/pod_requeue.h) against the local API server: which pods it
// touches (pending ones that request a catalog resource, through LiveCluster's real wiring),
// that a pod bound or changed since the list is never touched blindly (resourceVersion
// precondition), idempotence per pass, the rate bound, cancellation; and the API server
// semantics it relies on (merge patch, precondition, field selector), checked on the fake.
#include "kube/pod_requeue.h"

#include <httplib.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "extender/extender_service.h"
#include "extender/live_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/mirror.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;
using testing::PodView;

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kExclusive[] = "nvidia.com/mig-1g.5gb";

std::map<std::string, PodView> PodsByKey(const FakeApiServer& fake) {
  std::map<std::string, PodView> out;
  for (PodView& p : fake.Pods()) out[p.key] = std::move(p);
  return out;
}

std::string RequeueValue(const FakeApiServer& fake, const std::string& key) {
  auto pods = PodsByKey(fake);
  auto it = pods.find(key);
  if (it == pods.end()) return "<gone>";
  auto a = it->second.annotations.find(kRequeueAnnotation);
  return a == it->second.annotations.end() ? "" : a->second;
}

std::string ResourceVersion(const FakeApiServer& fake, const std::string& ns, const std::string& name) {
  std::optional<std::string> pod = fake.Get("pods", ns, name);
  if (!pod) return "";
  rapidjson::Document doc;
  doc.Parse(pod->c_str());
  return doc["metadata"]["resourceVersion"].GetString();
}

class PodRequeueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    ASSERT_TRUE(fake_.LoadRecordedCluster().ok());
    // Nodes, namespaces and quotas as recorded; the pods are each test's own.
    for (const PodView& p : fake_.Pods()) {
      const size_t slash = p.key.find('/');
      ASSERT_TRUE(fake_.Delete("pods", p.key.substr(0, slash), p.key.substr(slash + 1)));
    }
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    KubeClientOptions client_options;
    client_options.write_qps = 1000;
    client_options.write_burst = 1000;
    client_ = std::move(*KubeClient::Create(config, client_options));
    ASSERT_TRUE(client_->CheckReachable(1, absl::Milliseconds(10)).ok());
  }

  std::string Pod(const std::string& ns, const std::string& name,
                  std::map<std::string, std::string> requests, const std::string& node = "",
                  const std::string& phase = "Pending") {
    PodSpec spec;
    spec.namespace_name = ns;
    spec.name = name;
    spec.requests = std::move(requests);
    spec.node = node;
    spec.phase = phase;
    EXPECT_TRUE(fake_.Apply("pods", PodJson(spec)).ok());
    return absl::StrCat(ns, "/", name);
  }

  // A requeuer whose `wants` is "requests kShared or kExclusive".
  std::unique_ptr<PodRequeuer> Requeuer(double qps = 1000, int passes = 1) {
    PodRequeueOptions o;
    o.qps = qps;
    o.passes = passes;
    o.settle = absl::Milliseconds(100);
    o.log = [](const std::string&) {};
    o.wants = [](const PodObject& pod) {
      for (const auto& c : pod.containers) {
        for (const auto& [resource, q] : c.requests_milli) {
          if (resource == kShared || resource == kExclusive) return true;
        }
      }
      return false;
    };
    auto r = std::make_unique<PodRequeuer>(client_.get(), o);
    r->Start();
    return r;
  }

  // Starts a pass whose patch of pod team-a/`name` the API server holds for 300 ms, and
  // returns once that patch has arrived: the test changes the pod meanwhile.
  std::unique_ptr<PodRequeuer> PassWithPatchHeld(const std::string& name) {
    FakeApiServer::Fault slow;
    slow.method = "PATCH";
    slow.path_contains = "/pods/" + name;
    slow.delay_before = absl::Milliseconds(300);
    fake_.AddFault(slow);
    auto requeuer = Requeuer();
    requeuer->Trigger("t");
    EXPECT_TRUE(Eventually([&] { return fake_.RequestCount("PATCH", "/pods/" + name) == 1; }));
    return requeuer;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
};

// Through LiveCluster, as the binary runs it: once ready (synced; no election here) the pass
// touches exactly the pending pods that ask for a catalog resource the extender can place.
TEST_F(PodRequeueTest, ReadyLiveClusterTouchesOnlyPendingPodsThatRequestCatalogResources) {
  const std::string gpu_a = Pod("team-a", "gpu-a", {{kShared, "1"}});
  const std::string gpu_b = Pod("team-a", "gpu-b", {{kExclusive, "1"}});
  const std::string cpu = Pod("team-a", "cpu", {{"cpu", "1"}});
  const std::string bound = Pod("team-a", "bound", {{kExclusive, "1"}}, "gpu-node-a");
  const std::string done = Pod("team-a", "done", {{kExclusive, "1"}}, "", "Failed");
  const std::string two = Pod("team-a", "two-tickets", {{kShared, "2"}});  // unresolvable
  const std::string leaving = Pod("team-a", "leaving", {{kShared, "1"}});
  ASSERT_TRUE(fake_.Mutate("pods", "team-a", "leaving", [](rapidjson::Document& d) {
    d["metadata"].AddMember("deletionTimestamp", "2026-01-01T00:00:00Z", d.GetAllocator());
  }).ok());
  std::map<std::string, std::string> rv_before;
  for (const auto& [key, view] : PodsByKey(fake_)) {
    const size_t slash = key.find('/');
    rv_before[key] = ResourceVersion(fake_, key.substr(0, slash), key.substr(slash + 1));
  }

  testing::ScratchDir dir;
  dir.Write("kubeconfig", fake_.Kubeconfig());
  LiveClusterOptions o;
  o.kubeconfig = dir.File("kubeconfig");
  o.connect_attempts = 2;
  o.connect_backoff = absl::Milliseconds(10);
  o.reflector.resync_period = absl::ZeroDuration();
  o.reflector.log = [](const std::string&) {};
  o.requeue_options.passes = 1;
  o.requeue_options.log = [](const std::string&) {};
  Mirror mirror(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions());
  auto live = LiveCluster::Connect(o, &mirror);
  ASSERT_TRUE(live.ok()) << live.status();
  ExtenderService service(&mirror, std::move(*MakePolicy("affinity-pack")), (*live)->binder());
  (*live)->Start(&service);
  ASSERT_TRUE(Eventually([&] { return (*live)->requeue_counters().passes == 1; }));
  (*live)->Stop();

  const std::string gpu_a_value = RequeueValue(fake_, gpu_a);
  EXPECT_THAT(gpu_a_value, ::testing::EndsWith("/1/1"));  // term 1, pass 1
  EXPECT_EQ(RequeueValue(fake_, gpu_b), gpu_a_value);
  for (const std::string& key : {cpu, bound, done, two, leaving}) {
    EXPECT_EQ(RequeueValue(fake_, key), "") << key;
  }
  // Only the touched pods were written; nothing else of theirs changed.
  for (const auto& [key, view] : PodsByKey(fake_)) {
    const size_t slash = key.find('/');
    const bool touched = key == gpu_a || key == gpu_b;
    EXPECT_EQ(ResourceVersion(fake_, key.substr(0, slash), key.substr(slash + 1)) != rv_before[key],
              touched)
        << key;
    if (touched) {
      EXPECT_EQ(view.node, "") << key;
    }
  }
  EXPECT_EQ((*live)->requeue_counters().touched, 2);
}

TEST_F(PodRequeueTest, APodBoundBetweenListAndPatchIsNotTouched) {
  const std::string key = Pod("team-a", "racing", {{kShared, "1"}});
  // The patch waits in the API server while the pod gets bound: its precondition then fails.
  auto requeuer = PassWithPatchHeld("racing");
  ASSERT_TRUE(fake_.Mutate("pods", "team-a", "racing", [](rapidjson::Document& d) {
    d["spec"].AddMember("nodeName", "mig-a", d.GetAllocator());
  }).ok());
  ASSERT_TRUE(requeuer->WaitForPasses(1, absl::Seconds(10)));
  EXPECT_EQ(RequeueValue(fake_, key), "");
  PodRequeueCounters c = requeuer->counters();
  EXPECT_EQ(c.touched, 0);
  EXPECT_EQ(c.changed, 1);
  EXPECT_EQ(fake_.RequestCount("PATCH", "/pods/racing"), 1);  // the 409; no blind retry
}

TEST_F(PodRequeueTest, APodChangedButStillPendingIsTouchedAtItsNewVersion) {
  const std::string key = Pod("team-a", "relabelled", {{kShared, "1"}});
  auto requeuer = PassWithPatchHeld("relabelled");
  ASSERT_TRUE(fake_.Mutate("pods", "team-a", "relabelled", [](rapidjson::Document& d) {
    rapidjson::Value& meta = d["metadata"];
    if (!meta.HasMember("labels")) {
      meta.AddMember("labels", rapidjson::Value(rapidjson::kObjectType), d.GetAllocator());
    }
    meta["labels"].AddMember("tier", "gold", d.GetAllocator());
  }).ok());
  ASSERT_TRUE(requeuer->WaitForPasses(1, absl::Seconds(10)));
  EXPECT_EQ(RequeueValue(fake_, key), "t/1");
  EXPECT_EQ(requeuer->counters().touched, 1);
  EXPECT_EQ(fake_.RequestCount("PATCH", "/pods/relabelled"), 2);  // 409, re-read, patched
}

TEST_F(PodRequeueTest, APodDeletedBeforeItsPatchCountsAsChanged) {
  Pod("team-a", "gone", {{kShared, "1"}});
  auto requeuer = PassWithPatchHeld("gone");
  ASSERT_TRUE(fake_.Delete("pods", "team-a", "gone"));
  ASSERT_TRUE(requeuer->WaitForPasses(1, absl::Seconds(10)));
  EXPECT_EQ(requeuer->counters().changed, 1);
  EXPECT_EQ(requeuer->counters().failed, 0);
}

TEST_F(PodRequeueTest, EachPassIsANewValueAndRepeatingAPassWritesNothing) {
  const std::string key = Pod("team-a", "once", {{kShared, "1"}});
  {
    auto two_passes = Requeuer(1000, /*passes=*/2);
    two_passes->Trigger("term-1");
    ASSERT_TRUE(two_passes->WaitForPasses(2, absl::Seconds(10)));
    EXPECT_EQ(RequeueValue(fake_, key), "term-1/2");  // the second pass touched it again
    EXPECT_EQ(two_passes->counters().touched, 2);
  }
  auto one_pass = Requeuer(1000, /*passes=*/1);
  one_pass->Trigger("term-2");
  ASSERT_TRUE(one_pass->WaitForPasses(1, absl::Seconds(10)));
  EXPECT_EQ(RequeueValue(fake_, key), "term-2/1");
  // The same pass again (a retried take-over): the pod carries its value, nothing is written.
  const std::string rv = ResourceVersion(fake_, "team-a", "once");
  const int64_t patches = fake_.RequestCount("PATCH", "/pods/once");
  one_pass->Trigger("term-2");
  ASSERT_TRUE(one_pass->WaitForPasses(2, absl::Seconds(10)));
  EXPECT_EQ(one_pass->counters().already, 1);
  EXPECT_EQ(one_pass->counters().touched, 1);
  EXPECT_EQ(fake_.RequestCount("PATCH", "/pods/once"), patches);
  EXPECT_EQ(ResourceVersion(fake_, "team-a", "once"), rv);
}

TEST_F(PodRequeueTest, PatchesArePacedAtTheConfiguredRate) {
  for (int i = 0; i < 6; ++i) Pod("team-a", absl::StrCat("paced-", i), {{kShared, "1"}});
  auto requeuer = Requeuer(/*qps=*/10);
  const absl::Time start = absl::Now();
  requeuer->Trigger("t");
  ASSERT_TRUE(requeuer->WaitForPasses(1, absl::Seconds(20)));
  EXPECT_EQ(requeuer->counters().touched, 6);
  // 6 patches at 10 per second are at least 5 intervals of 100 ms apart (a lower bound only:
  // a loaded machine makes it slower, never faster).
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
}

TEST_F(PodRequeueTest, CancelStopsThePassAtOnce) {
  for (int i = 0; i < 20; ++i) Pod("team-a", absl::StrCat("many-", i), {{kShared, "1"}});
  auto requeuer = Requeuer(/*qps=*/5);
  requeuer->Trigger("t");
  ASSERT_TRUE(Eventually([&] { return requeuer->counters().touched >= 1; }));
  requeuer->Cancel();
  ASSERT_TRUE(requeuer->WaitForPasses(1, absl::Seconds(5)));
  const PodRequeueCounters c = requeuer->counters();
  EXPECT_EQ(c.passes_cancelled, 1);
  EXPECT_LT(c.touched, 20);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(requeuer->counters().touched, c.touched);  // nothing after the cancel
}

TEST_F(PodRequeueTest, AFailedListIsCountedAndTheNextPassWorks) {
  const std::string key = Pod("team-a", "later", {{kShared, "1"}});
  FakeApiServer::Fault down;
  down.method = "GET";
  down.path_contains = "/api/v1/pods";
  down.status = 503;
  fake_.AddFault(down);
  auto requeuer = Requeuer(1000, /*passes=*/2);
  requeuer->Trigger("t");
  ASSERT_TRUE(requeuer->WaitForPasses(2, absl::Seconds(10)));
  EXPECT_EQ(requeuer->counters().passes_failed, 1);
  EXPECT_EQ(requeuer->counters().passes, 1);
  EXPECT_EQ(RequeueValue(fake_, key), "t/2");
}

// What the requeue relies on, as kube-apiserver does it (and the fake imitates).
TEST_F(PodRequeueTest, MergePatchPreconditionAndFieldSelectorOnTheApiServer) {
  Pod("team-a", "p", {{kShared, "1"}});
  Pod("team-a", "q", {{kShared, "1"}}, "mig-a");
  const std::string path = "/api/v1/namespaces/team-a/pods/p";
  const std::string rv = ResourceVersion(fake_, "team-a", "p");
  // Stale resourceVersion: 409 with the API server's text.
  absl::StatusOr<std::string> stale = client_->MergePatchWithTimeout(
      path, R"({"metadata":{"resourceVersion":"1","annotations":{"x":"y"}}})", absl::Seconds(2));
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(KubeErrorOf(stale.status()).http_code, 409);
  EXPECT_THAT(stale.status().message(), HasSubstr("the object has been modified"));
  // Current one: applied, a new version, other annotations kept, null removes.
  ASSERT_TRUE(client_->MergePatchWithTimeout(
                  path, absl::StrCat(R"({"metadata":{"resourceVersion":")", rv,
                                     R"(","annotations":{"x":"y","z":"w"}}})"),
                  absl::Seconds(2))
                  .ok());
  const std::string rv2 = ResourceVersion(fake_, "team-a", "p");
  EXPECT_NE(rv2, rv);
  ASSERT_TRUE(client_->MergePatchWithTimeout(path, R"({"metadata":{"annotations":{"z":null}}})",
                                             absl::Seconds(2))
                  .ok());
  auto pods = PodsByKey(fake_);
  EXPECT_EQ(pods["team-a/p"].annotations.count("x"), 1u);
  EXPECT_EQ(pods["team-a/p"].annotations.count("z"), 0u);
  // A patch that changes nothing writes nothing.
  const std::string rv3 = ResourceVersion(fake_, "team-a", "p");
  ASSERT_TRUE(client_->MergePatchWithTimeout(path, R"({"metadata":{"annotations":{"x":"y"}}})",
                                             absl::Seconds(2))
                  .ok());
  EXPECT_EQ(ResourceVersion(fake_, "team-a", "p"), rv3);
  // Missing pod: 404. Other patch types: 415. Changing the UID: 422.
  EXPECT_EQ(KubeErrorOf(client_->MergePatchWithTimeout("/api/v1/namespaces/team-a/pods/nope", "{}",
                                                       absl::Seconds(2))
                            .status())
                .http_code,
            404);
  httplib::Client raw("127.0.0.1", fake_.port());
  httplib::Headers auth = {{"Authorization", "Bearer test-token"}};
  auto strategic = raw.Patch(path, auth, "{}", "application/strategic-merge-patch+json");
  ASSERT_TRUE(strategic);
  EXPECT_EQ(strategic->status, 415);
  EXPECT_EQ(KubeErrorOf(client_->MergePatchWithTimeout(path, R"({"metadata":{"uid":"other"}})",
                                                       absl::Seconds(2))
                            .status())
                .http_code,
            422);
  // Field selectors: pending pods only; an unsupported field is a 400.
  std::vector<std::string> names;
  ASSERT_TRUE(client_->List("/api/v1/pods?fieldSelector=spec.nodeName%3D", [&](const rapidjson::Value& page) {
    for (const auto& item : page["items"].GetArray()) names.push_back(item["metadata"]["name"].GetString());
    return absl::OkStatus();
  }).ok());
  EXPECT_THAT(names, ::testing::Contains("p"));
  EXPECT_THAT(names, ::testing::Not(::testing::Contains("q")));
  absl::StatusOr<std::string> bad = client_->Get("/api/v1/pods?fieldSelector=spec.foo%3Dbar");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(KubeErrorOf(bad.status()).http_code, 400);
  EXPECT_THAT(bad.status().message(), HasSubstr("field label not supported: spec.foo"));
}

}  // namespace
}  // namespace gse
