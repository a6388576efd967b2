// DRA mode end to end (issue 16, docs/dra.md): the extender in live mode (--dra-mode=auto)
// against the local API server, with the test allocator (testsupport/dra_allocator.h) playing
// kube-scheduler's DRA part: its Filter drops DRA nodes where nothing fits, and before our
// bind it allocates and writes the extended-resource claim and the pod's status (PreBind); a
// refused bind deletes the claim (Unreserve) and the pod is tried again.
//
// The cluster is mixed: two device-plugin nodes and two DRA nodes with the same offering
// names (exclusive MIG 1g.5gb, shared whole GPUs), three projects. The referee reads the API
// server's objects only: every bound pod's annotations name its real device (the claim's on
// DRA nodes), no shared device holds two projects, quotas in units hold across both kinds.
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "extender/extender_service.h"
#include "extender/live_cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/decision_core.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/mirror.h"
#include "testsupport/dra_allocator.h"
#include "testsupport/dra_test_objects.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/paths.h"
#include "tests/testing/eventually.h"
#include "tests/testing/live_extender.h"
#include "tests/testing/process.h"

namespace gse {
namespace {

using ::gse::testing::DraGpuDeviceJson;
using ::gse::testing::DraMigDeviceJson;
using ::gse::testing::DraSharedGpuClassJson;
using ::gse::testing::DraSliceJson;
using ::gse::testing::DraTestAllocator;
using ::gse::testing::Eventually;
using ::gse::testing::FakeApiServer;
using ::gse::testing::FastLiveOptions;
using ::gse::testing::LiveExtender;
using ::gse::testing::StartLiveExtender;
using ::gse::testing::PodJson;
using ::gse::testing::PodSpec;
using ::gse::testing::PodView;
using ::gse::testing::ReadFileOrDie;
using ::gse::testing::ScratchDir;
using ::gse::testing::SharedPath;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kMig[] = "nvidia.com/mig-1g.5gb";    // exclusive
constexpr char kShared[] = "nvidia.com/gpu.shared";  // time-sliced, 4 per GPU
const std::vector<std::string> kNodes = {"plugin-1", "plugin-2", "dra-1", "dra-2"};

bool IsDraNode(const std::string& node) { return absl::StartsWith(node, "dra-"); }

std::string NodeJson(const std::string& name, bool plugin) {
  return absl::StrCat(
      R"({"metadata":{"name":")", name, R"(","labels":{"nvidia.com/gpu.product":"NVIDIA-A100-SXM4-40GB"}},)",
      R"("status":{"allocatable":{"cpu":"64","memory":"256Gi","pods":"110")",
      plugin ? R"(,"nvidia.com/mig-1g.5gb":"2","nvidia.com/gpu.shared":"8")" : "", "}}}");
}

// Two device-plugin nodes (2 MIG, 2 GPUs x 4 each) and two DRA nodes: dra-1 one slice (GPU
// gpu-0, MIGs 19-0 and 19-1); dra-2 one pool of two slices, "a" (gpu-0, 19-0) and "b" (gpu-1,
// 19-1), so that the order of its slices decides the allocator's pick.
void LoadMixedCluster(FakeApiServer& fake) {
  for (const char* ns : {"team-a", "team-b", "team-c"}) {
    ASSERT_TRUE(fake.Apply("namespaces", absl::StrCat(R"({"metadata":{"name":")", ns,
                                                      R"(","labels":{"gpu.themelio.io/project":")",
                                                      ns, R"("}}})"))
                    .ok());
  }
  // team-c: 3 MIG units, wherever they are.
  ASSERT_TRUE(fake.Apply("resourcequotas",
                         R"({"metadata":{"name":"gpu","namespace":"team-c"},)"
                         R"("spec":{"hard":{"requests.nvidia.com/mig-1g.5gb":"3"}}})")
                  .ok());
  for (const std::string& n : kNodes) ASSERT_TRUE(fake.Apply("nodes", NodeJson(n, !IsDraNode(n))).ok());
  ASSERT_TRUE(fake.ApplyFile("deviceclasses", SharedPath("protocol/dra/deviceclass-mig-1g-extended.json")).ok());
  ASSERT_TRUE(fake.Apply("deviceclasses", DraSharedGpuClassJson()).ok());
  ASSERT_TRUE(fake.Apply("resourceslices",
                         DraSliceJson("dra-1", "dra-1-a", 1,
                                   {DraGpuDeviceJson("dra-1", 0, 4), DraMigDeviceJson("dra-1", 0), DraMigDeviceJson("dra-1", 1)}))
                  .ok());
  ASSERT_TRUE(fake.Apply("resourceslices",
                         DraSliceJson("dra-2", "dra-2-a", 2, {DraGpuDeviceJson("dra-2", 0, 4), DraMigDeviceJson("dra-2", 0)}))
                  .ok());
  ASSERT_TRUE(fake.Apply("resourceslices",
                         DraSliceJson("dra-2", "dra-2-b", 2, {DraGpuDeviceJson("dra-2", 1, 4), DraMigDeviceJson("dra-2", 1)}))
                  .ok());
}

