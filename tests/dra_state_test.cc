// The DRA model (state/dra_state.h) on the fact sheet's objects (shared/protocol/dra/): the
// per-node rule, units in the allocator's walk order, the selector subset, holders, the
// allocator's first-fit pick, bind verification and catalog drift.
#include "state/dra_state.h"

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "state/catalog.h"
#include "state/dra_objects.h"
#include "tests/testing/dra_fixtures.h"
#include "testsupport/paths.h"
#include "tools/catalog_render.h"
#include "yaml-cpp/yaml.h"

namespace gse {
namespace {

using testing::Dra;
using testing::Edit;
using testing::DecodeDra;

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kClass[] = "mig-1g-5gb.nvidia.com";
constexpr char kNode[] = "gpu-node-a";
constexpr char kMig[] = "nvidia.com/mig-1g.5gb";

void Apply(DraState& state, const std::string& json) {
  DraObjectBatch b = DecodeDra(json);
  for (auto& c : b.device_classes) state.UpsertDeviceClass(std::move(c));
  for (auto& s : b.resource_slices) state.UpsertResourceSlice(std::move(s));
  for (auto& c : b.resource_claims) state.UpsertResourceClaim(std::move(c));
}

// The fact sheet's class and slice, no claims.
DraState FactSheetNode() {
  DraState state;
  Apply(state, Dra("deviceclass-mig-1g-extended.json"));
  Apply(state, Dra("resourceslice-a100-mig-node.json"));
  return state;
}

std::vector<std::string> DeviceNames(const std::vector<DraDeviceId>& ids) {
  std::vector<std::string> out;
  for (const auto& id : ids) out.push_back(id.device);
  return out;
}

// An allocated extended-resource claim for `pod` holding `device` (as the allocator writes it).
std::string ClaimJson(const std::string& pod, const std::string& device,
                      const std::string& consumed = "") {
  return absl::StrCat(
      R"({"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":")", pod,
      R"(-extended-resources-x","namespace":"ml-team","uid":"uid-claim-)", pod,
      R"(","annotations":{"resource.kubernetes.io/extended-resource-claim":"true"},)",
      R"("ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":")", pod, R"(","uid":"uid-)",
      pod, R"(","controller":true}]},"spec":{"devices":{"requests":[{"name":"container-0-request-0",)",
      R"("exactly":{"deviceClassName":")", kClass, R"(","count":1}}]}},)",
      R"("status":{"allocation":{"devices":{"results":[{"request":"container-0-request-0",)",
      R"("driver":"gpu.nvidia.com","pool":"gpu-node-a","device":")", device, R"(")",
      consumed.empty() ? "" : absl::StrCat(R"(,"shareID":"s-)", pod, R"(","consumedCapacity":)", consumed),
      R"(}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name",)",
      R"("operator":"In","values":["gpu-node-a"]}]}]}},)",
      R"("reservedFor":[{"resource":"pods","name":")", pod, R"(","uid":"uid-)", pod, R"("}]}})");
}

TEST(DraStateTest, PerNodeRuleFollowsAllocatableAndTheClassMapping) {
  DraState state = FactSheetNode();
  EXPECT_EQ(state.KindOn(kMig, {}), DraNodeKind::kDra);
  EXPECT_EQ(state.KindOn(kMig, {{kMig, 0}}), DraNodeKind::kDra);
  EXPECT_EQ(state.KindOn(kMig, {{kMig, 7000}}), DraNodeKind::kDevicePlugin);
  EXPECT_EQ(state.KindOn("nvidia.com/mig-2g.10gb", {}), DraNodeKind::kNone);
  EXPECT_EQ(state.KindOn("nvidia.com/mig-2g.10gb", {{"nvidia.com/mig-2g.10gb", 2000}}),
            DraNodeKind::kDevicePlugin);
  // Every class also maps its implicit name.
  EXPECT_EQ(state.KindOn(absl::StrCat(kImplicitExtendedResourcePrefix, kClass), {}),
            DraNodeKind::kDra);
  ASSERT_TRUE(state.RemoveDeviceClass(kClass));
  EXPECT_EQ(state.KindOn(kMig, {}), DraNodeKind::kNone);
}

