// The extender service in DRA mode (docs/dra.md), on the DRA fact sheet's objects: what the
// decision log says of DRA nodes (a shared offering's node that passed with no prediction of
// the allocator's pick, and catalog drift, on filter and on bind lines), and what /debug/state
// says of a device a user-made claim holds (user_claim, apart from the unit's health).
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/binder.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/dra_objects.h"
#include "state/mirror.h"
#include "tests/testing/dra_fixtures.h"

namespace gse {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kNode[] = "gpu-node-a";  // the fact sheet slice's node
constexpr char kMig[] = "nvidia.com/mig-1g.5gb";
constexpr char kMigShared[] = "nvidia.com/mig-1g.5gb.shared";
// The fact sheet claim's pod.
constexpr char kClaimNs[] = "ml-team";
constexpr char kClaimPod[] = "cuda-infer-7d9f8b6c5-x2lqp";
constexpr char kClaimPodUid[] = "6f0c3a8e-2b1d-4c6e-9a57-0d2f4b8e1c11";

class Lines {
 public:
  DecisionLog::Sink Sink() {
    return [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
  }
  std::vector<std::string> Take() {
    absl::MutexLock lock(&mu_);
    return std::move(lines_);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

rapidjson::Document Json(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << text;
  return doc;
}

std::vector<std::string> Notes(const rapidjson::Document& line) {
  std::vector<std::string> out;
  if (!line.IsObject() || !line.HasMember("dra_notes") || !line["dra_notes"].IsArray()) return out;
  for (const auto& n : line["dra_notes"].GetArray()) out.emplace_back(n.GetString());
  return out;
}

std::string PodJson(const std::string& ns, const std::string& name, const std::string& uid,
                    const std::string& resource) {
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns, R"(","uid":")",
                      uid, R"("},"spec":{"containers":[{"name":"c","resources":{"limits":{")",
                      resource, R"(":"1"}}}]}})");
}

std::string FilterBody(const std::string& pod_json) {
  return absl::StrCat(R"({"Pod":)", pod_json, R"(,"Nodes":null,"NodeNames":[")", kNode, R"("]})");
}

class ExtenderDraTest : public ::testing::Test {
 protected:
  ExtenderDraTest()
      : mirror_(std::make_shared<const Catalog>(Catalog::BuiltIn()), DraOptions()),
        log_(DecisionLogLevel::kFailures, lines_.Sink()) {
    // The fact sheet's class and node; a copy of the class serves the shared offering, and
    // every device takes shares (the fact sheet's first one does) so that it is DRA-backed.
    DraObjectBatch cls = testing::DecodeDra(testing::Dra("deviceclass-mig-1g-extended.json"));
    DraObjectBatch slice = testing::DecodeDra(testing::Dra("resourceslice-a100-mig-node.json"));
    mirror_.Write([&](ClusterState& s) {
      NodeObject node;
      node.name = kNode;
      s.ApplyNode(node);
      for (DraDeviceClass c : cls.device_classes) {
        s.ApplyDeviceClass(c);
        c.name = "mig-1g-5gb-shared.nvidia.com";
        c.extended_resource_name = kMigShared;
        s.ApplyDeviceClass(c);
      }
      for (DraResourceSlice sl : slice.resource_slices) {
        for (DraDevice& d : sl.devices) d.allow_multiple_allocations = true;
        s.ApplyResourceSlice(sl);
      }
    });
    ServiceOptions options;
    options.decision_log = &log_;
    service_ = std::make_unique<ExtenderService>(&mirror_, MakePolicy("affinity-pack").value(),
                                                 &binder_, options);
  }

  static MirrorOptions DraOptions() {
    MirrorOptions o;
    o.dra = true;
    return o;
  }

  // A slice elsewhere that selects its nodes by a node selector: no walk is predicted then.
  void AddSelectorSlice() {
    DraObjectBatch b = testing::DecodeDra(testing::Dra("resourceslice-a100-mig-node.json"));
    DraResourceSlice sl = b.resource_slices.at(0);
    sl.name = "selected-nodes";
    sl.pool_name = "selected-pool";
    sl.node_name.clear();
    sl.node_selector = true;
    mirror_.Write([&](ClusterState& s) { s.ApplyResourceSlice(sl); });
  }

  std::vector<std::string> Drift() {
    return mirror_.Read([](const ClusterState& s) { return s.DraDrift(); });
  }