LiveClusterOptions TestOptions(const std::string& kubeconfig) {
  LiveClusterOptions o = FastLiveOptions(kubeconfig, absl::Milliseconds(3000));
  o.dra_mode = DraMode::kAuto;
  return o;
}

std::string Pod(FakeApiServer& fake, const std::string& ns, const std::string& name,
                const std::string& resource) {
  PodSpec spec;
  spec.namespace_name = ns;
  spec.name = name;
  spec.requests = {{resource, "1"}};
  EXPECT_TRUE(fake.Apply("pods", PodJson(spec)).ok());
  return absl::StrCat(ns, "/", name);
}

struct Attempt {
  std::string chosen;
  std::string error;  // filter or bind
  bool bound() const { return !chosen.empty() && error.empty(); }
};

std::string ErrorOf(const std::string& body) {
  rapidjson::Document d;
  d.Parse(body.c_str());
  if (d.HasParseError() || !d.IsObject()) return "unparsable answer";
  return d.HasMember("Error") && d["Error"].IsString() ? d["Error"].GetString() : "";
}

// kube-scheduler's scheduling cycle for one pod with DRA: in-tree filter (the allocator's
// plan on DRA nodes), our filter and prioritize, and PreBind on a DRA node. `claim` names the
// claim PreBind wrote ("" elsewhere); a non-empty `error` ends the attempt before bind.
struct Cycle {
  Attempt attempt;
  std::string ns, name, uid, claim;
};

Cycle SchedulingCycle(ExtenderService& service, FakeApiServer& fake, DraTestAllocator& alloc,
                      const std::string& ns, const std::string& name,
                      const std::vector<std::string>& candidates) {
  Cycle c{{}, ns, name, "", ""};
  Attempt& a = c.attempt;
  std::optional<std::string> pod = fake.Get("pods", ns, name);
  if (!pod) return Cycle{{"", "pod gone"}, ns, name, "", ""};
  rapidjson::Document pd;
  pd.Parse(pod->c_str());
  c.uid = pd["metadata"]["uid"].GetString();
  std::vector<std::string> feasible;
  for (const std::string& n : candidates) {
    if (!IsDraNode(n) || alloc.Plan(ns, name, n).ok()) feasible.push_back(n);
  }
  if (feasible.empty()) {
    a.error = "no DRA fit";
    return c;
  }
  const std::string args = absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":[")",
                                        absl::StrJoin(feasible, "\",\""), "\"]}");
  VerbResult f = service.Filter(args);
  rapidjson::Document fd;
  fd.Parse(f.body.c_str());
  if (fd.HasParseError() || !fd.IsObject()) {
    a.error = "unparsable filter answer";
    return c;
  }
  if (fd.HasMember("Error") && fd["Error"].IsString() && fd["Error"].GetStringLength() > 0) {
    a.error = fd["Error"].GetString();
    return c;
  }
  std::vector<std::string> passing;
  if (fd["NodeNames"].IsArray()) {
    for (const auto& n : fd["NodeNames"].GetArray()) passing.push_back(n.GetString());
  }
  if (passing.empty()) {
    a.error = absl::StrCat("filter: no node (", f.body, ")");
    return c;
  }
  VerbResult p = service.Prioritize(absl::StrCat(R"({"Pod":)", *pod, R"(,"Nodes":null,"NodeNames":[")",
                                                 absl::StrJoin(passing, "\",\""), "\"]}"));
  rapidjson::Document scores;
  scores.Parse(p.body.c_str());
  int64_t best = -1;
  a.chosen = passing.front();
  if (!scores.HasParseError() && scores.IsArray()) {
    for (const auto& s : scores.GetArray()) {
      if (s["Score"].GetInt64() > best) {
        best = s["Score"].GetInt64();
        a.chosen = s["Host"].GetString();
      }
    }
  }
  if (IsDraNode(a.chosen)) {
    absl::StatusOr<DraTestAllocator::Outcome> o = alloc.AllocateAndPreBind(ns, name, a.chosen);
    if (!o.ok()) {
      a.error = absl::StrCat("prebind: ", o.status().message());
      return c;
    }
    c.claim = o->claim_name;
  }
  return c;
}

// kube-scheduler's binding cycle: our bind, and Unreserve when it fails.
Attempt BindingCycle(ExtenderService& service, DraTestAllocator& alloc, Cycle c) {
  if (!c.attempt.error.empty()) return c.attempt;
  VerbResult b = service.Bind(absl::StrCat(R"({"PodName":")", c.name, R"(","PodNamespace":")",
                                           c.ns, R"(","PodUID":")", c.uid, R"(","Node":")",
                                           c.attempt.chosen, R"("})"));
  c.attempt.error = ErrorOf(b.body);
  if (!c.attempt.error.empty() && !c.claim.empty()) {
    EXPECT_TRUE(alloc.Unreserve(c.ns, c.claim).ok());
  }
  return c.attempt;
}