TEST(DraStateTest, ANameClashGoesToTheNewerClassThenTheLowerName) {
  DraState state;
  const std::string base = Dra("deviceclass-mig-1g-extended.json");
  Apply(state, Edit(base, R"("name": "mig-1g-5gb.nvidia.com")", R"("name": "b-class")"));
  Apply(state, Edit(Edit(base, R"("name": "mig-1g-5gb.nvidia.com")", R"("name": "a-class")"),
                    "2026-11-20T08:00:00Z", "2026-11-21T08:00:00Z"));
  ASSERT_NE(state.ClassForResource(kMig), nullptr);
  EXPECT_EQ(state.ClassForResource(kMig)->name, "a-class");  // newer
  Apply(state, Edit(base, R"("name": "mig-1g-5gb.nvidia.com")", R"("name": "a-class")"));
  EXPECT_EQ(state.ClassForResource(kMig)->name, "a-class");  // same age: lower name
  Apply(state, Edit(Edit(base, R"("name": "mig-1g-5gb.nvidia.com")", R"("name": "b-class")"),
                    "2026-11-20T08:00:00Z", "2026-11-22T08:00:00Z"));
  EXPECT_EQ(state.ClassForResource(kMig)->name, "b-class");
}

TEST(DraStateTest, UnitsAreTheClassesDevicesInWalkOrderWithIdentity) {
  DraState state = FactSheetNode();
  DraNodeUnits units = state.UnitsOf(kClass, kNode);
  ASSERT_TRUE(units.understood);
  EXPECT_THAT(units.problems, IsEmpty());
  ASSERT_EQ(units.units.size(), 7u);
  std::vector<std::string> names;
  for (const DraUnit& u : units.units) names.push_back(u.id.device);
  EXPECT_THAT(names, ElementsAre("gpu-0-mig-1g5gb-19-3", "gpu-0-mig-1g5gb-19-0",
                                 "gpu-0-mig-1g5gb-19-5", "gpu-0-mig-1g5gb-19-1",
                                 "gpu-0-mig-1g5gb-19-6", "gpu-0-mig-1g5gb-19-2",
                                 "gpu-0-mig-1g5gb-19-4"));
  const DraUnit& u = units.units[0];
  EXPECT_EQ(u.id.ToString(), "gpu.nvidia.com/gpu-node-a/gpu-0-mig-1g5gb-19-3");
  EXPECT_EQ(u.uuid, "MIG-3f7b2d4e-0c58-5a6d-89b1-4d5c6f7a8b93");
  EXPECT_EQ(u.parent_uuid, "GPU-5b1f3c9e-2a7d-4e6b-8c41-9d0f7a2e6b13");
  EXPECT_EQ(u.profile, "1g.5gb");
  EXPECT_EQ(u.product, "NVIDIA A100-SXM4-40GB");
  EXPECT_TRUE(u.shared);
  EXPECT_FALSE(units.units[1].shared);
  EXPECT_THAT(state.UnitsOf(kClass, "gpu-node-b").units, IsEmpty());
}

TEST(DraStateTest, DevicesWithoutUuidAreUnitsOfUnknownUuidAndReported) {
  DraState state;
  Apply(state, Dra("deviceclass-mig-1g-extended.json"));
  Apply(state, Edit(Dra("resourceslice-a100-mig-node.json"),
                    R"("uuid": {
            "string": "MIG-3f7b2d4e-0c58-5a6d-89b1-4d5c6f7a8b93"
          })", R"("uuidMissing": {"string": "x"})"));
  DraNodeUnits units = state.UnitsOf(kClass, kNode);
  ASSERT_EQ(units.units.size(), 7u);
  EXPECT_EQ(units.units[0].uuid, "");
  EXPECT_THAT(units.problems,
              ElementsAre("device gpu.nvidia.com/gpu-node-a/gpu-0-mig-1g5gb-19-3: no uuid attribute"));
}