  Mirror mirror_;
  Lines lines_;
  DecisionLog log_;
  RecordOnlyBinder binder_;
  std::unique_ptr<ExtenderService> service_;
};

TEST_F(ExtenderDraTest, FilterLineSaysWhichSharedNodePassedWithoutAPrediction) {
  // The built-in catalog names classes that are not mirrored here: drift is present.
  const std::vector<std::string> drift = Drift();
  ASSERT_THAT(drift, Contains(HasSubstr("gpu-whole.nvidia.com")));

  // Predicted (the first device is free): the line says only the drift.
  ASSERT_EQ(service_->Filter(FilterBody(PodJson("team-a", "p1", "uid-p1", kMigShared))).status, 200);
  std::vector<std::string> lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  rapidjson::Document line = Json(lines[0]);
  EXPECT_EQ(std::string(line["event"].GetString()), "filter");
  EXPECT_EQ(std::string(line["pod"].GetString()), "team-a/p1");
  EXPECT_EQ(std::string(line["offering"].GetString()), kMigShared);
  EXPECT_EQ(line["candidates"].GetInt(), 1);
  EXPECT_EQ(line["passed"].GetInt(), 1);
  std::vector<std::string> notes = Notes(line);
  EXPECT_EQ(notes.size(), drift.size());
  for (const std::string& d : drift) EXPECT_THAT(notes, Contains("catalog drift: " + d));
  EXPECT_THAT(notes, Not(Contains(HasSubstr("no prediction"))));

  // Not predicted: the node still passes, and the line says so and why.
  AddSelectorSlice();
  const VerbResult r = service_->Filter(FilterBody(PodJson("team-a", "p2", "uid-p2", kMigShared)));
  ASSERT_EQ(r.status, 200);
  EXPECT_THAT(r.body, HasSubstr(R"("NodeNames":["gpu-node-a"])"));
  lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  notes = Notes(Json(lines[0]));
  ASSERT_FALSE(notes.empty());
  EXPECT_EQ(notes[0], "gpu-node-a: no prediction: slices select nodes by selector (not modelled)");
  EXPECT_EQ(notes.size(), drift.size() + 1);
}

TEST_F(ExtenderDraTest, NothingToSayOrLogOffWritesNoFilterLine) {
  // An exclusive offering's pick is predicted too (filter checks that the mirror has room on
  // it): an unpredictable node is noted as for a shared one, with the drift.
  AddSelectorSlice();
  ASSERT_EQ(service_->Filter(FilterBody(PodJson("team-a", "x1", "uid-x1", kMig))).status, 200);
  std::vector<std::string> lines = lines_.Take();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(Notes(Json(lines[0])), Contains(HasSubstr("gpu-node-a: no prediction")));
  EXPECT_THAT(Notes(Json(lines[0])), Contains(StartsWith("catalog drift: ")));
  // A pod of no catalog resource, or no DRA node among the passing ones: no line.
  ASSERT_EQ(service_->Filter(FilterBody(PodJson("team-a", "c1", "uid-c1", "cpu"))).status, 200);
  EXPECT_THAT(lines_.Take(), IsEmpty());

  DecisionLog off(DecisionLogLevel::kOff, lines_.Sink());
  ServiceOptions options;
  options.decision_log = &off;
  ExtenderService quiet(&mirror_, MakePolicy("affinity-pack").value(), &binder_, options);
  ASSERT_EQ(quiet.Filter(FilterBody(PodJson("team-a", "p3", "uid-p3", kMigShared))).status, 200);
  EXPECT_THAT(lines_.Take(), IsEmpty());
}

TEST_F(ExtenderDraTest, BindLineOnADraNodeSaysTheDrift) {
  // The fact sheet's claim: kube-scheduler allocated 19-3 to the pod and wrote the claim.
  mirror_.Write([&](ClusterState& s) {
    for (DraResourceClaim& c :
         testing::DecodeDra(testing::Dra("resourceclaim-extended-allocated.json")).resource_claims) {
      s.ApplyResourceClaim(c);
    }
  });
  ASSERT_EQ(service_->Filter(FilterBody(PodJson(kClaimNs, kClaimPod, kClaimPodUid, kMig))).status, 200);
  lines_.Take();
  DecisionLog all(DecisionLogLevel::kAll, lines_.Sink());
  ServiceOptions options;
  options.decision_log = &all;
  ExtenderService service(&mirror_, MakePolicy("affinity-pack").value(), &binder_, options);
  ASSERT_EQ(service.Filter(FilterBody(PodJson(kClaimNs, kClaimPod, kClaimPodUid, kMig))).status, 200);
  const VerbResult bound = service.Bind(absl::StrCat(
      R"({"PodName":")", kClaimPod, R"(","PodNamespace":")", kClaimNs, R"(","PodUID":")",
      kClaimPodUid, R"(","Node":")", kNode, R"("})"));
  EXPECT_EQ(bound.body, R"({"Error":""})");
  const std::vector<std::string> lines = lines_.Take();
  ASSERT_EQ(lines.size(), 2u);  // the filter's notes, then the bind
  rapidjson::Document bind = Json(lines[1]);
  EXPECT_EQ(std::string(bind["event"].GetString()), "bind");
  EXPECT_EQ(std::string(bind["outcome"].GetString()), "bound");
  std::vector<std::string> want;
  for (const std::string& d : Drift()) want.push_back("catalog drift: " + d);
  EXPECT_EQ(Notes(bind), want);
}

