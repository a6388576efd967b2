// The extender in a (fake) live cluster: ExtenderService + LiveCluster (reflector, ApiBinder,
// leader election) against the fake API server, driven as kube-scheduler drives it (filter,
// prioritize, bind, retry on error).
//
// The referee is an independent audit of the fake server's pods: it reads each bound pod's
// node and gpu.themelio.io/unit annotation straight from the store and checks I1 (capacity),
// I2 (one project per time-sliced unit), I3 (affinity: a project's units are filled before a
// new one opens), I4 (quota), I5 (two tickets never placed) and I6 (pods without GPUs pass
// everywhere), then compares the mirror's /debug/state unit by unit with it.
#include "extender/live_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

// absl's flag storage reads through a seqlock whose std::atomic_thread_fence GCC rejects in
// ThreadSanitizer builds (-Wtsan: TSan does not model fences); flags are read at start-up only.
// (Clang has no -Wtsan and would refuse the unknown group.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
#include "absl/flags/flag.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "extender/extender_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/mirror.h"
#include "testsupport/fake_apiserver.h"
#include "tests/testing/eventually.h"
#include "tests/testing/live_extender.h"
#include "tests/testing/process.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;
using testing::FastLiveOptions;
using testing::LiveExtender;
using testing::StartLiveExtender;
using testing::PodJson;
using testing::PodSpec;
using testing::PodView;
using testing::ScratchDir;

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";  // time-sliced, 4 tickets per unit
constexpr char kExclusive[] = "nvidia.com/mig-1g.5gb";

using testing::Eventually;

// ---------------------------------------------------------------- the cluster

// The recorded cluster (gpu-node-a: 7 exclusive 1g.5gb slices; gpu-node-b: one 2g.10gb, one
// 3g.20gb; mig-a: 7 time-sliced 1g.5gb slices x 4 tickets; team-a with a quota of 8 tickets)
// plus two more projects.
void LoadCluster(FakeApiServer& fake) {
  ASSERT_TRUE(fake.LoadRecordedCluster().ok());
  ASSERT_TRUE(fake.Apply("namespaces", R"({"metadata":{"name":"team-b","labels":{"gpu.themelio.io/project":"team-b"}}})").ok());
  ASSERT_TRUE(fake.Apply("namespaces", R"({"metadata":{"name":"team-c"}})").ok());
  ASSERT_TRUE(fake.Apply("resourcequotas",
                         R"({"metadata":{"name":"gpu","namespace":"team-b"},"spec":{"hard":{"requests.nvidia.com/mig-1g.5gb.shared":"12"}}})")
                  .ok());
}

// Facts the audit knows on its own (not from the mirror): unit capacity and count.
struct UnitFacts {
  int capacity;
  int count;
  bool time_sliced;
};
const std::map<std::string, UnitFacts>& Facts() {
  static const auto* facts = new std::map<std::string, UnitFacts>{
      {"mig-a/nvidia.com/mig-1g.5gb.shared", {4, 7, true}},
      {"gpu-node-a/nvidia.com/mig-1g.5gb", {1, 7, false}},
      {"gpu-node-b/nvidia.com/mig-2g.10gb", {1, 1, false}},
      {"gpu-node-b/nvidia.com/mig-3g.20gb", {1, 1, false}}};
  return *facts;
}
// Quota in units of the time-sliced offering: ceil(tickets / 4).
const std::map<std::string, int> kQuotaUnits = {{"team-a", 2}, {"team-b", 3}};
std::string ProjectOf(const std::string& ns) { return ns; }  // labels name them the same

struct Audit {
  std::vector<std::string> violations;
  std::map<std::string, std::vector<std::string>> holders;  // unit id -> pod keys (sorted)
  std::map<std::string, int> units_owned;                   // project -> time-sliced units
  std::map<std::string, int> tickets;                       // project -> time-sliced tickets
  int bound_with_assignment = 0;
};