TEST(DraStateTest, IncompleteAndSupersededPoolsHaveNoUnits) {
  DraState state;
  Apply(state, Dra("deviceclass-mig-1g-extended.json"));
  const std::string slice = Dra("resourceslice-a100-mig-node.json");
  Apply(state, Edit(slice, R"("resourceSliceCount": 1)", R"("resourceSliceCount": 2)"));
  DraNodeUnits units = state.UnitsOf(kClass, kNode);
  EXPECT_THAT(units.units, IsEmpty());
  EXPECT_THAT(units.problems, ElementsAre("pool gpu.nvidia.com/gpu-node-a: incomplete (1 of 2 "
                                          "slices at generation 1)"));
  // A newer generation with one device replaces the old slice's seven.
  Apply(state, slice);
  std::string newer = Edit(slice, R"("name": "00000-gpu.nvidia.com-gpu-node-a-9xk2p")",
                           R"("name": "00000-gpu.nvidia.com-gpu-node-a-zzzzz")");
  newer = Edit(newer, R"("generation": 1,
      "resourceSliceCount")", R"("generation": 2,
      "resourceSliceCount")");
  DraObjectBatch b = DecodeDra(newer);
  b.resource_slices[0].devices.resize(1);
  state.UpsertResourceSlice(b.resource_slices[0]);
  EXPECT_EQ(state.UnitsOf(kClass, kNode).units.size(), 1u);
}

TEST(DraStateTest, UnknownDriversContributeNothingAndNoError) {
  DraState state = FactSheetNode();
  std::string other = Edit(Dra("resourceslice-a100-mig-node.json"), R"("driver": "gpu.nvidia.com")",
                           R"("driver": "other.example.com")");
  other = Edit(other, R"("name": "00000-gpu.nvidia.com-gpu-node-a-9xk2p")", R"("name": "other")");
  Apply(state, other);
  DraNodeUnits units = state.UnitsOf(kClass, kNode);
  EXPECT_EQ(units.units.size(), 7u);
  for (const DraUnit& u : units.units) EXPECT_EQ(u.id.driver, "gpu.nvidia.com");
  EXPECT_THAT(units.problems, IsEmpty());
}

TEST(DraStateTest, TheRenderedSelectorShapesParseAndOthersAreNotUnderstood) {
  for (const Offering& o : Catalog::BuiltIn().offerings()) {
    absl::StatusOr<DraSelector> s = DraSelector::Parse(DeviceClassCel(o));
    EXPECT_TRUE(s.ok()) << o.resource << ": " << s.status();
  }
  for (const char* expr : {
           "device.capacity['gpu.nvidia.com'].memory >= quantity('5Gi')",
           "device.driver == 'gpu.nvidia.com' || device.driver == 'x'",
           "has(device.attributes['gpu.nvidia.com'].uuid)",
           "device.attributes['gpu.nvidia.com'].productName.matches('^A.*')",
           "device.attributes['gpu.nvidia.com'].productName.matches('^[a-z]')",
           "device.attributes['gpu.nvidia.com'].type == 'mi\\'g'",
           "device.attributes['gpu.nvidia.com'].type != 'mig'",
           "device.attributes['gpu.nvidia.com'].type == 'mig' &&",
           "true",
       }) {
    absl::StatusOr<DraSelector> s = DraSelector::Parse(expr);
    ASSERT_FALSE(s.ok()) << expr;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnimplemented) << expr;
    EXPECT_THAT(s.status().message(), HasSubstr("not understood")) << expr;
  }
}