// One scheduling cycle, then its binding cycle.
Attempt ScheduleOnce(ExtenderService& service, FakeApiServer& fake, DraTestAllocator& alloc,
                     const std::string& ns, const std::string& name,
                     const std::vector<std::string>& candidates) {
  return BindingCycle(service, alloc, SchedulingCycle(service, fake, alloc, ns, name, candidates));
}

// The pod's extended-resource claim's devices ("driver/pool/device"), from the API server.
std::vector<std::string> ClaimDevices(const FakeApiServer& fake, const std::string& ns,
                                      const std::string& pod) {
  std::vector<std::string> out;
  std::optional<std::string> p = fake.Get("pods", ns, pod);
  if (!p) return out;
  rapidjson::Document d;
  d.Parse(p->c_str());
  if (!d.HasMember("status") || !d["status"].HasMember("extendedResourceClaimStatus")) return out;
  const std::string claim = d["status"]["extendedResourceClaimStatus"]["resourceClaimName"].GetString();
  std::optional<std::string> c = fake.Get("resourceclaims", ns, claim);
  if (!c) return out;
  rapidjson::Document cd;
  cd.Parse(c->c_str());
  for (const auto& r : cd["status"]["allocation"]["devices"]["results"].GetArray()) {
    out.push_back(absl::StrCat(r["driver"].GetString(), "/", r["pool"].GetString(), "/",
                               r["device"].GetString()));
  }
  return out;
}

// The referee, from the API server's objects only.
struct Referee {
  std::vector<std::string> violations;
  std::map<std::string, std::set<std::string>> projects_on_device;  // device -> projects
  std::map<std::string, int> mig_units;                             // project -> MIG units
  std::map<std::string, std::string> device_of;                     // pod key -> device
  int bound = 0;
};

Referee Referee_(const FakeApiServer& fake) {
  Referee r;
  for (const PodView& pod : fake.Pods()) {
    if (pod.node.empty()) continue;
    ++r.bound;
    const std::string ns = pod.key.substr(0, pod.key.find('/'));
    const std::string name = pod.key.substr(pod.key.find('/') + 1);
    auto unit = pod.annotations.find("gpu.themelio.io/unit");
    if (unit == pod.annotations.end()) {
      r.violations.push_back(absl::StrCat(pod.key, ": bound without a unit annotation"));
      continue;
    }
    std::string device = unit->second;  // device-plugin nodes: the unit is the device
    if (IsDraNode(pod.node)) {
      const std::vector<std::string> real = ClaimDevices(fake, ns, name);
      auto named = pod.annotations.find("gpu.themelio.io/dra-devices");
      if (real.size() != 1 || named == pod.annotations.end() ||
          named->second.substr(0, named->second.find('=')) != real[0]) {
        r.violations.push_back(absl::StrCat(pod.key, ": annotation ",
                                            named == pod.annotations.end() ? "(none)" : named->second,
                                            " does not name its claim's device ",
                                            absl::StrJoin(real, ",")));
        continue;
      }
      device = real[0];
    }
    r.device_of[pod.key] = device;
    r.projects_on_device[device].insert(ns);
    if (pod.requests.count(kMig) != 0) ++r.mig_units[ns];
  }
  for (const auto& [device, projects] : r.projects_on_device) {
    if (projects.size() > 1) {
      r.violations.push_back(absl::StrCat(device, " shared by ", absl::StrJoin(projects, ",")));
    }
  }
  return r;
}

class LiveDraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    LoadMixedCluster(fake_);
    kubeconfig_ = dir_.File("kubeconfig");
    dir_.Write("kubeconfig", fake_.Kubeconfig());
  }

  // Every pod scheduled (candidates: all four nodes), retried up to `tries` times.
  std::map<std::string, Attempt> ScheduleAll(ExtenderService& service,
                                             const std::vector<std::string>& keys, int tries,
                                             const std::vector<std::string>& candidates = kNodes) {
    std::map<std::string, Attempt> last;
    for (const std::string& key : keys) {
      const size_t slash = key.find('/');
      for (int t = 0; t < tries; ++t) {
        last[key] = ScheduleOnce(service, fake_, alloc_, key.substr(0, slash), key.substr(slash + 1),
                                 candidates);
        if (last[key].bound()) break;
      }
    }
    return last;
  }

  // Ready comes with the first list; the watches open right after it. A bind right then may
  // not find the claim PreBind wrote in the mirror within kDraClaimWait and read it from the
  // API instead (BindReadsTheClaimWhileTheClaimWatchLags... tests that path on its own). Tests
  // of the mirror's path wait for the claim watch first: a probe claim seen by the mirror.
  void WaitForClaimWatch(LiveExtender& e) {
    ASSERT_TRUE(fake_.Apply("resourceclaims",
                            R"({"metadata":{"name":"probe","namespace":"team-c"},"spec":{)"
                            R"("devices":{"requests":[{"name":"r","exactly":{)"
                            R"("deviceClassName":"gpu-shared.nvidia.com"}}]}}})")
                    .ok());
    auto claims = [&] {
      return e.mirror->Read([](const ClusterState& s) { return s.dra().resource_claim_count(); });
    };
    ASSERT_TRUE(Eventually([&] { return claims() == 1; }));
    ASSERT_TRUE(fake_.Delete("resourceclaims", "team-c", "probe"));
    ASSERT_TRUE(Eventually([&] { return claims() == 0; }));
  }

  FakeApiServer fake_;
  DraTestAllocator alloc_{fake_};
  ScratchDir dir_;
  std::string kubeconfig_;
};

