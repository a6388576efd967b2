// KubeReflector against the fake API server: the mirror is built from one complete list,
// follows the watch, survives dropped and corrupt streams without loss, relists on 410 Gone
// (as an HTTP answer and as an ERROR event), and a resync repairs and reports drift.
#include "kube/kube_reflector.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/catalog.h"
#include "state/mirror.h"
#include "testsupport/fake_apiserver.h"
#include "tests/testing/eventually.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;

using testing::Eventually;

// A pod bound to mig-a with our assignment on time-sliced unit `unit` (as after a bind).
std::string BoundPod(const std::string& name, int unit) {
  PodSpec spec;
  spec.name = name;
  spec.requests = {{"nvidia.com/mig-1g.5gb.shared", "1"}};
  spec.node = "mig-a";
  spec.phase = "Running";
  spec.annotations = {{"gpu.themelio.io/unit", absl::StrCat("mig-a/nvidia.com/mig-1g.5gb.shared/", unit)},
                      {"gpu.themelio.io/amount", "1"}};
  return PodJson(spec);
}

class ReflectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options fo;
    fo.bookmark_interval = absl::Milliseconds(200);
    fake_ = std::make_unique<FakeApiServer>(fo);
    ASSERT_TRUE(fake_->Start().ok());
    ASSERT_TRUE(fake_->LoadRecordedCluster().ok());
    // The recorded pod after its binding: bound to mig-a, unit 0, by our annotation.
    ASSERT_TRUE(fake_->ApplyFile("pods", testing::SharedPath("protocol/kube-api-1.26/pod-after-binding.json")).ok());
    KubeConfig config;
    config.server = fake_->url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
    mirror_ = std::make_unique<Mirror>(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions());
  }
  void TearDown() override {
    if (reflector_) reflector_->Stop();
  }

  void StartReflector(absl::Duration resync = absl::ZeroDuration()) {
    ReflectorOptions ro;
    ro.watch_timeout = absl::Seconds(5);
    ro.resync_period = resync;
    ro.backoff_initial = absl::Milliseconds(50);
    ro.backoff_max = absl::Milliseconds(400);
    ro.log = [this](const std::string& line) {
      absl::MutexLock lock(&log_mu_);
      logs_.push_back(line);
    };
    reflector_ = std::make_unique<KubeReflector>(client_.get(), mirror_.get(), ro);
    reflector_->Start();
  }

  bool MirrorHasPod(const std::string& key) const {
    return mirror_->Read([&](const ClusterState& s) { return s.FindPod(key) != nullptr; });
  }
  std::string MirrorUnitOf(const std::string& key) const {
    return mirror_->Read([&](const ClusterState& s) -> std::string {
      const PodRecord* p = s.FindPod(key);
      if (p == nullptr) return "";
      return absl::StrCat(p->assignment.node, "/", s.catalog().Get(p->assignment.offering).resource, "/",
                          p->assignment.units.empty() ? -1 : p->assignment.units[0]);
    });
  }
  size_t MirrorNodes() const {
    return mirror_->Read([](const ClusterState& s) { return s.nodes().size(); });
  }
  std::vector<std::string> Logs() const {
    absl::MutexLock lock(&log_mu_);
    return logs_;
  }

  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<KubeClient> client_;
  std::unique_ptr<Mirror> mirror_;
  std::unique_ptr<KubeReflector> reflector_;
  mutable absl::Mutex log_mu_;
  std::vector<std::string> logs_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(ReflectorTest, InitialListBuildsTheMirrorFromTheApiServer) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  EXPECT_EQ(MirrorNodes(), 3u);  // gpu-node-a, gpu-node-b, mig-a
  EXPECT_EQ(MirrorUnitOf("team-a/nb-0"), "mig-a/nvidia.com/mig-1g.5gb.shared/0");
  EXPECT_FALSE(MirrorHasPod("team-a/nb-1"));  // pending: holds nothing
  // The namespace's project label and the ResourceQuota arrived too: 8 tickets, and nb-0's
  // slice charged with all of its 4 tickets (time-sliced quota counts tickets of owned slices).
  mirror_->Read([](const ClusterState& s) {
    ProjectId p = s.FindProject("team-a");
    ASSERT_NE(p, kNoProject);
    const Offering* o = s.catalog().Find("nvidia.com/mig-1g.5gb.shared");
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(s.Quota(p, o->id), 8);
    EXPECT_EQ(s.Usage(p, o->id), 4);
  });
  ReflectorCounters c = reflector_->counters();
  EXPECT_TRUE(c.synced);
  EXPECT_EQ(c.relists, 0);
  EXPECT_EQ(c.drift_repairs, 0);
  EXPECT_THAT(Logs(), ::testing::Contains(HasSubstr("\"event\":\"synced\"")));
}