TEST(DraStateTest, SelectorsEvaluateAsCelDoes) {
  DraObjectBatch b = DecodeDra(Dra("resourceslice-a100-mig-node.json"));
  const DraDevice& d = b.resource_slices[0].devices[0];
  auto eval = [&](const std::string& expr, absl::string_view driver = "gpu.nvidia.com") {
    absl::StatusOr<DraSelector> s = DraSelector::Parse(expr);
    EXPECT_TRUE(s.ok()) << s.status();
    return s->Evaluate(driver, d, nullptr);
  };
  using M = DraSelector::Match;
  const std::string attr = "device.attributes['gpu.nvidia.com']";
  EXPECT_EQ(eval(attr + ".productName.matches('^NVIDIA[ -]A100')"), M::kYes);
  EXPECT_EQ(eval(attr + ".productName.matches('A100[ -]SXM4')"), M::kYes);  // unanchored
  EXPECT_EQ(eval(attr + ".productName.matches('^A100')"), M::kNo);
  EXPECT_EQ(eval(attr + ".profile == '2g.10gb'"), M::kNo);
  // A missing attribute is an error, a non-string one too; false wins over an error.
  std::string error;
  absl::StatusOr<DraSelector> s = DraSelector::Parse(attr + ".index == '0'");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->Evaluate("gpu.nvidia.com", d, &error), M::kError);
  EXPECT_EQ(error, "no such key: index");
  EXPECT_EQ(eval("device.attributes['resource.kubernetes.io'].numaNode == '3'"), M::kError);
  EXPECT_EQ(eval(attr + ".index == '0' && device.driver == 'x'"), M::kNo);
  EXPECT_EQ(eval("device.driver == 'gpu.nvidia.com'", "other.example.com"), M::kNo);
}

TEST(DraStateTest, AClassNotUnderstoodHasNoUnitsAndNoPrediction) {
  DraState state;
  Apply(state, Edit(Dra("deviceclass-mig-1g-extended.json"), ".profile == '1g.5gb'",
                    ".profile in ['1g.5gb']"));
  Apply(state, Dra("resourceslice-a100-mig-node.json"));
  DraNodeUnits units = state.UnitsOf(kClass, kNode);
  EXPECT_FALSE(units.understood);
  EXPECT_THAT(units.units, IsEmpty());
  ASSERT_EQ(units.problems.size(), 1u);
  EXPECT_THAT(units.problems[0], HasSubstr("not understood"));
  DraPrediction p = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
  EXPECT_EQ(p.kind, DraPrediction::kNoPrediction);
  EXPECT_THAT(p.reason, HasSubstr("not understood"));
}

TEST(DraStateTest, HoldersComeFromExtendedClaimsOwnersAndUserClaimsReservations) {
  DraState state = FactSheetNode();
  Apply(state, Dra("resourceclaimlist.json"));
  // A user claim reserved for two pods, and one reserved for none.
  std::string user = Edit(ClaimJson("shared", "gpu-0-mig-1g5gb-19-5"),
                          R"("annotations":{"resource.kubernetes.io/extended-resource-claim":"true"},)", "");
  user = Edit(user, R"("reservedFor":[)",
              R"("reservedFor":[{"resource":"pods","name":"second","uid":"uid-second"},)");
  Apply(state, user);
  std::string idle = Edit(ClaimJson("idle", "gpu-0-mig-1g5gb-19-1"),
                          R"("annotations":{"resource.kubernetes.io/extended-resource-claim":"true"},)", "");
  idle = Edit(idle, R"([{"resource":"pods","name":"idle","uid":"uid-idle"}])", "[]");
  Apply(state, idle);

  std::vector<DraHolder> holders = state.HoldersOn(kNode);
  std::vector<std::string> seen;
  for (const DraHolder& h : holders) {
    seen.push_back(absl::StrCat(h.device.device, " ", h.extended ? "ext " : "user ",
                                h.pod_name.empty() ? "-" : h.pod_name));
  }
  EXPECT_THAT(seen, ElementsAre("gpu-0-mig-1g5gb-19-3 ext cuda-infer-7d9f8b6c5-x2lqp",
                                "gpu-0-mig-1g5gb-19-0 ext cuda-infer-7d9f8b6c5-z9r4t",
                                "gpu-0-mig-1g5gb-19-1 user -",
                                "gpu-0-mig-1g5gb-19-5 user second",
                                "gpu-0-mig-1g5gb-19-5 user shared"));
  EXPECT_THAT(state.HoldersOn("gpu-node-b"), IsEmpty());
}