TEST_F(LiveDraTest, MixedClusterAnnotationsNameRealDevicesQuotasHoldAndRestartRebuilds) {
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  WaitForClaimWatch(*e);
  EXPECT_TRUE(e->live->dra());
  // Both kinds, same names: 2 MIG units on each plugin node, 2 on dra-1, 2 on dra-2.
  const std::string state = e->service->DebugStateJson();
  // The classes here name no node label (the fact sheet's do not): nothing to compare.
  EXPECT_THAT(state, HasSubstr(R"({"node":"dra-1","kind":"dra","labelled":false})"));
  EXPECT_THAT(state, HasSubstr(R"({"node":"plugin-1","kind":"device-plugin","labelled":false})"));
  EXPECT_THAT(state, HasSubstr(R"("device":"gpu.nvidia.com/dra-2/gpu-9-mig-1g5gb-19-1","uuid":"MIG-dra-2-1")"));

  std::vector<std::string> pods;
  for (int i = 0; i < 3; ++i) pods.push_back(Pod(fake_, "team-a", absl::StrCat("mig-", i), kMig));
  for (int i = 0; i < 5; ++i) pods.push_back(Pod(fake_, "team-c", absl::StrCat("mig-", i), kMig));
  for (int i = 0; i < 3; ++i) pods.push_back(Pod(fake_, "team-b", absl::StrCat("gpu-", i), kShared));
  for (int i = 0; i < 3; ++i) pods.push_back(Pod(fake_, "team-a", absl::StrCat("gpu-", i), kShared));
  std::map<std::string, Attempt> outcome = ScheduleAll(*e->service, pods, 3);

  Referee r = Referee_(fake_);
  EXPECT_THAT(r.violations, IsEmpty());
  // team-c: 3 MIG units of quota across both kinds; its other two are refused for quota.
  EXPECT_EQ(r.mig_units["team-c"], 3);
  int quota_refusals = 0;
  for (int i = 0; i < 5; ++i) {
    const Attempt& a = outcome[absl::StrCat("team-c/mig-", i)];
    if (!a.bound()) quota_refusals += absl::StrContains(a.error, "quota") ? 1 : 0;
  }
  EXPECT_EQ(quota_refusals, 2);
  // 8 MIG units in the cluster: team-a's 3 and team-c's 3 all fit, on both kinds.
  EXPECT_EQ(r.mig_units["team-a"], 3);
  std::set<std::string> nodes_used;
  for (const auto& [key, a] : outcome) {
    if (a.bound()) nodes_used.insert(a.chosen);
  }
  EXPECT_TRUE(std::any_of(nodes_used.begin(), nodes_used.end(), IsDraNode))
      << absl::StrJoin(nodes_used, ",");
  for (const std::string& key : pods) {
    if (absl::StartsWith(key, "team-c/")) continue;
    EXPECT_TRUE(outcome[key].bound()) << key << ": " << outcome[key].error;
  }

  // The mirror agrees with the API server, and its own audit is clean.
  auto usage = [](Mirror& m) {
    return m.Read([](const ClusterState& s) {
      std::map<std::string, int64_t> out;
      for (size_t p = 0; p < s.project_count(); ++p) {
        for (const Offering& o : s.catalog().offerings()) {
          const int64_t u = s.Usage(static_cast<ProjectId>(p), o.id);
          if (u != 0) out[absl::StrCat(s.project(static_cast<ProjectId>(p)).name, " ", o.resource)] = u;
        }
      }
      return out;
    });
  };
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([](const ClusterState& s) { return s.pods().size(); }) ==
           static_cast<size_t>(r.bound);
  }));
  EXPECT_THAT(e->mirror->Read([](const ClusterState& s) { return s.Audit().problems; }), IsEmpty());
  const std::map<std::string, int64_t> before = usage(*e->mirror);
  EXPECT_EQ(before.at("team-c nvidia.com/mig-1g.5gb"), 3);

  // Restart: a new extender rebuilds the same holdings from the API server.
  e.reset();
  auto again = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(Eventually([&] { return again->service->Ready(); }));
  EXPECT_EQ(usage(*again->mirror), before);
  EXPECT_THAT(again->mirror->Read([](const ClusterState& s) { return s.Audit().problems; }),
              IsEmpty());
  // Every DRA pod holds its claim's device in the rebuilt mirror.
  for (const auto& [key, device] : r.device_of) {
    if (!absl::StartsWith(device, "gpu.nvidia.com/")) continue;
    const bool holds = again->mirror->Read([&, key = key, device = device](const ClusterState& s) {
      const PodRecord* rec = s.FindPod(key);
      if (rec == nullptr) return false;
      const NodeOffering* no = s.FindNode(rec->assignment.node)->Find(rec->assignment.offering);
      return no != nullptr && rec->assignment.units.size() == 1 &&
             no->unit_devices.at(static_cast<size_t>(rec->assignment.units[0])) == device;
    });
    EXPECT_TRUE(holds) << key << " " << device;
  }

  // A DeviceClass edited under the running extender: the MIG class now selects another
  // profile, so the DRA nodes have no 1g.5gb units; drift is reported against the catalog.
  std::string cls = ReadFileOrDie(SharedPath("protocol/dra/deviceclass-mig-1g-extended.json"));
  cls.replace(cls.find("== '1g.5gb'"), 11, "== '2g.10gb'");
  ASSERT_TRUE(fake_.Apply("deviceclasses", cls).ok());
  EXPECT_TRUE(Eventually([&] {
    return again->mirror->Read([](const ClusterState& s) {
      // Held units stay (draining) until released; otherwise the offering is gone.
      const NodeOffering* no = s.FindNode("dra-1")->Find(s.catalog().Find(kMig)->id);
      return no == nullptr || no->advertised_units == 0;
    });
  }));
  EXPECT_THAT(again->service->DebugStateJson(), HasSubstr("2g.10gb"));
  EXPECT_FALSE(again->mirror->Read([](const ClusterState& s) { return s.DraDrift(); }).empty());
}