TEST_F(ReflectorTest, NeverSyncedOnAPartialListAndNothingApplied) {
  // The quota list fails three times: nodes, pods and namespaces listed fine must not be
  // applied on their own.
  FakeApiServer::Fault fault;
  fault.method = "GET";
  fault.path_contains = "/api/v1/resourcequotas";
  fault.times = 3;
  fault.status = 500;
  fake_->AddFault(fault);
  StartReflector();
  // Until the fourth quota list succeeds, the mirror stays empty and not synced.
  while (!reflector_->synced()) {
    const size_t nodes = MirrorNodes();
    const int64_t quota_lists = fake_->RequestCount("GET", "/api/v1/resourcequotas");
    EXPECT_TRUE(nodes == 0 || quota_lists >= 4) << nodes << " nodes after " << quota_lists;
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(8)));
  EXPECT_EQ(MirrorNodes(), 3u);
  EXPECT_GE(reflector_->counters().api_errors, 3);
  EXPECT_GE(reflector_->counters().list_errors, 3);  // the metrics' op="list"
  EXPECT_GE(fake_->RequestCount("GET", "/api/v1/resourcequotas"), 4);  // + the watch
}

TEST_F(ReflectorTest, WatchEventsFollowTheApiServer) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("w-1", 3)).ok());
  EXPECT_TRUE(Eventually([&] { return MirrorUnitOf("team-a/w-1") == "mig-a/nvidia.com/mig-1g.5gb.shared/3"; }));
  // The pod finishes: it holds nothing any more.
  ASSERT_TRUE(fake_->SetPodPhase("team-a", "w-1", "Succeeded").ok());
  EXPECT_TRUE(Eventually([&] { return !MirrorHasPod("team-a/w-1"); }));
  ASSERT_TRUE(fake_->Delete("pods", "team-a", "nb-0"));
  EXPECT_TRUE(Eventually([&] { return !MirrorHasPod("team-a/nb-0"); }));
  ASSERT_TRUE(fake_->Delete("nodes", "", "gpu-node-a"));
  EXPECT_TRUE(Eventually([&] { return MirrorNodes() == 2; }));
  // (The counter moves right after the mirror write that the waits above observed.)
  EXPECT_TRUE(Eventually([&] { return reflector_->counters().events_applied >= 4; }));
}