TEST(DraStateTest, PredictionReplaysTheFactSheetsFirstFit) {
  DraState state = FactSheetNode();
  DraPrediction first = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
  ASSERT_EQ(first.kind, DraPrediction::kDevices) << first.reason;
  EXPECT_THAT(DeviceNames(first.devices), ElementsAre("gpu-0-mig-1g5gb-19-3"));
  // The first pod's share consumed all SMs of -19-3 (no policy on them): the second pod gets
  // -19-0, as resourceclaimlist.json records.
  Apply(state, Dra("resourceclaim-extended-allocated.json"));
  DraPrediction second = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
  ASSERT_EQ(second.kind, DraPrediction::kDevices) << second.reason;
  DraObjectBatch list = DecodeDra(Dra("resourceclaimlist.json"));
  EXPECT_EQ(second.devices[0].device, list.resource_claims[1].results[0].device);
  Apply(state, Dra("resourceclaimlist.json"));
  EXPECT_THAT(DeviceNames(state.PredictExtendedResourcePick(kClass, kNode, 1, {}).devices),
              ElementsAre("gpu-0-mig-1g5gb-19-5"));
  // Two devices in one request meet the shareable -19-3 first: whether one request may take
  // two shares of it is not modelled, so no guess.
  DraPrediction two = state.PredictExtendedResourcePick(kClass, kNode, 2, {});
  EXPECT_EQ(two.kind, DraPrediction::kNoPrediction);
  EXPECT_THAT(two.reason, HasSubstr("shareable"));
}

TEST(DraStateTest, NoUnitIsPredictedTwice) {
  DraState state = FactSheetNode();
  std::set<std::string> given;
  for (int pod = 0; pod < 10; ++pod) {
    DraPrediction p = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
    if (p.kind == DraPrediction::kNoDevice) break;
    ASSERT_EQ(p.kind, DraPrediction::kDevices) << p.reason;
    ASSERT_EQ(p.devices.size(), 1u);
    EXPECT_TRUE(given.insert(p.devices[0].device).second) << p.devices[0].device;
    // Record what the allocator writes: shares list every capacity consumed in full or by
    // default (fact sheet §3).
    const std::string consumed =
        p.devices[0].device == "gpu-0-mig-1g5gb-19-3"
            ? R"({"copyEngines":"1","decoders":"0","encoders":"0","jpegEngines":"0","memory":"0",)"
              R"("memorySlice3":"1","multiprocessors":"14","ofaEngines":"0","shares":"1"})"
            : "";
    Apply(state, ClaimJson(absl::StrCat("pod", pod), p.devices[0].device, consumed));
  }
  EXPECT_EQ(given.size(), 7u);
  EXPECT_EQ(state.PredictExtendedResourcePick(kClass, kNode, 1, {}).kind, DraPrediction::kNoDevice);
}

TEST(DraStateTest, ASharedDeviceWithPoliciesOnlyTakesSharesUntilFull) {
  // Only `shares` (policy default 1 of 4) and `memory` (default 0): four shares fit.
  DraState state;
  Apply(state, Dra("deviceclass-mig-1g-extended.json"));
  DraObjectBatch b = DecodeDra(Dra("resourceslice-a100-mig-node.json"));
  DraDevice& d = b.resource_slices[0].devices[0];
  for (auto it = d.capacity.begin(); it != d.capacity.end();) {
    it = it->second.has_policy ? std::next(it) : d.capacity.erase(it);
  }
  state.UpsertResourceSlice(b.resource_slices[0]);
  for (int i = 0; i < 4; ++i) {
    DraPrediction p = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
    ASSERT_EQ(p.kind, DraPrediction::kDevices);
    EXPECT_EQ(p.devices[0].device, "gpu-0-mig-1g5gb-19-3") << "share " << i;
    Apply(state, ClaimJson(absl::StrCat("p", i), "gpu-0-mig-1g5gb-19-3",
                           R"({"memory":"0","shares":"1"})"));
  }
  EXPECT_EQ(state.PredictExtendedResourcePick(kClass, kNode, 1, {}).devices[0].device,
            "gpu-0-mig-1g5gb-19-0");
}