TEST_F(LiveDraTest, ASliceOrderThatDefeatsThePredictionMakesBindRefuse) {
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  WaitForClaimWatch(*e);
  // The allocator walks dra-2's slices b, a (informer order of an older scheduler); the
  // extender predicts the sorted walk a, b.
  alloc_.SetReverseSliceOrder(true);
  const std::string a1 = Pod(fake_, "team-a", "gpu-a1", kShared);
  Attempt first = ScheduleAll(*e->service, {a1}, 1, {"dra-2"})[a1];
  ASSERT_TRUE(first.bound()) << first.error;
  EXPECT_EQ(Referee_(fake_).device_of[a1], "gpu.nvidia.com/dra-2/gpu-1");

  // team-b: the prediction (gpu-0, free) lets dra-2 pass, the allocator gives it a share of
  // team-a's gpu-1: bind refuses, the claim is deleted, and every retry ends the same way.
  const std::string b1 = Pod(fake_, "team-b", "gpu-b1", kShared);
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([&](const ClusterState& s) { return s.FindPod(a1) != nullptr; });
  }));
  Attempt refused = ScheduleAll(*e->service, {b1}, 3, {"dra-2"})[b1];
  EXPECT_FALSE(refused.bound());
  EXPECT_THAT(refused.error, HasSubstr("restricted sharing: DRA device gpu.nvidia.com/dra-2/gpu-1"));
  EXPECT_THAT(Referee_(fake_).violations, IsEmpty());
  for (const PodView& p : fake_.Pods()) {
    if (p.key == b1) {
      EXPECT_EQ(p.node, "") << "refused binds leave the pod pending";
    }
  }

  // A scheduler that walks in order picks gpu-0: bound there.
  alloc_.SetReverseSliceOrder(false);
  Attempt ok = ScheduleAll(*e->service, {b1}, 1, {"dra-2"})[b1];
  ASSERT_TRUE(ok.bound()) << ok.error << absl::StrJoin(fake_.Objects("resourceclaims"), "\n");
  const Referee r = Referee_(fake_);
  EXPECT_THAT(r.violations, IsEmpty());
  EXPECT_EQ(r.device_of.at(b1), "gpu.nvidia.com/dra-2/gpu-0");

  // Now the prediction sees team-b on gpu-0 (the first fit with room): team-a is kept off
  // dra-2 at filter, before any claim is made.
  const std::string a2 = Pod(fake_, "team-a", "gpu-a2", kShared);
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([&](const ClusterState& s) { return s.FindPod(b1) != nullptr; });
  }));
  Attempt kept_off = ScheduleAll(*e->service, {a2}, 1, {"dra-2"})[a2];
  EXPECT_FALSE(kept_off.bound());
  EXPECT_THAT(kept_off.error, HasSubstr("filter: no node"));
  EXPECT_THAT(kept_off.error, HasSubstr("DRA allocator would pick a device another project holds"));
}