TEST_F(ReflectorTest, DroppedAndCorruptStreamsResumeFromTheLastResourceVersionWithoutLoss) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 4; }));
  fake_->TruncateWatchEvents(1);  // the next event arrives cut in half
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("c-1", 1)).ok());
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("c-2", 2)).ok());
  EXPECT_TRUE(Eventually([&] { return MirrorHasPod("team-a/c-1") && MirrorHasPod("team-a/c-2"); }));
  fake_->DropWatches();
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("c-3", 3)).ok());
  EXPECT_TRUE(Eventually([&] { return MirrorHasPod("team-a/c-3"); }));
  // The corrupt line and the dropped streams are counted (each watch thread counts its own).
  EXPECT_TRUE(Eventually([&] {
    ReflectorCounters c = reflector_->counters();
    return c.api_errors >= 2 && c.watch_restarts >= 2;
  }));
  {
    // Broken down for the metrics: every watch was dropped and comes back (each in its own
    // time); the errors were watch errors, not list errors; the breakdowns add up.
    EXPECT_TRUE(Eventually([&] {
      const ReflectorCounters c = reflector_->counters();
      // The four core kinds (the DRA kinds are watched in DRA mode only).
      return std::all_of(c.watch_restarts_by_kind.begin(),
                         c.watch_restarts_by_kind.begin() + KubeReflector::kDeviceClasses,
                         [](int64_t n) { return n >= 1; });
    }));
    const ReflectorCounters c = reflector_->counters();
    int64_t restarts = 0;
    for (int64_t n : c.watch_restarts_by_kind) restarts += n;
    EXPECT_EQ(restarts, c.watch_restarts);
    EXPECT_EQ(c.list_errors, 0);
    EXPECT_EQ(c.watch_errors, c.api_errors);
  }
  EXPECT_EQ(reflector_->counters().relists, 0);  // resuming needed no relist: nothing was lost
  EXPECT_THAT(Logs(), ::testing::Contains(HasSubstr("corrupt event line")));
}

TEST_F(ReflectorTest, ExpiredErrorEventRelistsAndReplacesTheMirror) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  // Watches fail while the cluster changes and the history is compacted, so the next watch
  // from the old resourceVersion gets the ERROR 410 event (HTTP 200) and must relist.
  // Drop only watches that are open (one still being set up would miss the drop).
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 4; }));
  FakeApiServer::Fault down;
  down.method = "GET";
  down.query_contains = "watch=1";
  down.times = -1;
  down.status = 503;
  fake_->AddFault(down);
  fake_->DropWatches();
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 0; }));
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("missed", 5)).ok());
  ASSERT_TRUE(fake_->Delete("pods", "team-a", "nb-0"));
  fake_->Compact();
  fake_->ClearFaults();
  ASSERT_TRUE(reflector_->WaitForRelists(1, absl::Seconds(8)));
  EXPECT_EQ(MirrorUnitOf("team-a/missed"), "mig-a/nvidia.com/mig-1g.5gb.shared/5");
  EXPECT_FALSE(MirrorHasPod("team-a/nb-0"));
  ReflectorCounters c = reflector_->counters();
  EXPECT_GE(c.expired, 1);
  EXPECT_EQ(c.drift_repairs, 2);  // the pod it missed, the pod it kept
  EXPECT_EQ(c.pod_repairs, 2);
  EXPECT_EQ(c.node_repairs + c.project_quota_repairs, 0);
  // Watching resumes after the relist.
  ASSERT_TRUE(fake_->Apply("pods", BoundPod("after", 6)).ok());
  EXPECT_TRUE(Eventually([&] { return MirrorHasPod("team-a/after"); }));
}

TEST_F(ReflectorTest, GoneAnswerToTheWatchRequestAlsoRelists) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  // Drop only watches that are open (one still being set up would miss the drop).
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 4; }));
  FakeApiServer::Fault gone;
  gone.method = "GET";
  gone.path_contains = "/api/v1/nodes";
  gone.query_contains = "watch=1";
  gone.status = 410;
  fake_->AddFault(gone);
  fake_->DropWatches();
  ASSERT_TRUE(reflector_->WaitForRelists(1, absl::Seconds(8)))
      << "watches started " << fake_->watches_started() << ", open " << fake_->open_watches()
      << ", node watch requests " << fake_->RequestCount("GET", "/api/v1/nodes") << "\n"
      << ::testing::PrintToString(Logs());
  EXPECT_GE(reflector_->counters().expired, 1);
  EXPECT_EQ(MirrorNodes(), 3u);
}