TEST(DraStateTest, AShareOfUnknownSizeStopsThePredictionRatherThanDoubleBooking) {
  DraState state = FactSheetNode();
  // -19-3 is shared; this claim holds it without saying what it consumed.
  Apply(state, ClaimJson("unmetered", "gpu-0-mig-1g5gb-19-3"));
  DraPrediction p = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
  EXPECT_EQ(p.kind, DraPrediction::kNoPrediction);
  EXPECT_THAT(p.reason, HasSubstr("lists no consumed capacity"));
  EXPECT_THAT(p.devices, IsEmpty());
}

TEST(DraStateTest, TaintedDevicesAreSkippedAndUnsortedWalksAcrossSlicesAreNotPredicted) {
  DraState state;
  Apply(state, Dra("deviceclass-mig-1g-extended.json"));
  DraObjectBatch b = DecodeDra(Dra("resourceslice-a100-mig-node.json"));
  DraResourceSlice a = b.resource_slices[0];
  a.devices[0].taints.push_back({"gpu.nvidia.com/unhealthy", "", "NoSchedule"});
  a.devices.resize(2);
  a.resource_slice_count = 2;
  DraResourceSlice z = b.resource_slices[0];
  z.name = "aaaaa-first-by-name";
  z.devices.erase(z.devices.begin(), z.devices.begin() + 2);
  z.resource_slice_count = 2;
  state.UpsertResourceSlice(a);
  state.UpsertResourceSlice(z);
  // Slices by name: "00000-..." (19-3, 19-0) before "aaaaa-..." (19-5, ...).
  DraPrediction sorted = state.PredictExtendedResourcePick(kClass, kNode, 1, {});
  ASSERT_EQ(sorted.kind, DraPrediction::kDevices) << sorted.reason;
  EXPECT_EQ(sorted.devices[0].device, "gpu-0-mig-1g5gb-19-0");  // 19-3 is tainted
  DraPredictOptions map_order;
  map_order.sorted_walk = false;
  // In map order either slice may come first: no prediction, even for one device.
  DraPrediction unsorted = state.PredictExtendedResourcePick(kClass, kNode, 1, map_order);
  EXPECT_EQ(unsorted.kind, DraPrediction::kNoPrediction);
  EXPECT_THAT(unsorted.reason, HasSubstr("several slices"));
  EXPECT_THAT(DeviceNames(state.PredictExtendedResourcePick(kClass, kNode, 3, {}).devices),
              ElementsAre("gpu-0-mig-1g5gb-19-0", "gpu-0-mig-1g5gb-19-5", "gpu-0-mig-1g5gb-19-1"));
  // Within one slice the array order holds for every allocator.
  state.RemoveResourceSlice(z.name);
  a.resource_slice_count = 1;
  state.UpsertResourceSlice(a);
  EXPECT_THAT(DeviceNames(state.PredictExtendedResourcePick(kClass, kNode, 1, map_order).devices),
              ElementsAre("gpu-0-mig-1g5gb-19-0"));
}

TEST(DraStateTest, BindVerificationChecksNodeAndDevice) {
  DraState state = FactSheetNode();
  Apply(state, Dra("resourceclaimlist.json"));
  const std::string key = "ml-team/cuda-infer-7d9f8b6c5-x2lqp-extended-resources-k7m2q";
  EXPECT_TRUE(state.VerifyAllocation(key, kNode).ok());
  absl::Status other = state.VerifyAllocation(key, "gpu-node-b");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("allocated on gpu-node-a, not gpu-node-b"));
  Apply(state, ClaimJson("bogus", "gpu-0-mig-2g10gb-14-0"));
  EXPECT_THAT(state.VerifyAllocation("ml-team/bogus-extended-resources-x", kNode).message(),
              HasSubstr("is no device of class mig-1g-5gb.nvidia.com on node gpu-node-a"));
  EXPECT_FALSE(state.VerifyAllocation("ml-team/absent", kNode).ok());
}

