// The test peers of DRA mode: the local API server's resource.k8s.io/v1 endpoints (lists,
// watches, 410s, in the wire format of its core resources) and the test allocator
// (testsupport/dra_allocator.h) that plays kube-scheduler's part, checked against the fact
// sheet's recorded allocation and against the model's prediction (state/dra_state.h).
#include <httplib.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/dra_objects.h"
#include "state/dra_state.h"
#include "state/json_reader.h"
#include "testsupport/dra_allocator.h"
#include "testsupport/fake_apiserver.h"
#include "testsupport/paths.h"
#include "tests/testing/dra_fixtures.h"

namespace gse::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kNode[] = "gpu-node-a";
constexpr char kMig[] = "nvidia.com/mig-1g.5gb";
constexpr char kV1[] = "/apis/resource.k8s.io/v1";

// A DRA node: no device plugin, so no allocatable for the MIG name.
constexpr char kDraNode[] =
    R"({"kind":"Node","apiVersion":"v1","metadata":{"name":"gpu-node-a"},)"
    R"("status":{"allocatable":{"cpu":"127500m","pods":"110"}}})";

class DraApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    ASSERT_TRUE(fake_.Apply("nodes", kDraNode).ok());
    ASSERT_TRUE(fake_.Apply("deviceclasses", Dra("deviceclass-mig-1g-extended.json")).ok());
    ASSERT_TRUE(fake_.Apply("resourceslices", Dra("resourceslice-a100-mig-node.json")).ok());
  }

  std::unique_ptr<httplib::Client> Client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", fake_.port());
    c->set_bearer_token_auth("test-token");
    c->set_read_timeout(10, 0);
    return c;
  }

  // Everything a watch from `rv` sends within a second.
  std::vector<std::string> WatchLines(const std::string& resource, const std::string& rv) const {
    std::string body;
    Client()->Get(absl::StrCat(kV1, "/", resource, "?watch=1&resourceVersion=", rv,
                               "&timeoutSeconds=1").c_str(),
                  [&](const char* data, size_t n) {
                    body.append(data, n);
                    return true;
                  });
    return absl::StrSplit(body, '\n', absl::SkipEmpty());
  }

  void AddPod(const std::string& name) {
    PodSpec pod;
    pod.namespace_name = "ml-team";
    pod.name = name;
    pod.uid = "uid-" + name;
    pod.requests = {{kMig, "1"}};
    ASSERT_TRUE(fake_.Apply("pods", PodJson(pod)).ok());
  }

  // The model built from what the server stores, as the reflector would mirror it.
  DraState Mirror() const {
    DraState state;
    for (const char* resource : {"deviceclasses", "resourceslices", "resourceclaims"}) {
      for (const std::string& object : fake_.Objects(resource)) {
        absl::StatusOr<DraObjectBatch> b = DecodeDraObjects(object);
        EXPECT_TRUE(b.ok()) << b.status();
        if (!b.ok()) continue;
        for (auto& c : b->device_classes) state.UpsertDeviceClass(std::move(c));
        for (auto& s : b->resource_slices) state.UpsertResourceSlice(std::move(s));
        for (auto& c : b->resource_claims) state.UpsertResourceClaim(std::move(c));
      }
    }
    return state;
  }

  FakeApiServer fake_;
};

TEST_F(DraApiServerTest, ListsCarryTheListKindAndItemsDecode) {
  ASSERT_TRUE(fake_.Apply("resourceclaims", Dra("resourceclaimlist.json")).ok());
  for (const char* resource : {"deviceclasses", "resourceslices", "resourceclaims"}) {
    httplib::Result r = Client()->Get(absl::StrCat(kV1, "/", resource).c_str());
    ASSERT_TRUE(r) << resource;
    ASSERT_EQ(r->status, 200) << r->body;
    rapidjson::Document doc;
    ASSERT_TRUE(ParseJsonLimited(r->body, doc).ok());
    EXPECT_EQ(std::string(doc["apiVersion"].GetString()), "resource.k8s.io/v1");
    EXPECT_FALSE(std::string(doc["metadata"]["resourceVersion"].GetString()).empty());
    absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(r->body);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(batch->device_classes.size() + batch->resource_slices.size() +
                  batch->resource_claims.size(),
              std::string(resource) == "resourceclaims" ? 2u : 1u);
  }
  // One object, with kind, at its own path; cluster-scoped kinds are not under /api/v1.
  httplib::Result claim = Client()->Get(absl::StrCat(
      kV1, "/namespaces/ml-team/resourceclaims/cuda-infer-7d9f8b6c5-z9r4t-extended-resources-p2w8d").c_str());
  ASSERT_TRUE(claim);
  EXPECT_EQ(claim->status, 200);
  EXPECT_THAT(claim->body, HasSubstr(R"("kind":"ResourceClaim")"));
  EXPECT_EQ(Client()->Get("/api/v1/deviceclasses")->status, 404);
  EXPECT_EQ(Client()->Get(absl::StrCat(kV1, "/deviceclasses/absent").c_str())->status, 404);
}