Audit AuditApiServer(const FakeApiServer& fake) {
  Audit audit;
  std::map<std::string, int> load;
  std::map<std::string, std::set<std::string>> projects;
  for (const PodView& pod : fake.Pods()) {
    if (pod.node.empty() || pod.phase == "Succeeded" || pod.phase == "Failed") continue;
    const std::string ns = pod.key.substr(0, pod.key.find('/'));
    auto unit_it = pod.annotations.find("gpu.themelio.io/unit");
    bool wants_gpu = false;
    for (const auto& [r, q] : pod.requests) wants_gpu |= absl::StartsWith(r, "nvidia.com/");
    if (unit_it == pod.annotations.end()) {
      if (wants_gpu) audit.violations.push_back(absl::StrCat(pod.key, ": bound GPU pod without assignment"));
      continue;
    }
    ++audit.bound_with_assignment;
    const std::string& v = unit_it->second;
    const size_t first = v.find('/');
    const size_t last = v.rfind('/');
    const std::string node = v.substr(0, first);
    const std::string prefix = v.substr(0, last);
    if (node != pod.node) audit.violations.push_back(absl::StrCat(pod.key, ": annotation names ", node, ", bound to ", pod.node));
    auto facts = Facts().find(prefix);
    if (facts == Facts().end()) {
      audit.violations.push_back(absl::StrCat(pod.key, ": unknown offering in ", v));
      continue;
    }
    if (pod.requests.count(prefix.substr(first + 1)) == 0) {
      audit.violations.push_back(absl::StrCat(pod.key, ": holds ", v, " but requests something else"));
    }
    int amount = 1;
    if (auto a = pod.annotations.find("gpu.themelio.io/amount"); a != pod.annotations.end()) {
      (void)absl::SimpleAtoi(a->second, &amount);
    }
    for (absl::string_view idx : absl::StrSplit(v.substr(last + 1), ',')) {
      int i = -1;
      if (!absl::SimpleAtoi(idx, &i) || i < 0 || i >= facts->second.count) {
        audit.violations.push_back(absl::StrCat(pod.key, ": unit index out of range in ", v));
        continue;
      }
      const std::string id = absl::StrCat(prefix, "/", i);
      load[id] += amount;
      projects[id].insert(ProjectOf(ns));
      audit.holders[id].push_back(pod.key);
      if (facts->second.time_sliced) audit.tickets[ProjectOf(ns)] += amount;
    }
  }
  for (auto& [id, keys] : audit.holders) std::sort(keys.begin(), keys.end());
  for (const auto& [id, used] : load) {
    const UnitFacts& f = Facts().at(id.substr(0, id.rfind('/')));
    if (used > f.capacity) audit.violations.push_back(absl::StrCat("I1: ", id, " holds ", used, " of ", f.capacity));
    if (f.time_sliced) {
      if (projects[id].size() > 1) {
        audit.violations.push_back(absl::StrCat("I2: ", id, " shared by ", absl::StrJoin(projects[id], ",")));
      }
      for (const std::string& p : projects[id]) ++audit.units_owned[p];
    }
  }
  for (const auto& [project, units] : audit.units_owned) {
    auto q = kQuotaUnits.find(project);
    if (q != kQuotaUnits.end() && units > q->second) {
      audit.violations.push_back(absl::StrCat("I4: ", project, " owns ", units, " units, quota ", q->second));
    }
    // I3: nothing is ever released in these runs, so affinity means the project's units are
    // filled before another opens: units == ceil(tickets / 4).
    const int tickets = audit.tickets[project];
    if (units != (tickets + 3) / 4) {
      audit.violations.push_back(absl::StrCat("I3: ", project, " spreads ", tickets, " tickets over ", units, " units"));
    }
  }
  return audit;
}

// unit id -> holders, from the service's /debug/state.
std::map<std::string, std::vector<std::string>> DebugHolders(const std::string& json) {
  std::map<std::string, std::vector<std::string>> out;
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  if (doc.HasParseError() || !doc.HasMember("units")) return out;
  for (const auto& u : doc["units"].GetArray()) {
    std::vector<std::string> h;
    for (const auto& p : u["holders"].GetArray()) h.push_back(p.GetString());
    if (!h.empty()) out[u["id"].GetString()] = h;
  }
  return out;
}

// ---------------------------------------------------------------- the extender

LiveClusterOptions TestOptions(const std::string& kubeconfig, bool leader_elect = false,
                               const std::string& identity = "") {
  LiveClusterOptions o = FastLiveOptions(kubeconfig);
  o.leader_elect = leader_elect;
  o.election.identity = identity;
  o.election.lease_duration = absl::Seconds(1);
  o.election.renew_deadline = absl::Milliseconds(600);
  o.election.retry_period = absl::Milliseconds(200);
  o.election.log = [](const std::string&) {};
  return o;
}

// kube-scheduler's view of one scheduling attempt.
struct Attempt {
  std::string filter_error;
  std::vector<std::string> passing;
  std::map<std::string, std::string> failed;  // node -> reason (both failure maps)
  std::string chosen;
  std::string bind_error;
  bool bound() const { return !chosen.empty() && bind_error.empty() && filter_error.empty(); }
};

std::vector<std::string> kCandidates = {"gpu-node-a", "gpu-node-b", "mig-a", "ghost-node"};

Attempt ScheduleOnce(ExtenderService& service, const FakeApiServer& fake, const std::string& ns,
                     const std::string& name) {
  Attempt a;
  std::optional<std::string> pod = fake.Get("pods", ns, name);
  if (!pod) {
    a.filter_error = "pod gone";
    return a;
  }
  const std::string args = absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":[")",
                                        absl::StrJoin(kCandidates, "\",\""), "\"]}");
  VerbResult f = service.Filter(args);
  rapidjson::Document doc;
  doc.Parse(f.body.c_str());
  if (doc.HasParseError()) {
    a.filter_error = "unparsable filter answer";
    return a;
  }
  if (doc.HasMember("Error") && doc["Error"].IsString()) a.filter_error = doc["Error"].GetString();
  if (!a.filter_error.empty()) return a;
  if (doc["NodeNames"].IsArray()) {
    for (const auto& n : doc["NodeNames"].GetArray()) a.passing.push_back(n.GetString());
  }
  for (const char* key : {"FailedNodes", "FailedAndUnresolvableNodes"}) {
    if (doc.HasMember(key) && doc[key].IsObject()) {
      for (const auto& m : doc[key].GetObject()) a.failed[m.name.GetString()] = m.value.GetString();
    }
  }
  if (a.passing.empty()) return a;
  // Prioritize as kube-scheduler would and take the best node.
  VerbResult p = service.Prioritize(absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":[")",
                                                 absl::StrJoin(a.passing, "\",\""), "\"]}"));
  rapidjson::Document scores;
  scores.Parse(p.body.c_str());
  int64_t best = -1;
  a.chosen = a.passing.front();
  if (!scores.HasParseError() && scores.IsArray()) {
    for (const auto& s : scores.GetArray()) {
      if (s["Score"].GetInt64() > best) {
        best = s["Score"].GetInt64();
        a.chosen = s["Host"].GetString();
      }
    }
  }
  rapidjson::Document pd;
  pd.Parse(pod->c_str());
  VerbResult b = service.Bind(absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":")", ns,
                                           R"(","PodUID":")", pd["metadata"]["uid"].GetString(),
                                           R"(","Node":")", a.chosen, R"("})"));
  rapidjson::Document bd;
  bd.Parse(b.body.c_str());
  if (bd.HasParseError() || !bd.IsObject()) {
    a.bind_error = "unparsable bind answer";
  } else if (bd.HasMember("Error") && bd["Error"].IsString()) {
    a.bind_error = bd["Error"].GetString();
  }
  return a;
}