// `catalog render --what=device-classes` as JSON objects (the YAML stream converted).
std::vector<std::string> RenderedClassesAsJson(const Catalog& catalog) {
  std::vector<std::string> out;
  for (const YAML::Node& doc : YAML::LoadAll(RenderCatalog(catalog, RenderTarget::kDeviceClasses))) {
    rapidjson::Document json;
    std::function<void(const YAML::Node&, rapidjson::Value&)> convert =
        [&](const YAML::Node& n, rapidjson::Value& v) {
          if (n.IsMap()) {
            v.SetObject();
            for (const auto& kv : n) {
              rapidjson::Value child;
              convert(kv.second, child);
              v.AddMember(rapidjson::Value(kv.first.as<std::string>().c_str(), json.GetAllocator()),
                          child, json.GetAllocator());
            }
          } else if (n.IsSequence()) {
            v.SetArray();
            for (const auto& item : n) {
              rapidjson::Value child;
              convert(item, child);
              v.PushBack(child, json.GetAllocator());
            }
          } else {
            v.SetString(n.as<std::string>().c_str(), json.GetAllocator());
          }
        };
    convert(doc, json);
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    json.Accept(w);
    out.emplace_back(buf.GetString(), buf.GetSize());
  }
  return out;
}

TEST(DraStateTest, RenderedDeviceClassesDecodeAreUnderstoodAndShowNoDrift) {
  const Catalog& catalog = Catalog::BuiltIn();
  DraState state;
  const std::vector<std::string> classes = RenderedClassesAsJson(catalog);
  ASSERT_FALSE(classes.empty());
  for (const std::string& json : classes) {
    absl::StatusOr<DraObjectBatch> b = DecodeDraObjects(json);
    ASSERT_TRUE(b.ok()) << b.status() << "\n" << json;
    ASSERT_EQ(b->device_classes.size(), 1u);
    // The node label DRA-capable nodes carry, named by every class (ADR-0023).
    EXPECT_EQ(absl::StrCat(b->device_classes[0].node_label_key, "=", b->device_classes[0].node_label_value),
              kDefaultDraNodeLabel);
    EXPECT_EQ(b->device_classes[0].node_label_problem, "");
    for (const std::string& cel : b->device_classes[0].cel_selectors) {
      EXPECT_TRUE(DraSelector::Parse(cel).ok()) << cel;
    }
    state.UpsertDeviceClass(b->device_classes[0]);
  }
  EXPECT_THAT(state.Drift(catalog), IsEmpty());
  // The rendered MIG 1g.5gb class selects the fact sheet's devices.
  Apply(state, Dra("resourceslice-a100-mig-node.json"));
  EXPECT_EQ(state.UnitsOf(catalog.Find(kMig)->device_class, kNode).units.size(), 7u);
  EXPECT_THAT(state.UnitsOf(catalog.Find("nvidia.com/mig-2g.10gb")->device_class, kNode).units,
              IsEmpty());

  // An edited class is drift, named by resource, class and term.
  DraDeviceClass edited = *state.DeviceClass(catalog.Find(kMig)->device_class);
  const size_t at = edited.cel_selectors[0].find("'1g.5gb'");
  ASSERT_NE(at, std::string::npos);
  edited.cel_selectors[0].replace(at, 8, "'2g.10gb'");
  state.UpsertDeviceClass(edited);
  EXPECT_THAT(state.Drift(catalog),
              ElementsAre(absl::StrCat(kMig, ": DeviceClass \"", edited.name,
                                       "\" selectors differ; lacks profile == '1g.5gb'; adds "
                                       "profile == '2g.10gb'")));
}

TEST(DraStateTest, TheFactSheetsClassNameIsTheBuiltInCatalogs) {
  // The fact sheet's admin class is "mig-1g-5gb.nvidia.com" (the NVIDIA demo's form: the
  // profile's dot becomes a dash); the built-in catalog names its MIG classes the same way.
  EXPECT_EQ(Catalog::BuiltIn().Find(kMig)->device_class, kClass);
  DraState state = FactSheetNode();
  for (const std::string& line : state.Drift(Catalog::BuiltIn())) {
    EXPECT_THAT(line, ::testing::Not(HasSubstr(absl::StrCat("DeviceClass \"", kClass, "\" not found"))));
    EXPECT_THAT(line, ::testing::Not(HasSubstr("serves the name instead")));
  }
}

}  // namespace
}  // namespace gse