TEST_F(DraApiServerTest, WatchesSendDecodableEventsAndTooOldVersionsGet410) {
  const std::string rv = fake_.resource_version();
  ASSERT_TRUE(fake_.Apply("resourceclaims", Dra("resourceclaim-extended-allocated.json")).ok());
  std::vector<std::string> lines = WatchLines("resourceclaims", rv);
  ASSERT_EQ(lines.size(), 1u);
  rapidjson::Document doc;
  std::string type;
  absl::StatusOr<const rapidjson::Value*> object = [&]() -> absl::StatusOr<const rapidjson::Value*> {
    if (absl::Status s = ParseJsonLimited(lines[0], doc); !s.ok()) return s;
    type = doc["type"].GetString();
    return &doc["object"];
  }();
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(type, "ADDED");
  absl::StatusOr<DraResourceClaim> claim = DecodeResourceClaim(**object, "object");
  ASSERT_TRUE(claim.ok()) << claim.status();
  EXPECT_EQ(claim->results[0].device, "gpu-0-mig-1g5gb-19-3");
  // A slice watch does not see claims.
  EXPECT_TRUE(WatchLines("resourceslices", fake_.resource_version()).empty());

  fake_.Compact();
  const std::string recorded_watch = ReadFileOrDie(
      SharedPath("protocol/kube-api-1.26/watch-too-old-resourceversion.jsonl"));
  lines = WatchLines("resourceslices", rv);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], absl::StripAsciiWhitespace(recorded_watch));
  httplib::Result list = Client()->Get(
      absl::StrCat(kV1, "/resourceclaims?resourceVersion=", rv, "&resourceVersionMatch=Exact").c_str());
  ASSERT_TRUE(list);
  EXPECT_EQ(list->status, 410);
  rapidjson::Document got, want;
  ASSERT_TRUE(ParseJsonLimited(list->body, got).ok());
  ASSERT_TRUE(ParseJsonLimited(
      ReadFileOrDie(SharedPath("protocol/kube-api-1.26/list-too-old-resourceversion-410.json")), want).ok());
  EXPECT_TRUE(got == want) << list->body;
}

TEST_F(DraApiServerTest, TheAllocatorReproducesTheFactSheetsClaimInPreBindOrder) {
  AddPod("cuda-infer-7d9f8b6c5-x2lqp");
  const std::string rv = fake_.resource_version();
  DraTestAllocator allocator(fake_);
  absl::StatusOr<DraTestAllocator::Outcome> out =
      allocator.AllocateAndPreBind("ml-team", "cuda-infer-7d9f8b6c5-x2lqp", kNode);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->picks.size(), 1u);
  // Sorted request keys cpu, memory, nvidia.com/mig-1g.5gb: request index 2 (fact sheet §7).
  EXPECT_EQ(out->picks[0].request, "container-0-request-2");
  EXPECT_EQ(out->picks[0].device, "gpu-0-mig-1g5gb-19-3");
  EXPECT_FALSE(out->picks[0].share_id.empty());
  EXPECT_THAT(out->claim_name, ::testing::StartsWith("cuda-infer-7d9f8b6c5-x2lqp-extended-resources-"));
  EXPECT_EQ(out->claim_name.size(), std::string("cuda-infer-7d9f8b6c5-x2lqp-extended-resources-").size() + 5);

  // Claim: ADDED, finalizer, status; in that order.
  std::vector<std::string> lines = WatchLines("resourceclaims", rv);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], HasSubstr(R"("type":"ADDED")"));
  EXPECT_THAT(lines[0], ::testing::Not(HasSubstr("finalizers")));
  EXPECT_THAT(lines[1], HasSubstr(R"("finalizers":["resource.kubernetes.io/delete-protection"])"));
  EXPECT_THAT(lines[1], ::testing::Not(HasSubstr(R"("allocation":)")));
  EXPECT_THAT(lines[2], HasSubstr(R"("type":"MODIFIED")"));
  EXPECT_THAT(lines[2], HasSubstr(R"("allocation":)"));
  EXPECT_THAT(lines[2], HasSubstr(R"("reservedFor":)"));

  // What was written decodes to what the fact sheet recorded for this pod.
  std::optional<std::string> written = fake_.Get("resourceclaims", "ml-team", out->claim_name);
  ASSERT_TRUE(written.has_value());
  absl::StatusOr<DraObjectBatch> mine = DecodeDraObjects(*written);
  absl::StatusOr<DraObjectBatch> recorded = DecodeDraObjects(Dra("resourceclaim-extended-allocated.json"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE(recorded.ok());
  const DraResourceClaim& m = mine->resource_claims[0];
  const DraResourceClaim& r = recorded->resource_claims[0];
  EXPECT_TRUE(m.IsExtendedResourceClaim());
  EXPECT_EQ(m.owner_pod_uid, "uid-cuda-infer-7d9f8b6c5-x2lqp");
  EXPECT_EQ(m.requests[0].name, r.requests[0].name);
  EXPECT_EQ(m.requests[0].device_class_name, r.requests[0].device_class_name);
  EXPECT_EQ(m.results[0].device, r.results[0].device);
  EXPECT_EQ(m.results[0].consumed_capacity_milli, r.results[0].consumed_capacity_milli);
  EXPECT_EQ(m.allocation_node, kNode);
  ASSERT_EQ(m.reserved_for.size(), 1u);
  EXPECT_EQ(m.reserved_for[0].uid, m.owner_pod_uid);

  // The pod's extendedResourceClaimStatus names the claim and maps the container.
  rapidjson::Document pod;
  ASSERT_TRUE(ParseJsonLimited(*fake_.Get("pods", "ml-team", "cuda-infer-7d9f8b6c5-x2lqp"), pod).ok());
  auto status = DecodeExtendedResourceClaimStatus(pod, "Pod");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->has_value());
  EXPECT_EQ((*status)->resource_claim_name, out->claim_name);
  ASSERT_EQ((*status)->request_mappings.size(), 1u);
  EXPECT_EQ((*status)->request_mappings[0].container_name, "infer");
  EXPECT_EQ((*status)->request_mappings[0].resource_name, kMig);
  EXPECT_EQ((*status)->request_mappings[0].request_name, "container-0-request-2");

  // The model verifies the allocation at bind.
  DraState state = Mirror();
  EXPECT_TRUE(state.VerifyAllocation(absl::StrCat("ml-team/", out->claim_name), kNode).ok());
}