TEST_F(ReflectorTest, BookmarksKeepTheResourceVersionFreshSoCompactionNeedsNoRelist) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  // Drop only watches that are open (one still being set up would miss the drop).
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 4; }));
  // Changes to other kinds move the resourceVersion; the pod watch learns it from bookmarks.
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(fake_->Apply("nodes", absl::StrCat(R"({"metadata":{"name":"cpu-)", i, R"("}})")).ok());
  }
  absl::SleepFor(absl::Milliseconds(600));  // > 2 bookmark intervals
  fake_->Compact();
  fake_->DropWatches();
  ASSERT_TRUE(Eventually([&] { return fake_->watches_started() >= 8; }));
  absl::SleepFor(absl::Milliseconds(200));
  ReflectorCounters c = reflector_->counters();
  EXPECT_EQ(c.expired, 0);
  EXPECT_EQ(c.relists, 0);
}

TEST_F(ReflectorTest, ResyncRepairsDriftAndLogsWhatDiffered) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  // Something corrupts the cache: a holder vanishes and a node is forgotten.
  mirror_->Write([](ClusterState& s) {
    s.RemovePod(s.FindPod("team-a/nb-0")->uid, "team-a/nb-0");
    s.RemoveNode("gpu-node-b");
  });
  ASSERT_FALSE(MirrorHasPod("team-a/nb-0"));
  reflector_->RequestResync();
  ASSERT_TRUE(reflector_->WaitForRelists(1, absl::Seconds(8)));
  EXPECT_EQ(MirrorUnitOf("team-a/nb-0"), "mig-a/nvidia.com/mig-1g.5gb.shared/0");
  EXPECT_EQ(MirrorNodes(), 3u);
  EXPECT_EQ(reflector_->counters().drift_repairs, 2);
  std::vector<std::string> repairs;
  for (const std::string& l : Logs()) {
    if (l.find("drift_repair") != std::string::npos) repairs.push_back(l);
  }
  ASSERT_EQ(repairs.size(), 2u);
  EXPECT_THAT(repairs, ::testing::Contains(::testing::AllOf(
                           HasSubstr("\"kind\":\"pod\""), HasSubstr("\"key\":\"team-a/nb-0\""),
                           HasSubstr("\"mirror\":\"(absent)\""),
                           HasSubstr("\"api\":\"mig-a/nvidia.com/mig-1g.5gb.shared/0 x1 confirmed\""),
                           HasSubstr("\"cause\":\"resync\""))));
  EXPECT_THAT(repairs, ::testing::Contains(::testing::AllOf(HasSubstr("\"kind\":\"node\""),
                                                            HasSubstr("\"key\":\"gpu-node-b\""))));
  // A resync of an accurate mirror repairs nothing.
  reflector_->RequestResync();
  ASSERT_TRUE(reflector_->WaitForRelists(2, absl::Seconds(8)));
  EXPECT_EQ(reflector_->counters().drift_repairs, 2);
}

// The watch's DELETED event names the pod's UID: deleting the old pod of a name never frees
// what a recreated pod of the same name (another UID) holds (issue 12, finding 2).
TEST_F(ReflectorTest, DeletedEventRemovesOnlyThePodWithItsUid) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  const std::string old_uid =
      mirror_->Read([](const ClusterState& s) { return s.FindPod("team-a/nb-0")->uid; });
  // team-a/nb-0 was recreated (new UID) and bound by us onto its project's own unit while the
  // watch still shows the old pod.
  const std::string new_uid = "0b1e0c5e-recreated-nb-0";
  mirror_->Write([&](ClusterState& s) {
    const Offering* o = s.catalog().Find("nvidia.com/mig-1g.5gb.shared");
    ASSERT_TRUE(s.Reserve(PodClaim{"team-a/nb-0", new_uid, "team-a", "team-a"},
                          Assignment{"mig-a", o->id, {0}, 1})
                    .ok());
    ASSERT_TRUE(s.Confirm(new_uid).ok());
    EXPECT_EQ(s.FindNode("mig-a")->Find(o->id)->units[0].used, 2) << "two pods, two tickets";
  });
  // Now the old pod's deletion arrives.
  ASSERT_TRUE(fake_->Delete("pods", "team-a", "nb-0"));
  ASSERT_TRUE(Eventually([&] {
    return mirror_->Read([&](const ClusterState& s) { return s.FindPodByUid(old_uid) == nullptr; });
  }));
  mirror_->Read([&](const ClusterState& s) {
    const Offering* o = s.catalog().Find("nvidia.com/mig-1g.5gb.shared");
    const PodRecord* kept = s.FindPodByUid(new_uid);
    ASSERT_NE(kept, nullptr) << "the recreated pod's holding went with the old pod's deletion";
    EXPECT_EQ(kept->assignment.units, std::vector<int32_t>{0});
    EXPECT_EQ(s.FindNode("mig-a")->Find(o->id)->units[0].used, 1);
    EXPECT_THAT(s.Audit().problems, ::testing::IsEmpty());
  });
}