std::string Pod(FakeApiServer& fake, const std::string& ns, const std::string& name,
                std::map<std::string, std::string> requests) {
  PodSpec spec;
  spec.namespace_name = ns;
  spec.name = name;
  spec.requests = std::move(requests);
  EXPECT_TRUE(fake.Apply("pods", PodJson(spec)).ok());
  return absl::StrCat(ns, "/", name);
}

// ---------------------------------------------------------------- tests

class LiveClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    LoadCluster(fake_);
    kubeconfig_ = dir_.File("kubeconfig");
    dir_.Write("kubeconfig", fake_.Kubeconfig());
  }

  // Every pending pod scheduled to completion by `threads` schedulers, retrying a pod whose
  // bind failed (as kube-scheduler does) up to `tries` times.
  std::map<std::string, Attempt> ScheduleAll(ExtenderService& service, const std::vector<std::string>& keys,
                                             int threads, int tries) {
    absl::Mutex mu;
    std::deque<std::pair<std::string, int>> queue;
    for (const std::string& k : keys) queue.emplace_back(k, 0);
    std::map<std::string, Attempt> last;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        while (true) {
          std::pair<std::string, int> job;
          {
            absl::MutexLock lock(&mu);
            if (queue.empty()) return;
            job = queue.front();
            queue.pop_front();
          }
          const size_t slash = job.first.find('/');
          Attempt a = ScheduleOnce(service, fake_, job.first.substr(0, slash), job.first.substr(slash + 1));
          absl::MutexLock lock(&mu);
          last[job.first] = a;
          const bool retry = !a.bound() && (!a.bind_error.empty() || !a.filter_error.empty());
          if (retry && job.second + 1 < tries) queue.emplace_back(job.first, job.second + 1);
        }
      });
    }
    for (auto& w : workers) w.join();
    return last;
  }

  FakeApiServer fake_;
  ScratchDir dir_;
  std::string kubeconfig_;
};

TEST_F(LiveClusterTest, NotReadyAndNoDecisionsUntilTheInitialListIsApplied) {
  FakeApiServer::Fault slow;
  slow.method = "GET";
  slow.path_contains = "/api/v1/pods";
  slow.delay_before = absl::Milliseconds(700);
  fake_.AddFault(slow);
  const std::string key = Pod(fake_, "team-a", "early", {{kShared, "1"}});
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->service->Ready());
  Attempt a = ScheduleOnce(*e->service, fake_, "team-a", "early");
  EXPECT_THAT(a.filter_error, HasSubstr("not synced"));
  EXPECT_TRUE(Eventually([&] { return e->service->Ready(); }, absl::Seconds(5)));
  EXPECT_TRUE(e->live->synced());
  EXPECT_TRUE(ScheduleOnce(*e->service, fake_, "team-a", "early").bound());
}