TEST_F(DraApiServerTest, TheModelPredictsEveryPickAndNoUnitIsHandedOutTwice) {
  DraTestAllocator allocator(fake_);
  std::set<std::string> devices;
  int allocated = 0;
  for (int i = 0; i < 9; ++i) {
    const std::string pod = absl::StrCat("p", i);
    AddPod(pod);
    const DraPrediction predicted = Mirror().PredictExtendedResourcePick(
        "mig-1g-5gb.nvidia.com", kNode, 1, {});
    absl::StatusOr<DraTestAllocator::Outcome> out = allocator.AllocateAndPreBind("ml-team", pod, kNode);
    if (!out.ok()) {
      EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
      EXPECT_EQ(predicted.kind, DraPrediction::kNoDevice) << predicted.reason;
      continue;
    }
    ++allocated;
    ASSERT_EQ(predicted.kind, DraPrediction::kDevices) << predicted.reason;
    EXPECT_EQ(predicted.devices[0].device, out->picks[0].device) << pod;
    EXPECT_TRUE(devices.insert(out->picks[0].device).second) << out->picks[0].device;
  }
  EXPECT_EQ(allocated, 7);
  EXPECT_EQ(Mirror().HoldersOn(kNode).size(), 7u);
}

TEST_F(DraApiServerTest, ADevicePluginNodeGetsNoClaim) {
  ASSERT_TRUE(fake_.Apply("nodes", R"({"kind":"Node","metadata":{"name":"gpu-node-a"},)"
                                   R"("status":{"allocatable":{"nvidia.com/mig-1g.5gb":"7"}}})").ok());
  AddPod("plugin-pod");
  DraTestAllocator allocator(fake_);
  absl::StatusOr<DraTestAllocator::Outcome> out = allocator.AllocateAndPreBind("ml-team", "plugin-pod", kNode);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->picks.empty());
  EXPECT_TRUE(fake_.Objects("resourceclaims").empty());
}

TEST_F(DraApiServerTest, SelectorsThePeersDoNotUnderstandAreRefusedByBoth) {
  std::string cls = Dra("deviceclass-mig-1g-extended.json");
  const std::string from = ".profile == '1g.5gb'";
  cls.replace(cls.find(from), from.size(), ".profile in ['1g.5gb']");
  ASSERT_TRUE(fake_.Apply("deviceclasses", cls).ok());
  AddPod("x");
  DraTestAllocator allocator(fake_);
  absl::StatusOr<DraTestAllocator::Outcome> out = allocator.Plan("ml-team", "x", kNode);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Mirror().PredictExtendedResourcePick("mig-1g-5gb.nvidia.com", kNode, 1, {}).kind,
            DraPrediction::kNoPrediction);
  EXPECT_TRUE(fake_.Objects("resourceclaims").empty());
}

}  // namespace
}  // namespace gse::testing