// /debug/state: a device a user-made claim holds says user_claim, not that it is unhealthy.
// The node label the classes name (`catalog render` writes it, ADR-0023): /debug/state says
// which nodes carry it and where label and kind disagree, a node half way through a migration.
TEST_F(ExtenderDraTest, DebugStateComparesEachNodesLabelWithItsKind) {
  auto label_classes = [&](const std::string& key, const std::string& value, const std::string& problem) {
    mirror_.Write([&](ClusterState& s) {
      std::vector<DraDeviceClass> classes;
      for (const DraDeviceClass* c : s.dra().DeviceClasses()) classes.push_back(*c);
      for (DraDeviceClass c : classes) {
        c.node_label_key = key;
        c.node_label_value = value;
        c.node_label_problem = problem;
        s.ApplyDeviceClass(c);
      }
    });
  };
  auto node_entry = [&](const std::string& name) {
    rapidjson::Document state = Json(service_->DebugStateJson());
    rapidjson::Document out;
    for (const auto& n : state["dra"]["nodes"].GetArray()) {
      if (n["node"].GetString() == name) out.CopyFrom(n, out.GetAllocator());
    }
    return out;
  };
  auto problems = [](const rapidjson::Value& n) {
    std::vector<std::string> out;
    if (n.HasMember("label_problems")) {
      for (const auto& p : n["label_problems"].GetArray()) out.push_back(p.GetString());
    }
    return out;
  };
  // The fact sheet's classes name no label: nothing to compare.
  rapidjson::Document n = node_entry(kNode);
  EXPECT_EQ(std::string(n["kind"].GetString()), "dra");
  EXPECT_FALSE(n["labelled"].GetBool());
  EXPECT_THAT(problems(n), IsEmpty());

  label_classes("nvidia.com/dra-kubelet-plugin", "true", "");
  n = node_entry(kNode);
  EXPECT_FALSE(n["labelled"].GetBool());
  EXPECT_THAT(problems(n), Contains(std::string(kMig) +
                                    " is served from DRA devices, but the node lacks "
                                    "nvidia.com/dra-kubelet-plugin=true (DeviceClass mig-1g-5gb.nvidia.com)"));
  mirror_.Write([&](ClusterState& s) {
    NodeObject node;
    node.name = kNode;
    node.labels["nvidia.com/dra-kubelet-plugin"] = "true";
    s.ApplyNode(node);
    // Labelled, but its device plugin still runs: the per-node rule makes it a plugin node.
    NodeObject half;
    half.name = "half-migrated";
    half.labels["nvidia.com/dra-kubelet-plugin"] = "true";
    half.allocatable_milli[kMig] = 2000;
    s.ApplyNode(half);
  });
  n = node_entry(kNode);
  EXPECT_TRUE(n["labelled"].GetBool());
  EXPECT_THAT(problems(n), IsEmpty());
  n = node_entry("half-migrated");
  EXPECT_EQ(std::string(n["kind"].GetString()), "device-plugin");
  EXPECT_THAT(problems(n), ElementsAre(absl::StrCat("labelled nvidia.com/dra-kubelet-plugin=true, but the device "
                                                    "plugin advertises ", kMig, ": served as a device-plugin node")));

  // An annotation that cannot be read is the class's problem, not the nodes'.
  label_classes("", "", "metadata.annotations[\"gpu.themelio.io/dra-node-label\"]: not a string");
  rapidjson::Document state = Json(service_->DebugStateJson());
  ASSERT_EQ(state["dra"]["class_problems"].Size(), 2u);
  EXPECT_THAT(std::string(state["dra"]["class_problems"][0].GetString()),
              HasSubstr(": metadata.annotations[\"gpu.themelio.io/dra-node-label\"]: not a string"));
  EXPECT_THAT(problems(node_entry("half-migrated")), IsEmpty());
}

TEST_F(ExtenderDraTest, DebugStateShowsAUserClaimApartFromHealth) {
  // The fact sheet's allocation, made by a user: no annotation, no owning pod.
  const std::string user = testing::Edit(
      testing::Dra("resourceclaim-extended-allocated.json"),
      "\"resource.kubernetes.io/extended-resource-claim\": \"true\"", "\"example.com/owner\": \"user\"");
  mirror_.Write([&](ClusterState& s) {
    for (DraResourceClaim& c : testing::DecodeDra(user).resource_claims) s.ApplyResourceClaim(c);
  });
  const bool unhealthy = mirror_.Read([](const ClusterState& s) {
    const NodeOffering* no = s.FindNode(kNode)->Find(s.catalog().Find(kMig)->id);
    return no->units[0].unhealthy;
  });
  EXPECT_FALSE(unhealthy);
  rapidjson::Document state = Json(service_->DebugStateJson());
  int user_claimed = 0, free = 0;
  for (const auto& u : state["units"].GetArray()) {
    if (std::string(u["resource"].GetString()) != kMig) continue;
    ASSERT_TRUE(u.HasMember("user_claim")) << u["id"].GetString();
    const bool held = std::string(u["device"].GetString()).find("-19-3") != std::string::npos;
    EXPECT_EQ(u["user_claim"].GetBool(), held) << u["id"].GetString();
    EXPECT_FALSE(u.HasMember("healthy")) << "no health is known of DRA devices";
    (held ? user_claimed : free) += 1;
  }
  EXPECT_EQ(user_claimed, 1);
  EXPECT_EQ(free, 6);
}

}  // namespace
}  // namespace gse