TEST_F(LiveClusterTest, InvariantsHoldThroughBindAndWatchFaults) {
  std::vector<std::string> gpu_pods, two_ticket_pods, cpu_pods;
  for (int i = 0; i < 10; ++i) gpu_pods.push_back(Pod(fake_, "team-a", absl::StrCat("a-", i), {{kShared, "1"}}));
  for (int i = 0; i < 8; ++i) gpu_pods.push_back(Pod(fake_, "team-c", absl::StrCat("c-", i), {{kExclusive, "1"}}));
  for (int i = 0; i < 2; ++i) two_ticket_pods.push_back(Pod(fake_, "team-b", absl::StrCat("two-", i), {{kShared, "2"}}));
  for (int i = 0; i < 2; ++i) cpu_pods.push_back(Pod(fake_, "team-c", absl::StrCat("cpu-", i), {}));

  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  // These arrive while the extender runs: their ADDED events race with their binds.
  for (int i = 0; i < 14; ++i) gpu_pods.push_back(Pod(fake_, "team-b", absl::StrCat("b-", i), {{kShared, "1"}}));

  // Faults on bind: server errors, and one answer lost after the write committed.
  FakeApiServer::Fault err;
  err.method = "POST";
  err.path_contains = "/binding";
  err.status = 500;
  err.times = 4;
  fake_.AddFault(err);
  FakeApiServer::Fault lost;
  lost.method = "POST";
  lost.path_contains = "/binding";
  lost.delay_after = absl::Milliseconds(900);
  lost.times = 2;
  fake_.AddFault(lost);
  // Faults on the watch, all through the run: dropped streams, cut events, one compaction.
  std::atomic<bool> done{false};
  std::thread chaos([&] {
    for (int i = 0; !done.load(); ++i) {
      absl::SleepFor(absl::Milliseconds(60));
      if (i % 3 == 0) fake_.DropWatches();
      if (i % 3 == 1) fake_.TruncateWatchEvents(1);
      if (i == 4) fake_.Compact();
    }
  });
  std::vector<std::string> all = gpu_pods;
  all.insert(all.end(), cpu_pods.begin(), cpu_pods.end());
  std::map<std::string, Attempt> outcome = ScheduleAll(*e->service, all, 3, 6);
  done = true;
  chaos.join();

  // I5 and I6 on the filter answers.
  for (const std::string& key : two_ticket_pods) {
    const size_t slash = key.find('/');
    Attempt a = ScheduleOnce(*e->service, fake_, key.substr(0, slash), key.substr(slash + 1));
    EXPECT_TRUE(a.passing.empty()) << key;
    EXPECT_EQ(a.failed.size(), kCandidates.size()) << key;
    for (const auto& [node, reason] : a.failed) EXPECT_THAT(reason, HasSubstr("ticket")) << node;
  }
  for (const std::string& key : cpu_pods) {
    EXPECT_TRUE(outcome[key].bound()) << key << ": " << outcome[key].bind_error;
    EXPECT_EQ(outcome[key].passing.size(), kCandidates.size()) << key;  // unknown node too
  }
  for (const std::string& key : gpu_pods) {
    if (!outcome[key].filter_error.empty()) continue;
    EXPECT_EQ(outcome[key].failed.count("ghost-node"), 1u) << key << ": an unknown node is never guessed at";
  }

  Audit audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  // What fits was placed: team-a up to its quota (8 tickets), team-b up to 12 of its 14,
  // team-c 7 of 8 exclusive slices; nothing else.
  EXPECT_EQ(audit.tickets["team-a"], 8);
  EXPECT_EQ(audit.tickets["team-b"], 12);
  EXPECT_EQ(audit.bound_with_assignment, 8 + 12 + 7);
  for (const PodView& p : fake_.Pods()) {
    if (absl::StartsWith(p.key, "team-b/two-")) {
      EXPECT_EQ(p.node, "") << p.key;
    }
  }
  // The mirror converges on exactly what the API server holds, unit by unit.
  EXPECT_TRUE(Eventually([&] { return DebugHolders(e->service->DebugStateJson()) == audit.holders; }));
  EXPECT_EQ(DebugHolders(e->service->DebugStateJson()), audit.holders);
  AuditReport report = e->mirror->Read([](const ClusterState& s) { return s.Audit(); });
  EXPECT_EQ(report.oversubscribed_units, 0);
  EXPECT_EQ(report.multi_owner_units, 0);
  EXPECT_EQ(report.over_quota_projects, 0);
  ReflectorCounters c = e->live->reflector_counters();
  EXPECT_GE(c.watch_restarts, 1);
  EXPECT_GE(c.api_errors, 1);
}

TEST_F(LiveClusterTest, BindThatTimedOutButCommittedConvergesThroughTheWatch) {
  const std::string key = Pod(fake_, "team-a", "slow", {{kShared, "1"}});
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  // Every binding is held 1.8 s before the API server commits it: the bind (1.5 s budget)
  // gives up with an unknown outcome and keeps the reservation (issue 12, finding 1), then
  // the write lands anyway.
  FakeApiServer::Fault slow;
  slow.method = "POST";
  slow.path_contains = "/binding";
  slow.times = -1;
  slow.delay_before = absl::Milliseconds(1800);
  fake_.AddFault(slow);
  Attempt a = ScheduleOnce(*e->service, fake_, "team-a", "slow");
  EXPECT_THAT(a.bind_error, HasSubstr("timed out"));
  EXPECT_THAT(a.bind_error, HasSubstr("binding outcome unknown"));
  e->mirror->Read([&](const ClusterState& s) {
    const PodRecord* r = s.FindPod(key);
    ASSERT_NE(r, nullptr) << "a bind that may have committed freed its unit";
    EXPECT_NE(r->unconfirmed_since, absl::InfinitePast());
  });
  fake_.ClearFaults();
  // The API server is the truth: the watch brings the bound pod and the mirror records it.
  ASSERT_TRUE(Eventually([&] {
    for (const PodView& p : fake_.Pods()) {
      if (p.key == key) return !p.node.empty();
    }
    return false;
  }));
  Audit audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  ASSERT_EQ(audit.bound_with_assignment, 1);
  EXPECT_TRUE(Eventually([&] { return DebugHolders(e->service->DebugStateJson()) == audit.holders; }));
  // The kept reservation already names the committed unit; the watch event confirms it.
  EXPECT_TRUE(Eventually([&] {
    return e->mirror->Read([&](const ClusterState& s) {
      const PodRecord* r = s.FindPod(key);
      return r != nullptr && r->source == HoldingSource::kConfirmed;
    });
  }));
}