// The claim watch trails PreBind (right after start-up, or a slow watch cache): bind reads
// the claim from the API (one GET) and verifies it as it verifies the mirror's. No unit goes
// to two projects while the watch is behind, and its catching up changes nothing.
TEST_F(LiveDraTest, BindReadsTheClaimWhileTheClaimWatchLagsAndStillRefusesSharing) {
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  WaitForClaimWatch(*e);
  alloc_.SetReverseSliceOrder(true);  // the allocator walks dra-2's slices b, a: gpu-1 first
  const std::string a1 = Pod(fake_, "team-a", "gpu-a1", kShared);
  ASSERT_TRUE(ScheduleAll(*e->service, {a1}, 1, {"dra-2"})[a1].bound());
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([&](const ClusterState& s) { return s.FindPod(a1) != nullptr; });
  }));

  fake_.HoldWatches(true);
  const int64_t reads_before = fake_.RequestCount("GET", "/resourceclaims/");
  // team-b is given a share of team-a's gpu-1: the claim exists only in the API server.
  const std::string b1 = Pod(fake_, "team-b", "gpu-b1", kShared);
  Attempt refused = ScheduleAll(*e->service, {b1}, 1, {"dra-2"})[b1];
  EXPECT_FALSE(refused.bound());
  EXPECT_THAT(refused.error, HasSubstr("restricted sharing: DRA device gpu.nvidia.com/dra-2/gpu-1"));
  EXPECT_EQ(fake_.RequestCount("GET", "/resourceclaims/"), reads_before + 1);
  // In order, the allocator gives it gpu-0: bound from the claim as read.
  alloc_.SetReverseSliceOrder(false);
  Attempt bound = ScheduleAll(*e->service, {b1}, 1, {"dra-2"})[b1];
  ASSERT_TRUE(bound.bound()) << bound.error;
  EXPECT_EQ(fake_.RequestCount("GET", "/resourceclaims/"), reads_before + 2);
  EXPECT_EQ(Referee_(fake_).device_of.at(b1), "gpu.nvidia.com/dra-2/gpu-0");
  EXPECT_EQ(e->mirror->Read([&](const ClusterState& s) { return s.dra().resource_claim_count(); }),
            1u)
      << "the claims read are not in the mirror before their watch events";

  fake_.HoldWatches(false);
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([&](const ClusterState& s) {
      const PodRecord* rec = s.FindPod(b1);
      return rec != nullptr && rec->source == HoldingSource::kConfirmed &&
             s.dra().resource_claim_count() == 2;
    });
  }));
  EXPECT_THAT(Referee_(fake_).violations, IsEmpty());
  EXPECT_THAT(e->mirror->Read([](const ClusterState& s) { return s.Audit().problems; }), IsEmpty());
  const bool on_gpu0 = e->mirror->Read([&](const ClusterState& s) {
    const PodRecord* rec = s.FindPod(b1);
    const NodeOffering* no = s.FindNode("dra-2")->Find(rec->assignment.offering);
    return rec->assignment.units.size() == 1 &&
           no->unit_devices.at(static_cast<size_t>(rec->assignment.units[0])) ==
               "gpu.nvidia.com/dra-2/gpu-0";
  });
  EXPECT_TRUE(on_gpu0);
}