TEST_F(ReflectorTest, StalePendingStateOfAPodWeBoundIsNotApplied) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  // Our bind of team-a/nb-1 (pending in the API server) committed in the mirror first...
  std::string uid;
  mirror_->Write([&](ClusterState& s) {
    const Offering* o = s.catalog().Find("nvidia.com/mig-1g.5gb.shared");
    Assignment a;
    a.node = "mig-a";
    a.offering = o->id;
    a.units = {4};
    uid = "ff88a4c8-b864-4061-8738-bb5f0d63b1ed";
    ASSERT_TRUE(s.Reserve(PodClaim{"team-a/nb-1", uid, "team-a", "team-a"}, a).ok());
    ASSERT_TRUE(s.Confirm(uid).ok());
  });
  // ...then the watch delivers a state of the pod from before the bind (still pending).
  ASSERT_TRUE(fake_->Mutate("pods", "team-a", "nb-1", [](rapidjson::Document& d) {
                      d["metadata"].AddMember("labels2", rapidjson::Value(rapidjson::kObjectType), d.GetAllocator());
                    }).ok());
  ASSERT_TRUE(Eventually([&] { return reflector_->counters().stale_pod_events >= 1; }));
  EXPECT_EQ(MirrorUnitOf("team-a/nb-1"), "mig-a/nvidia.com/mig-1g.5gb.shared/4");
  // A relist that is older than the bind keeps it too, and is not drift.
  reflector_->RequestResync();
  ASSERT_TRUE(reflector_->WaitForRelists(1, absl::Seconds(8)));
  EXPECT_EQ(MirrorUnitOf("team-a/nb-1"), "mig-a/nvidia.com/mig-1g.5gb.shared/4");
  EXPECT_EQ(reflector_->counters().drift_repairs, 0);
  // A pod recreated under the same name (new UID) is another pod: applied, holding released.
  ASSERT_TRUE(fake_->Delete("pods", "team-a", "nb-1"));
  PodSpec again;
  again.name = "nb-1";
  again.uid = "00000000-0000-4000-8000-00000000abcd";
  again.requests = {{"nvidia.com/mig-1g.5gb.shared", "1"}};
  ASSERT_TRUE(fake_->Apply("pods", PodJson(again)).ok());
  EXPECT_TRUE(Eventually([&] { return !MirrorHasPod("team-a/nb-1"); }));
}

TEST_F(ReflectorTest, PeriodicResyncRuns) {
  StartReflector(absl::Milliseconds(300));
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  EXPECT_TRUE(reflector_->WaitForRelists(2, absl::Seconds(5)));
  EXPECT_EQ(reflector_->counters().drift_repairs, 0);
}

TEST_F(ReflectorTest, StopEndsOpenWatchesPromptly) {
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(absl::Seconds(5)));
  ASSERT_TRUE(Eventually([&] { return fake_->open_watches() == 4; }));
  absl::Time start = absl::Now();
  reflector_->Stop();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(Eventually([&] { return fake_->open_watches() == 0; }));
}

}  // namespace
}  // namespace gse