TEST_F(LiveClusterTest, RestartRebuildsTheMirrorUnitByUnitFromTheApiServer) {
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) keys.push_back(Pod(fake_, "team-b", absl::StrCat("r-", i), {{kShared, "1"}}));
  for (int i = 0; i < 3; ++i) keys.push_back(Pod(fake_, "team-c", absl::StrCat("x-", i), {{kExclusive, "1"}}));
  std::string before;
  {
    auto first = StartLiveExtender(TestOptions(kubeconfig_));
    ASSERT_NE(first, nullptr);
    ASSERT_TRUE(Eventually([&] { return first->service->Ready(); }));
    for (const auto& [k, a] : ScheduleAll(*first->service, keys, 2, 3)) EXPECT_TRUE(a.bound()) << k;
    ASSERT_TRUE(Eventually([&] { return DebugHolders(first->service->DebugStateJson()) == AuditApiServer(fake_).holders; }));
    before = first->service->DebugStateJson();
  }  // the extender and its mirror are gone
  auto second = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(Eventually([&] { return second->service->Ready(); }));
  const std::map<std::string, std::vector<std::string>> rebuilt = DebugHolders(second->service->DebugStateJson());
  EXPECT_EQ(rebuilt, DebugHolders(before));
  EXPECT_EQ(rebuilt, AuditApiServer(fake_).holders);
  EXPECT_EQ(rebuilt.size(), 2u + 3u);  // team-b's 6 tickets on 2 units, team-c's 3 slices
  // The rebuilt mirror keeps deciding correctly: team-b's partly filled unit is used first.
  const std::string next = Pod(fake_, "team-b", "r-next", {{kShared, "1"}});
  ASSERT_TRUE(ScheduleOnce(*second->service, fake_, "team-b", "r-next").bound());
  Audit audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  EXPECT_EQ(audit.units_owned["team-b"], 2);
}

TEST_F(LiveClusterTest, TwoExtendersOneLeaderTakeOverWithoutDoubleBooking) {
  auto a = StartLiveExtender(TestOptions(kubeconfig_, true, "extender-a"));
  auto b = StartLiveExtender(TestOptions(kubeconfig_, true, "extender-b"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->service->Ready() || b->service->Ready(); }, absl::Seconds(3)));
  // Exactly one is ready; both mirrors are synced (the follower keeps its mirror warm).
  for (int i = 0; i < 50; ++i) {
    ASSERT_NE(a->service->Ready(), b->service->Ready());
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(a->live->synced());
  EXPECT_TRUE(b->live->synced());
  LiveExtender* leader = a->service->Ready() ? a.get() : b.get();
  std::unique_ptr<LiveExtender>& follower = a->service->Ready() ? b : a;
  std::vector<std::string> first, second;
  for (int i = 0; i < 5; ++i) first.push_back(Pod(fake_, "team-b", absl::StrCat("l-", i), {{kShared, "1"}}));
  for (const auto& [k, att] : ScheduleAll(*leader->service, first, 2, 3)) EXPECT_TRUE(att.bound()) << k;
  // The follower refuses decisions, and says why: it is synced, another replica leads.
  EXPECT_THAT(ScheduleOnce(*follower->service, fake_, "team-b", "l-0").filter_error,
              HasSubstr(absl::StrCat("not the leader; extender-", leader == a.get() ? "a" : "b",
                                     " leads")));

  absl::Time stop = absl::Now();
  leader->live->Stop();  // steps down and releases the lease
  EXPECT_FALSE(leader->service->Ready());
  ASSERT_TRUE(Eventually([&] { return follower->service->Ready(); }, absl::Seconds(1)));
  EXPECT_LT(absl::Now() - stop, absl::Seconds(1));  // within one lease duration
  for (int i = 0; i < 5; ++i) second.push_back(Pod(fake_, "team-b", absl::StrCat("f-", i), {{kShared, "1"}}));
  for (const auto& [k, att] : ScheduleAll(*follower->service, second, 2, 3)) EXPECT_TRUE(att.bound()) << k;
  Audit audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  EXPECT_EQ(audit.tickets["team-b"], 10);
  EXPECT_EQ(audit.units_owned["team-b"], 3);  // affinity held across the take-over
  EXPECT_TRUE(Eventually([&] { return DebugHolders(follower->service->DebugStateJson()) == audit.holders; }));
}