// kube-scheduler runs binding cycles concurrently, one goroutine each, while its scheduling
// cycle goes on with the next pod. Here the binds run on their own threads while the watches
// are held and released at random (a watch cache that lags, then catches up: binds then read
// their claims from the API), the allocator walks dra-2's slices in either order (the
// prediction is then sometimes wrong, and bind must refuse), and Binding POSTs and claim reads
// fail now and then (before or after the POST commits). Whatever the interleaving: no
// shared device holds two projects, no exclusive device two pods, every bound pod's
// annotation names its claim's device, and once the watches catch up the mirror's audit is
// clean. (Quotas are the mixed-cluster test's: no project here asks more than its quota.)
TEST_F(LiveDraTest, ConcurrentBindsWhileTheWatchesLagNeverHandAUnitOutTwice) {
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  WaitForClaimWatch(*e);
  // The projects take turns, so that the allocator, which knows no projects, puts the next
  // project's pod on the device the last one got.
  std::vector<std::string> pods;
  for (int i = 0; i < 6; ++i) {
    for (const char* ns : {"team-a", "team-b", "team-c"}) {
      pods.push_back(Pod(fake_, ns, absl::StrCat("gpu-", i), kShared));
    }
  }
  for (int i = 0; i < 2; ++i) {
    for (const char* ns : {"team-a", "team-b", "team-c"}) {
      pods.push_back(Pod(fake_, ns, absl::StrCat("mig-", i), kMig));
    }
  }
  const int64_t reads_before = fake_.RequestCount("GET", "/resourceclaims/");
  std::mt19937 rng(20261203);
  absl::Mutex mu;
  std::deque<std::string> queue(pods.begin(), pods.end());
  int in_flight = 0;
  std::map<std::string, int> tries;
  std::map<std::string, std::string> last_error;
  std::vector<std::thread> binds;
  constexpr int kTriesPerPod = 8;
  int cycles = 0;
  bool held = false;
  absl::Time last_change = absl::Now();
  while (true) {
    std::string key;
    {
      absl::MutexLock lock(&mu);
      if (queue.empty() && in_flight == 0) break;
      if (!queue.empty()) {
        key = queue.front();
        queue.pop_front();
      }
    }
    if (key.empty()) {
      absl::SleepFor(absl::Milliseconds(5));
      continue;
    }
    // The first cycles go to the DRA nodes with the watches held until their binds have
    // answered, so that those binds read their claims from the API whatever the timing. Then
    // the watches are held or released at random, each state kept longer than bind's wait for
    // the claim (HoldWatches(true) again would release what is held so far).
    const bool first = ++cycles <= 6;
    if (cycles == 7) {
      mu.LockWhen(absl::Condition(
          +[](int* n) { return *n == 0; }, &in_flight));
      mu.Unlock();
    }
    if (first && !held) {
      fake_.HoldWatches(true);
      held = true;
      last_change = absl::Now();
    } else if (!first && absl::Now() - last_change > 2 * ::gse::kDraClaimWait) {
      const bool hold = rng() % 2 == 0;
      if (hold != held) fake_.HoldWatches(hold);
      held = hold;
      last_change = absl::Now();
    }
    alloc_.SetReverseSliceOrder(rng() % 2 == 0);
    // API faults on the bind path, once each, now and then: the Binding POST failing before
    // or after it commits (the extender reads the pod back), and the claim's GET failing.
    if (!first) {
      switch (rng() % 8) {
        case 0:
        case 1: {
          FakeApiServer::Fault f;
          f.method = "POST";
          f.path_contains = "/binding";
          f.status = 503;
          f.status_after_commit = rng() % 2 == 0;
          f.label = f.status_after_commit ? "binding 503 after commit" : "binding 503";
          fake_.AddFault(f);
          break;
        }
        case 2: {
          FakeApiServer::Fault f;
          f.method = "GET";
          f.path_contains = "/resourceclaims/";
          f.status = 503;
          f.label = "claim read 503";
          fake_.AddFault(f);
          break;
        }
        default:
          break;
      }
    }
    const size_t slash = key.find('/');
    Cycle cycle = SchedulingCycle(*e->service, fake_, alloc_, key.substr(0, slash),
                                  key.substr(slash + 1),
                                  first ? std::vector<std::string>{"dra-1", "dra-2"} : kNodes);
    absl::MutexLock lock(&mu);
    ++tries[key];
    ++in_flight;
    binds.emplace_back([&, key, cycle] {
      const Attempt a = BindingCycle(*e->service, alloc_, cycle);
      absl::MutexLock lock(&mu);
      --in_flight;
      last_error[key] = a.error;
      if (!a.bound() && tries[key] < kTriesPerPod) queue.push_back(key);
    });
  }
  for (std::thread& t : binds) t.join();
  fake_.ClearFaults();
  EXPECT_THAT(Referee_(fake_).violations, IsEmpty()) << "while the watches lagged";
  const std::map<std::string, int64_t> hits = fake_.FaultHits();
  EXPECT_GT(hits.count("binding 503") + hits.count("binding 503 after commit"), 0u)
      << "no Binding POST met a fault";
  EXPECT_GT(fake_.RequestCount("GET", "/resourceclaims/"), reads_before)
      << "no bind read its claim from the API: the lagging path was not exercised";

  // While the mirror lags, a project's pods may find no node (its own slice looks full or
  // another project's to the prediction): kube-scheduler retries them on the next cluster
  // events. Once the watches have caught up, every pod fits (7 shareable GPUs of 4 shares for
  // 3 projects' 6 pods each, 8 MIG units for 6 pods, team-c's quota 3) and is bound.
  fake_.HoldWatches(false);
  ASSERT_TRUE(Eventually([&] { return fake_.WatchesCaughtUp(); }));
  std::vector<std::string> unbound;
  for (const std::string& key : pods) {
    if (Referee_(fake_).device_of.count(key) == 0) unbound.push_back(key);
  }
  std::map<std::string, Attempt> retried = ScheduleAll(*e->service, unbound, 3);
  const Referee r = Referee_(fake_);
  EXPECT_THAT(r.violations, IsEmpty());
  EXPECT_EQ(r.bound, static_cast<int>(pods.size()));
  for (const auto& [key, a] : retried) EXPECT_TRUE(a.bound()) << key << ": " << a.error;
  ASSERT_TRUE(Eventually([&] {
    return e->mirror->Read([](const ClusterState& s) { return s.pods().size(); }) ==
           static_cast<size_t>(r.bound);
  }));
  EXPECT_THAT(e->mirror->Read([](const ClusterState& s) { return s.Audit().problems; }), IsEmpty());
}