// Issue 12: a follower whose watch lags behind the API server (a slow watch cache, a stream
// that broke and is reconnecting) gains the Lease. It must not decide on that mirror: the
// previous leader bound pods it has not seen, and it would hand their units out again. It
// stays not ready, saying so, until a list sent after the take-over has been applied (one
// LIST), and then sees every unit taken.
TEST_F(LiveClusterTest, TakeOverWithALaggingWatchDecidesOnlyAfterAFreshList) {
  auto a = StartLiveExtender(TestOptions(kubeconfig_, true, "extender-a"));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->service->Ready(); }, absl::Seconds(5)));
  auto b = StartLiveExtender(TestOptions(kubeconfig_, true, "extender-b"));
  ASSERT_NE(b, nullptr);
  // Five watches per replica: the four kinds of the mirror and the node agents' Leases.
  ASSERT_TRUE(Eventually([&] { return b->live->synced() && fake_.open_watches() == 10 && fake_.WatchesCaughtUp(); },
                         absl::Seconds(5)));
  ASSERT_FALSE(b->service->Ready());

  // From here on no watch delivers anything: b's mirror stays as it is now.
  fake_.HoldWatches(true);
  std::vector<std::string> first;
  for (int i = 0; i < 7; ++i) first.push_back(Pod(fake_, "team-c", absl::StrCat("x-", i), {{kExclusive, "1"}}));
  for (const auto& [k, att] : ScheduleAll(*a->service, first, 2, 3)) ASSERT_TRUE(att.bound()) << k;
  const std::string late = Pod(fake_, "team-c", "late", {{kExclusive, "1"}});

  // b's relist after the take-over waits at the API server until released.
  FakeApiServer::Fault held_list;
  held_list.method = "GET";
  held_list.path_contains = "/api/v1/nodes";
  held_list.query_contains = "limit=";
  held_list.hold = true;
  fake_.AddFault(held_list);
  a->live->Stop();  // releases the Lease: b takes it at its next read
  ASSERT_TRUE(Eventually([&] { return b->live->leader(); }, absl::Seconds(5)));
  EXPECT_TRUE(Eventually([&] { return fake_.held() == 1; }, absl::Seconds(5)))
      << "no list after the take-over";
  // Leading, not deciding: kube-scheduler gets the not-synced answer, nothing is bound.
  EXPECT_FALSE(b->service->Ready());
  Attempt refused = ScheduleOnce(*b->service, fake_, "team-c", "late");
  EXPECT_THAT(refused.filter_error, HasSubstr("extender cache not synced yet"));
  EXPECT_THAT(refused.filter_error, HasSubstr("taken the Lease over"));
  fake_.ClearFaults();
  fake_.ReleaseHeld();

  ASSERT_TRUE(Eventually([&] { return b->service->Ready(); }, absl::Seconds(5)));
  // The fresh list shows a's seven binds although b's watches still deliver nothing.
  Attempt after = ScheduleOnce(*b->service, fake_, "team-c", "late");
  EXPECT_FALSE(after.bound()) << "bound onto " << after.chosen;
  EXPECT_THAT(after.failed["gpu-node-a"], HasSubstr("no free unit"));
  fake_.HoldWatches(false);
  Audit audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  EXPECT_EQ(audit.bound_with_assignment, 7);
}

// Issue 12 (fencing): a leader whose renewals fail while one of its binds is retrying (the
// API server answers 503) sends no further binding POST once its Lease is no longer valid on
// its own clock; the bind, already past the readiness check, answers "not bound" naming the
// Lease, and nothing is bound.
TEST_F(LiveClusterTest, BindRetryingWhenTheLeaseLapsesSendsNoFurtherPost) {
  LiveClusterOptions o = TestOptions(kubeconfig_, true, "extender-a");
  o.binder.deadline = absl::Seconds(4);  // retries outlast the renew deadline (600 ms)
  o.binder.attempt_timeout = absl::Seconds(1);
  auto a = StartLiveExtender(std::move(o));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->service->Ready(); }, absl::Seconds(5)));
  Pod(fake_, "team-b", "fenced", {{kShared, "1"}});
  FakeApiServer::Fault unavailable;
  unavailable.method = "POST";
  unavailable.path_contains = "/binding";
  unavailable.status = 503;
  unavailable.times = -1;
  fake_.AddFault(unavailable);
  Attempt attempt;
  std::thread scheduler([&] { attempt = ScheduleOnce(*a->service, fake_, "team-b", "fenced"); });
  const bool retrying = Eventually([&] { return fake_.RequestCount("POST", "/binding") >= 1; },
                                   absl::Seconds(3));
  FakeApiServer::Fault lease_down;
  lease_down.path_contains = "/leases";
  lease_down.status = 503;
  lease_down.times = -1;
  fake_.AddFault(lease_down);
  scheduler.join();
  ASSERT_TRUE(retrying);
  EXPECT_FALSE(a->live->leader());
  const int64_t posts = fake_.RequestCount("POST", "/binding");
  EXPECT_FALSE(attempt.bound());
  EXPECT_THAT(attempt.bind_error, HasSubstr("Lease is no longer valid"));
  fake_.ClearFaults();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(fake_.RequestCount("POST", "/binding"), posts);  // nothing sent after the answer
  bool seen = false;
  for (const testing::PodView& p : fake_.Pods()) {
    if (p.key != "team-b/fenced") continue;
    seen = true;
    EXPECT_EQ(p.node, "") << "bound although its leader's Lease had lapsed";
  }
  EXPECT_TRUE(seen);
}

TEST_F(LiveClusterTest, ConnectErrorsNameWhatIsWrong) {
  Mirror mirror(std::make_shared<const Catalog>(Catalog::BuiltIn()), MirrorOptions());
  auto missing = LiveCluster::Connect(TestOptions("/nonexistent/kubeconfig"), &mirror);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("kubeconfig /nonexistent/kubeconfig"));
  fake_.Stop();
  auto down = LiveCluster::Connect(TestOptions(kubeconfig_), &mirror);
  ASSERT_FALSE(down.ok());
  EXPECT_THAT(down.status().message(), HasSubstr("cannot reach API server"));
  EXPECT_THAT(down.status().message(), HasSubstr("after 2 attempts"));
}

TEST(LiveClusterFlagsTest, FlagErrorsNameTheFlag) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_kubeconfig, "");
  absl::SetFlag(&FLAGS_in_cluster, "false");
  EXPECT_FALSE(LiveClusterRequested());
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("no Kubernetes API configured"));
  absl::SetFlag(&FLAGS_kubeconfig, "/k");
  EXPECT_TRUE(LiveClusterRequested());
  ASSERT_TRUE(LiveClusterOptionsFromFlags().ok());
  absl::SetFlag(&FLAGS_in_cluster, "maybe");
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("--in-cluster=\"maybe\""));
  absl::SetFlag(&FLAGS_in_cluster, "auto");
  absl::SetFlag(&FLAGS_api_qps, 0);
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("--api-qps=0"));
  absl::SetFlag(&FLAGS_api_qps, 5);
  absl::SetFlag(&FLAGS_resync_period, absl::Milliseconds(100));
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("--resync-period=100ms"));
  absl::SetFlag(&FLAGS_resync_period, absl::Minutes(1));
  absl::SetFlag(&FLAGS_leader_elect, true);
  absl::SetFlag(&FLAGS_leader_elect_renew_deadline, absl::Seconds(30));
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("--leader-elect-lease-duration"));
  absl::SetFlag(&FLAGS_leader_elect_renew_deadline, absl::Seconds(10));
  absl::StatusOr<LiveClusterOptions> o = LiveClusterOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->leader_elect);
  EXPECT_EQ(o->election.lease_namespace, "gpu-slice-extender");
  EXPECT_EQ(o->client.write_qps, 5);
  EXPECT_EQ(o->requeue_options.qps, 2.5);  // at most half of --api-qps
  EXPECT_TRUE(o->requeue);
  EXPECT_EQ(o->requeue_options.passes, 2);
  absl::SetFlag(&FLAGS_takeover_requeue_qps, 0);
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(), HasSubstr("--takeover-requeue-qps=0"));
  absl::SetFlag(&FLAGS_takeover_requeue_qps, 20);
  absl::SetFlag(&FLAGS_takeover_requeue_settle, absl::Seconds(-1));
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(),
              HasSubstr("--takeover-requeue-settle=-1s"));
  absl::SetFlag(&FLAGS_takeover_requeue_settle, absl::ZeroDuration());
  EXPECT_EQ(LiveClusterOptionsFromFlags()->requeue_options.passes, 1);
  EXPECT_EQ(o->reflector.resync_period, absl::Minutes(1));
  // --dra-mode (docs/dra.md): off by default.
  EXPECT_EQ(o->dra_mode, DraMode::kOff);
  absl::SetFlag(&FLAGS_dra_mode, "maybe");
  EXPECT_THAT(LiveClusterOptionsFromFlags().status().message(),
              HasSubstr("--dra-mode=\"maybe\": want off, on or auto"));
  absl::SetFlag(&FLAGS_dra_mode, "auto");
  EXPECT_EQ(LiveClusterOptionsFromFlags()->dra_mode, DraMode::kAuto);
  absl::SetFlag(&FLAGS_dra_mode, "on");
  EXPECT_EQ(LiveClusterOptionsFromFlags()->dra_mode, DraMode::kOn);
}

// ---------------------------------------------------------------- the real binary

// Whether the binary was built with the live-cluster flags (main.cc wiring, done by the lead).
bool BinaryHasLiveFlags(const std::string& binary) {
  if (access(binary.c_str(), X_OK) != 0) return false;
  std::string cmd = binary + " --help 2>/dev/null";
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return false;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out.find("--kubeconfig") != std::string::npos;
}

using testing::FreePort;
using testing::SpawnProcess;

TEST_F(LiveClusterTest, SigkilledBinaryRestartsWithNothingLostAndNothingDoubleBooked) {
  const std::string binary = testing::BinPath("gpu-slice-extender");
  // A binary without the live-cluster flags is a failure, never a skip ctest would count.
  ASSERT_TRUE(BinaryHasLiveFlags(binary)) << binary << " has no --kubeconfig flag";
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) keys.push_back(Pod(fake_, "team-b", absl::StrCat("k-", i), {{kShared, "1"}}));
  for (int i = 0; i < 5; ++i) keys.push_back(Pod(fake_, "team-c", absl::StrCat("e-", i), {{kExclusive, "1"}}));
  const int port = FreePort();
  const std::vector<std::string> args = {absl::StrCat("--listen=127.0.0.1:", port), absl::StrCat("--kubeconfig=", kubeconfig_),
                                         "--in-cluster=false"};
  const std::string log = dir_.File("extender.log");
  httplib::Client http("127.0.0.1", port);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(6, 0);
  auto ready = [&] {
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  };
  // Drives filter + bind through HTTP for every pod, as kube-scheduler would, until `stop`.
  auto drive = [&](std::atomic<bool>& stop) {
    for (const std::string& key : keys) {
      if (stop.load()) return;
      const size_t slash = key.find('/');
      std::optional<std::string> pod = fake_.Get("pods", key.substr(0, slash), key.substr(slash + 1));
      if (!pod) continue;
      rapidjson::Document pd;
      pd.Parse(pod->c_str());
      if (pd["spec"].HasMember("nodeName")) continue;  // already bound
      auto f = http.Post("/filter", absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":["gpu-node-a","gpu-node-b","mig-a"]})"),
                         "application/json");
      if (!f || f->status != 200) continue;
      rapidjson::Document fd;
      fd.Parse(f->body.c_str());
      if (fd.HasParseError() || !fd["NodeNames"].IsArray() || fd["NodeNames"].Empty()) continue;
      (void)http.Post("/bind",
                      absl::StrCat(R"({"PodName":")", key.substr(slash + 1), R"(","PodNamespace":")", key.substr(0, slash),
                                   R"(","PodUID":")", pd["metadata"]["uid"].GetString(), R"(","Node":")",
                                   fd["NodeNames"][0].GetString(), R"("})"),
                      "application/json");
    }
  };

  pid_t pid = SpawnProcess(binary, args, log);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(Eventually(ready, absl::Seconds(10))) << testing::ReadFileOrDie(log);
  std::atomic<bool> stop{false};
  std::thread driver([&] { drive(stop); });
  // Kill it mid-run, while binds are in flight.
  ASSERT_TRUE(Eventually([&] { return AuditApiServer(fake_).bound_with_assignment >= 5; }, absl::Seconds(10)));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  stop = true;
  driver.join();

  pid = SpawnProcess(binary, args, log);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(Eventually(ready, absl::Seconds(10))) << testing::ReadFileOrDie(log);
  // What it rebuilt is exactly what the API server holds.
  auto state = http.Get("/debug/state");
  ASSERT_TRUE(state && state->status == 200);
  Audit audit = AuditApiServer(fake_);
  EXPECT_EQ(DebugHolders(state->body), audit.holders);
  // It finishes the job without double-booking anything.
  std::atomic<bool> never{false};
  drive(never);
  audit = AuditApiServer(fake_);
  EXPECT_THAT(audit.violations, ::testing::IsEmpty());
  EXPECT_EQ(audit.tickets["team-b"], 12);
  EXPECT_EQ(audit.bound_with_assignment, 12 + 5);
  ASSERT_TRUE(Eventually([&] {
    auto s = http.Get("/debug/state");
    return s && DebugHolders(s->body) == audit.holders;
  }));
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