// A sidecar (an init container with restartPolicy Always) keeps its devices beside the app
// container's; a plain init container reuses a later request. The scheduler's claim then asks
// 2 MIG devices for 3 containers of 1 each, and the extender must count the same 2, or its
// bind refuses the claim ("holds 2 device(s) ... the pod asks 1") on every retry.
TEST_F(LiveDraTest, ASidecarsDevicesAreCountedAndAPlainInitContainerReusesALaterRequest) {
  auto e = StartLiveExtender(TestOptions(kubeconfig_));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  WaitForClaimWatch(*e);
  auto container = [](const char* name, const char* extra) {
    return absl::StrCat(R"({"name":")", name, R"(",)", extra,
                        R"("resources":{"requests":{"nvidia.com/mig-1g.5gb":"1"},)",
                        R"("limits":{"nvidia.com/mig-1g.5gb":"1"}}})");
  };
  ASSERT_TRUE(fake_.Apply("pods", absl::StrCat(
                                      R"({"metadata":{"name":"sidecar","namespace":"team-a"},)",
                                      R"("spec":{"initContainers":[)", container("setup", ""), ",",
                                      container("proxy", R"("restartPolicy":"Always",)"),
                                      R"(],"containers":[)", container("app", ""), "]}}"))
                  .ok());
  const Attempt a = ScheduleAll(*e->service, {"team-a/sidecar"}, 3, {"dra-1"})["team-a/sidecar"];
  ASSERT_TRUE(a.bound()) << a.error;
  EXPECT_EQ(ClaimDevices(fake_, "team-a", "sidecar").size(), 2u);
  const size_t units = e->mirror->Read([](const ClusterState& s) {
    const PodRecord* rec = s.FindPod("team-a/sidecar");
    return rec == nullptr ? size_t{0} : rec->assignment.units.size();
  });
  EXPECT_EQ(units, 2u);
  // setup (index 0) reuses proxy's request, the first long-lived one after it.
  std::optional<std::string> pod = fake_.Get("pods", "team-a", "sidecar");
  ASSERT_TRUE(pod.has_value());
  EXPECT_THAT(*pod, HasSubstr(R"({"containerName":"setup","resourceName":"nvidia.com/mig-1g.5gb","requestName":"container-1-request-0"})"));
  EXPECT_THAT(*pod, HasSubstr(R"({"containerName":"app","resourceName":"nvidia.com/mig-1g.5gb","requestName":"container-2-request-0"})"));
  // The annotation names both of the claim's devices.
  for (const PodView& view : fake_.Pods()) {
    if (view.key != "team-a/sidecar") continue;
    auto named = view.annotations.find("gpu.themelio.io/dra-devices");
    ASSERT_NE(named, view.annotations.end());
    for (const std::string& device : ClaimDevices(fake_, "team-a", "sidecar")) {
      EXPECT_THAT(named->second, HasSubstr(device));
    }
  }
}

TEST_F(LiveDraTest, BadObjectsAreRefusedNamingTheFieldAndChangeNothing) {
  absl::Mutex mu;
  std::vector<std::string> logs;
  LiveClusterOptions options = TestOptions(kubeconfig_);
  options.reflector.log = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    logs.push_back(line);
  };
  auto e = StartLiveExtender(std::move(options));
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(Eventually([&] { return e->service->Ready(); }));
  const std::string before = e->service->DebugStateJson();
  // A device without a name, and a claim result naming a device without a driver.
  ASSERT_TRUE(fake_.Apply("resourceslices",
                          R"({"metadata":{"name":"bad"},"spec":{"driver":"gpu.nvidia.com",)"
                          R"("pool":{"name":"dra-1","generation":2,"resourceSliceCount":1},)"
                          R"("nodeName":"dra-1","devices":[{"attributes":{}}]}})")
                  .ok());
  auto logged = [&](const std::string& what) {
    absl::MutexLock lock(&mu);
    return std::any_of(logs.begin(), logs.end(),
                       [&](const std::string& l) { return absl::StrContains(l, what); });
  };
  EXPECT_TRUE(Eventually([&] { return logged("devices[0].name: missing"); }));
  EXPECT_GE(e->live->reflector_counters().decode_errors, 1);
  // Nothing changed: in particular dra-1's pool did not move to a generation 2 that would
  // hide its devices.
  EXPECT_EQ(e->service->DebugStateJson(), before);
  EXPECT_EQ(e->mirror->Read([](const ClusterState& s) { return s.dra().resource_slice_count(); }),
            3u);
}

TEST(LiveDraModeTest, AutoIsOffWhenTheServerDoesNotServeResourceV1) {
  FakeApiServer::Options options;
  options.serve_dra = false;
  FakeApiServer fake(options);
  ASSERT_TRUE(fake.Start().ok());
  ScratchDir dir;
  dir.Write("kubeconfig", fake.Kubeconfig());
  auto e = StartLiveExtender(TestOptions(dir.File("kubeconfig")));
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->live->dra());
  EXPECT_FALSE(e->mirror->Read([](const ClusterState& s) { return s.options().dra; }));
}

}  // namespace
}  // namespace gse