// The binary reports the live cluster's API failures and watch restarts on /metrics (main.cc
// turns the reflector's, binder's and elector's counters into gse_api_errors_total and
// gse_mirror_watch_restarts_total every --audit-interval).
TEST_F(LiveClusterTest, BinaryReportsApiFailuresAndWatchRestartsOnMetrics) {
  const std::string binary = testing::BinPath("gpu-slice-extender");
  ASSERT_TRUE(BinaryHasLiveFlags(binary)) << binary << " has no --kubeconfig flag";
  const std::string key = Pod(fake_, "team-c", "m-0", {{kExclusive, "1"}});
  const int port = FreePort();
  const std::string log = dir_.File("metrics-extender.log");
  pid_t pid = SpawnProcess(binary,
                    {absl::StrCat("--listen=127.0.0.1:", port),
                     absl::StrCat("--kubeconfig=", kubeconfig_), "--in-cluster=false",
                     "--audit-interval=100ms"},
                    log);
  ASSERT_GT(pid, 0);
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(6, 0);
  ASSERT_TRUE(Eventually([&] {
    auto r = http.Get("/readyz");
    return r && r->status == 200;
  }, absl::Seconds(10))) << testing::ReadFileOrDie(log);

  // One binding POST fails (and is retried), the watches drop, and one watch call fails.
  FakeApiServer::Fault bind_fault;
  bind_fault.method = "POST";
  bind_fault.path_contains = "/binding";
  bind_fault.status = 500;
  fake_.AddFault(bind_fault);
  std::optional<std::string> pod = fake_.Get("pods", "team-c", "m-0");
  ASSERT_TRUE(pod.has_value());
  rapidjson::Document pd;
  pd.Parse(pod->c_str());
  auto f = http.Post("/filter",
                     absl::StrCat(R"({"Pod":)", *pod,
                                  R"(,"Nodes":null,"NodeNames":["gpu-node-a","gpu-node-b","mig-a"]})"),
                     "application/json");
  ASSERT_TRUE(f && f->status == 200);
  rapidjson::Document fd;
  fd.Parse(f->body.c_str());
  ASSERT_TRUE(fd["NodeNames"].IsArray() && !fd["NodeNames"].Empty()) << f->body;
  auto b = http.Post("/bind",
                     absl::StrCat(R"({"PodName":"m-0","PodNamespace":"team-c","PodUID":")",
                                  pd["metadata"]["uid"].GetString(), R"(","Node":")",
                                  fd["NodeNames"][0].GetString(), R"("})"),
                     "application/json");
  ASSERT_TRUE(b && b->status == 200);
  EXPECT_THAT(b->body, HasSubstr(R"("Error":"")"));
  FakeApiServer::Fault watch_fault;
  watch_fault.method = "GET";
  watch_fault.query_contains = "watch";
  watch_fault.status = 500;
  fake_.AddFault(watch_fault);
  fake_.DropWatches();

  auto value = [&](const std::string& text, const std::string& series) {
    const size_t at = text.find(series + " ");
    if (at == std::string::npos) return -1.0;
    return std::atof(text.c_str() + at + series.size() + 1);
  };
  std::string metrics;
  EXPECT_TRUE(Eventually([&] {
    auto m = http.Get("/metrics");
    if (!m || m->status != 200) return false;
    metrics = m->body;
    double restarts = 0;
    for (const char* r : {"nodes", "pods", "namespaces", "resourcequotas"}) {
      restarts += std::max(0.0, value(metrics, absl::StrCat(
                                               "gse_mirror_watch_restarts_total{resource=\"", r, "\"}")));
    }
    return value(metrics, R"(gse_api_errors_total{op="bind"})") == 1 &&
           value(metrics, R"(gse_api_errors_total{op="watch"})") >= 1 && restarts >= 1;
  }, absl::Seconds(10))) << metrics;
  EXPECT_EQ(value(metrics, R"(gse_api_errors_total{op="get"})"), 0);
  EXPECT_EQ(value(metrics, R"(gse_api_errors_total{op="lease"})"), 0);  // no election here
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

}  // namespace
}  // namespace gse
