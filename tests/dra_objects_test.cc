// Decoding of resource.k8s.io/v1 objects (state/dra_objects.h) from the DRA fact sheet's
// example objects (shared/protocol/dra/) and from malformed, oversized and hostile documents.
#include "state/dra_objects.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/json_reader.h"
#include "tests/testing/dra_fixtures.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using testing::Dra;
using testing::Edit;

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The status message of decoding `json` (a single object or list), "" when it decodes.
std::string DecodeError(const std::string& json) {
  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(json);
  return batch.ok() ? "" : std::string(batch.status().message());
}

TEST(DraObjectsTest, DecodesTheFactSheetDeviceClass) {
  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(Dra("deviceclass-mig-1g-extended.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->device_classes.size(), 1u);
  const DraDeviceClass& c = batch->device_classes[0];
  EXPECT_EQ(c.name, "mig-1g-5gb.nvidia.com");
  EXPECT_EQ(c.extended_resource_name, "nvidia.com/mig-1g.5gb");
  EXPECT_EQ(c.creation_timestamp, "2026-11-20T08:00:00Z");
  EXPECT_EQ(c.resource_version, "470011");
  ASSERT_EQ(c.cel_selectors.size(), 1u);
  EXPECT_THAT(c.cel_selectors[0], HasSubstr(".profile == '1g.5gb'"));
  EXPECT_EQ(c.other_selectors, 0);
}

// The node label a rendered class names (gpu.themelio.io/dra-node-label) is read leniently:
// a bad value is reported by field and reason, and the class keeps its name mapping.
TEST(DraObjectsTest, TheClassesNodeLabelAnnotationIsReadLeniently) {
  auto decode = [](const std::string& annotations) {
    const std::string json = absl::StrCat(
        R"({"apiVersion":"resource.k8s.io/v1","kind":"DeviceClass","metadata":{"name":"c",)",
        annotations.empty() ? "" : absl::StrCat(R"("annotations":)", annotations, ","),
        R"("uid":"u"},"spec":{"extendedResourceName":"nvidia.com/gpu"}})");
    absl::StatusOr<DraObjectBatch> b = DecodeDraObjects(json);
    EXPECT_TRUE(b.ok()) << b.status() << json;
    return b.ok() ? b->device_classes.at(0) : DraDeviceClass{};
  };
  DraDeviceClass c = decode(R"({"gpu.themelio.io/dra-node-label":"nvidia.com/dra-kubelet-plugin=true"})");
  EXPECT_EQ(c.node_label_key, "nvidia.com/dra-kubelet-plugin");
  EXPECT_EQ(c.node_label_value, "true");
  EXPECT_EQ(c.node_label_problem, "");
  c = decode("");
  EXPECT_EQ(c.node_label_key, "");
  EXPECT_EQ(c.node_label_problem, "");
  EXPECT_EQ(decode(R"({"gpu.themelio.io/dra-node-label":"example.com/empty="})").node_label_value, "");
  const std::pair<std::string, std::string> bad[] = {
      {R"(7)", "not a string"},
      {R"("nvidia.com/dra-kubelet-plugin")", "must be <label key>=<value>"},
      {R"("=true")", "label key must not be empty"},
      {R"("Bad_Prefix/x=true")", "label key prefix part must be a lowercase DNS subdomain"},
      {R"("nvidia.com/x=not valid")", "label value must consist of letters"},
      {absl::StrCat("\"nvidia.com/x=", std::string(64, 'a'), "\""), "label value must be at most 63"},
  };
  for (const auto& [value, why] : bad) {
    c = decode(absl::StrCat(R"({"gpu.themelio.io/dra-node-label":)", value, "}"));
    EXPECT_THAT(c.node_label_problem,
                HasSubstr(absl::StrCat(R"(metadata.annotations["gpu.themelio.io/dra-node-label"]: )", why)))
        << value;
    EXPECT_EQ(c.node_label_key, "") << value;
    EXPECT_EQ(c.extended_resource_name, "nvidia.com/gpu") << "the class keeps its name: " << value;
  }
}

TEST(DraObjectsTest, DecodesTheFactSheetSliceInArrayOrderWithQualifiedAttributes) {
  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(Dra("resourceslice-a100-mig-node.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->resource_slices.size(), 1u);
  const DraResourceSlice& s = batch->resource_slices[0];
  EXPECT_EQ(s.name, "00000-gpu.nvidia.com-gpu-node-a-9xk2p");
  EXPECT_EQ(s.driver, "gpu.nvidia.com");
  EXPECT_EQ(s.pool_name, "gpu-node-a");
  EXPECT_EQ(s.pool_generation, 1);
  EXPECT_EQ(s.resource_slice_count, 1);
  EXPECT_EQ(s.node_name, "gpu-node-a");
  std::vector<std::string> names;
  for (const DraDevice& d : s.devices) names.push_back(d.name);
  // Array order is the allocator's walk order (fact sheet §3): kept as sent, not sorted.
  EXPECT_THAT(names, ElementsAre("gpu-0-mig-1g5gb-19-3", "gpu-0-mig-1g5gb-19-0",
                                 "gpu-0-mig-1g5gb-19-5", "gpu-0-mig-1g5gb-19-1",
                                 "gpu-0-mig-1g5gb-19-6", "gpu-0-mig-1g5gb-19-2",
                                 "gpu-0-mig-1g5gb-19-4"));
  const DraDevice& first = s.devices[0];
  EXPECT_TRUE(first.allow_multiple_allocations);
  EXPECT_FALSE(s.devices[1].allow_multiple_allocations);
  const DraAttribute* uuid = first.Attribute("gpu.nvidia.com", "uuid");
  ASSERT_NE(uuid, nullptr);
  EXPECT_EQ(uuid->kind, DraAttribute::kString);
  EXPECT_EQ(uuid->text, "MIG-3f7b2d4e-0c58-5a6d-89b1-4d5c6f7a8b93");
  const DraAttribute* numa = first.Attribute("resource.kubernetes.io", "numaNode");
  ASSERT_NE(numa, nullptr);
  EXPECT_EQ(numa->kind, DraAttribute::kInt);
  EXPECT_EQ(numa->int_value, 3);
  EXPECT_EQ(first.Attribute("gpu.nvidia.com", "driverVersion")->kind, DraAttribute::kVersion);
  const DraCapacity& memory = first.capacity.at("memory");
  EXPECT_EQ(memory.value_milli, int64_t{4864} * 1024 * 1024 * 1000);
  EXPECT_TRUE(memory.has_policy);
  EXPECT_EQ(memory.default_milli, 0);
  EXPECT_EQ(memory.range_step_milli, int64_t{1024} * 1024 * 1000);
  EXPECT_FALSE(first.capacity.at("multiprocessors").has_policy);
  EXPECT_EQ(first.capacity.at("shares").value_milli, 4000);
}

TEST(DraObjectsTest, DecodesTheAllocatedExtendedResourceClaim) {
  absl::StatusOr<DraObjectBatch> batch =
      DecodeDraObjects(Dra("resourceclaim-extended-allocated.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->resource_claims.size(), 1u);
  const DraResourceClaim& c = batch->resource_claims[0];
  EXPECT_EQ(c.Key(), "ml-team/cuda-infer-7d9f8b6c5-x2lqp-extended-resources-k7m2q");
  EXPECT_TRUE(c.IsExtendedResourceClaim());
  EXPECT_EQ(c.owner_pod_name, "cuda-infer-7d9f8b6c5-x2lqp");
  EXPECT_EQ(c.owner_pod_uid, "6f0c3a8e-2b1d-4c6e-9a57-0d2f4b8e1c11");
  ASSERT_EQ(c.requests.size(), 1u);
  EXPECT_EQ(c.requests[0].name, "container-0-request-2");
  EXPECT_EQ(c.requests[0].device_class_name, "mig-1g-5gb.nvidia.com");
  EXPECT_EQ(c.requests[0].count, 1);
  ASSERT_TRUE(c.allocated);
  ASSERT_EQ(c.results.size(), 1u);
  EXPECT_EQ(c.results[0].device, "gpu-0-mig-1g5gb-19-3");
  EXPECT_EQ(c.results[0].pool, "gpu-node-a");
  EXPECT_EQ(c.results[0].share_id, "2c8f6a4e-9b1d-4e3f-8a5c-7d0e2b4f6a19");
  EXPECT_EQ(c.results[0].consumed_capacity_milli.at("multiprocessors"), 14000);
  EXPECT_EQ(c.allocation_node, "gpu-node-a");
  ASSERT_EQ(c.reserved_for.size(), 1u);
  EXPECT_EQ(c.reserved_for[0].resource, "pods");
  EXPECT_EQ(c.reserved_for[0].uid, c.owner_pod_uid);
}

TEST(DraObjectsTest, DecodesAListWhoseItemsLackKind) {
  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(Dra("resourceclaimlist.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->resource_claims.size(), 2u);
  EXPECT_EQ(batch->resource_claims[1].results[0].device, "gpu-0-mig-1g5gb-19-0");
  EXPECT_TRUE(batch->resource_claims[1].results[0].share_id.empty());
}

TEST(DraObjectsTest, DecodesEveryObjectOfTheWatchStream) {
  const std::string text = Dra("watch-events.jsonl");
  int lines = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    rapidjson::Document doc;
    ASSERT_TRUE(ParseJsonLimited(line, doc).ok());
    const rapidjson::Value& object = doc["object"];
    const std::string kind = object["kind"].GetString();
    if (kind == "ResourceSlice") {
      EXPECT_TRUE(DecodeResourceSlice(object, "object").ok());
    } else {
      absl::StatusOr<DraResourceClaim> claim = DecodeResourceClaim(object, "object");
      ASSERT_TRUE(claim.ok()) << claim.status();
    }
    ++lines;
  }
  EXPECT_EQ(lines, 4);
}

TEST(DraObjectsTest, DecodesThePodsExtendedResourceClaimStatus) {
  rapidjson::Document pod;
  ASSERT_TRUE(ParseJsonLimited(Dra("pod-with-extended-resource-claim-status.json"), pod).ok());
  auto status = DecodeExtendedResourceClaimStatus(pod, "Pod");
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->has_value());
  const DraExtendedResourceClaimStatus& s = **status;
  EXPECT_EQ(s.resource_claim_name, "cuda-infer-7d9f8b6c5-x2lqp-extended-resources-k7m2q");
  ASSERT_EQ(s.request_mappings.size(), 1u);
  EXPECT_EQ(s.request_mappings[0].container_name, "infer");
  EXPECT_EQ(s.request_mappings[0].resource_name, "nvidia.com/mig-1g.5gb");
  EXPECT_EQ(s.request_mappings[0].request_name, "container-0-request-2");

  // A pod before PreBind carries none.
  rapidjson::Document pending;
  ASSERT_TRUE(ParseJsonLimited(R"({"metadata":{"name":"p"},"status":{"phase":"Pending"}})",
                               pending).ok());
  auto none = DecodeExtendedResourceClaimStatus(pending, "Pod");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  rapidjson::Document bad;
  ASSERT_TRUE(ParseJsonLimited(
      R"({"status":{"extendedResourceClaimStatus":{"resourceClaimName":"c","requestMappings":[{"containerName":"a","resourceName":"x/y"}]}}})",
      bad).ok());
  auto err = DecodeExtendedResourceClaimStatus(bad, "Pod");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().message(),
            "Pod.status.extendedResourceClaimStatus.requestMappings[0].requestName: missing");
}

TEST(DraObjectsTest, MalformedSlicesNameTheFieldAndTheReason) {
  const std::string slice = Dra("resourceslice-a100-mig-node.json");
  struct Case {
    std::string from, to, error;
  };
  const std::vector<Case> cases = {
      {R"("driver": "gpu.nvidia.com")", R"("driver": "GPU/nvidia")",
       R"(ResourceSlice.spec.driver: "GPU/nvidia" contains '/')"},
      {R"("generation": 1,
      "resourceSliceCount")", R"("generation": "1",
      "resourceSliceCount")",
       "ResourceSlice.spec.pool.generation: expected an integer, got a string"},
      {R"("resourceSliceCount": 1)", R"("resourceSliceCount": 0)",
       "ResourceSlice.spec.pool.resourceSliceCount: must be at least 1"},
      {R"("nodeName": "gpu-node-a",)", R"("nodeName": "gpu-node-a", "allNodes": true,)",
       "ResourceSlice.spec: exactly one of nodeName, nodeSelector, allNodes, "
       "perDeviceNodeSelection must be set, got 2"},
      {R"("name": "gpu-0-mig-1g5gb-19-0")", R"("name": "gpu-0-mig-1g5gb-19-3")",
       R"(ResourceSlice.spec.devices[1].name: "gpu-0-mig-1g5gb-19-3" repeats a device of this slice)"},
      {R"("int": 3)", R"("int": 3, "string": "3")",
       R"(ResourceSlice.spec.devices[0].attributes["resource.kubernetes.io/numaNode"]: exactly )"
       "one of int, bool, string, version must be set, got 2 (list attributes are not supported)"},
      {R"("value": "14")", R"("value": "-14")",
       R"(ResourceSlice.spec.devices[0].capacity["multiprocessors"].value: "-14" is negative)"},
      {R"("allowMultipleAllocations": true)", R"("allowMultipleAllocations": false)",
       R"(ResourceSlice.spec.devices[0].capacity["memory"]: requestPolicy needs )"
       "allowMultipleAllocations: true"},
      {R"("apiVersion": "resource.k8s.io/v1")", R"("apiVersion": "resource.k8s.io/v1beta1")",
       R"(ResourceSlice.apiVersion: "resource.k8s.io/v1beta1" is not resource.k8s.io/v1 (older )"
       "versions have other shapes)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DecodeError(Edit(slice, c.from, c.to)), c.error) << c.to;
  }
}

TEST(DraObjectsTest, DuplicateKeysAreRefusedNotResolved) {
  EXPECT_EQ(DecodeError(R"({"kind":"DeviceClass","metadata":{"name":"a","name":"b"}})"),
            "DeviceClass.metadata.name: duplicate key");
  // "type" and "gpu.nvidia.com/type" are one attribute for this driver.
  const std::string slice = Dra("resourceslice-a100-mig-node.json");
  EXPECT_EQ(DecodeError(Edit(slice, R"("type": {)", R"("gpu.nvidia.com/type": {"string": "gpu"}, "type": {)")),
            R"(ResourceSlice.spec.devices[0].attributes["type"]: duplicate attribute)");
}

TEST(DraObjectsTest, OversizedInputsAreRefusedAtTheApiServersLimits) {
  std::string devices;
  for (int i = 0; i < 129; ++i) {
    absl::StrAppend(&devices, i ? "," : "", R"({"name":"d)", i, R"("})");
  }
  const std::string slice = absl::StrCat(
      R"({"kind":"ResourceSlice","metadata":{"name":"s"},"spec":{"driver":"d.example.com",)",
      R"("pool":{"name":"p","generation":0,"resourceSliceCount":1},"nodeName":"n","devices":[)",
      devices, "]}}");
  EXPECT_EQ(DecodeError(slice), "ResourceSlice.spec.devices: 129 devices, at most 128");

  const std::string long_cel(kDraMaxCelBytes + 1, 'x');
  EXPECT_EQ(DecodeError(absl::StrCat(R"({"kind":"DeviceClass","metadata":{"name":"c"},)",
                                     R"("spec":{"selectors":[{"cel":{"expression":")", long_cel,
                                     R"("}}]}})")),
            "DeviceClass.spec.selectors[0].cel.expression: 10241 bytes, at most 10240");

  std::string reserved;
  for (int i = 0; i < 257; ++i) {
    absl::StrAppend(&reserved, i ? "," : "", R"({"resource":"pods","name":"p","uid":"u)", i,
                    R"("})");
  }
  EXPECT_EQ(DecodeError(absl::StrCat(
                R"({"kind":"ResourceClaim","metadata":{"name":"c","namespace":"n"},)",
                R"("status":{"reservedFor":[)", reserved, "]}}")),
            "ResourceClaim.status.reservedFor: 257 consumers, at most 256");
  std::string attributes;
  for (int i = 0; i < 33; ++i) absl::StrAppend(&attributes, i ? "," : "", R"("a)", i, R"(":{"int":1})");
  EXPECT_EQ(DecodeError(absl::StrCat(
                R"({"kind":"ResourceSlice","metadata":{"name":"s"},"spec":{"driver":"d.example.com",)",
                R"("pool":{"name":"p","generation":0,"resourceSliceCount":1},"nodeName":"n",)",
                R"("devices":[{"name":"x","attributes":{)", attributes, "}}]}}")),
            "ResourceSlice.spec.devices[0]: 33 attributes and capacities, at most 32");
}

TEST(DraObjectsTest, MalformedClaimsNameTheFieldAndTheReason) {
  const std::string claim = Dra("resourceclaim-extended-allocated.json");
  struct Case {
    std::string from, to, error;
  };
  const std::vector<Case> cases = {
      {R"("namespace": "ml-team",)", "",
       "ResourceClaim.metadata.namespace: missing"},
      {R"("count": 1)", R"("count": 0)",
       "ResourceClaim.spec.devices.requests[0].exactly.count: 0 is outside 1..128"},
      {R"("allocationMode": "ExactCount")", R"("allocationMode": "Some")",
       R"(ResourceClaim.spec.devices.requests[0].exactly.allocationMode: "Some" is not ExactCount or All)"},
      {R"("device": "gpu-0-mig-1g5gb-19-3")", R"("device": 7)",
       "ResourceClaim.status.allocation.devices.results[0].device: expected a string, got a number"},
      {R"("multiprocessors": "14")", R"("multiprocessors": "14 SMs")",
       R"(ResourceClaim.status.allocation.devices.results[0].consumedCapacity["multiprocessors"]: )"},
      {R"("uid": "6f0c3a8e-2b1d-4c6e-9a57-0d2f4b8e1c11"
      }
    ])", R"("uid": ""
      }
    ])", "ResourceClaim.status.reservedFor[0].uid: empty"},
      {R"("controller": true)", R"("controller": "yes")",
       "ResourceClaim.metadata.ownerReferences[0].controller: expected a boolean, got a string"},
  };
  for (const Case& c : cases) {
    const std::string error = DecodeError(Edit(claim, c.from, c.to));
    EXPECT_THAT(error, ::testing::StartsWith(c.error)) << c.to;
    EXPECT_FALSE(error.empty());
  }
  // Without the controller flag the Pod is no owner: the claim is no extended-resource claim.
  absl::StatusOr<DraObjectBatch> batch =
      DecodeDraObjects(Edit(claim, R"("controller": true)", R"("controller": false)"));
  ASSERT_TRUE(batch.ok());
  EXPECT_FALSE(batch->resource_claims[0].IsExtendedResourceClaim());
}

TEST(DraObjectsTest, HostileDocumentsAreRefusedByTheStrictReader) {
  EXPECT_THAT(DecodeError("{\"kind\":\"DeviceClass\",\"metadata\":{\"name\":\"a\x01\"}}"),
              HasSubstr("invalid JSON"));
  EXPECT_THAT(DecodeError(std::string(100, '[') + std::string(100, ']')),
              HasSubstr("nested deeper"));
  EXPECT_EQ(DecodeError(R"({"kind":"DeviceClass","metadata":{"name":"a\u0000b"}})"),
            R"(DeviceClass.metadata.name: "a\000b" contains a control character)");
  EXPECT_EQ(DecodeError(R"({"kind":"List","items":[{"kind":"DeviceClassList"}]})"),
            R"(items[0].kind: "DeviceClassList" lists may not be nested)");
  // Other kinds are counted, not decoded.
  absl::StatusOr<DraObjectBatch> batch =
      DecodeDraObjects(R"({"kind":"List","items":[{"kind":"ResourceClaimTemplate"}]})");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->ignored_objects, 1);
}

TEST(DraObjectsTest, SelectorsOfAnotherKindAreCountedNotDropped) {
  absl::StatusOr<DraObjectBatch> batch = DecodeDraObjects(
      R"({"kind":"DeviceClass","metadata":{"name":"c"},"spec":{"selectors":[{"future":{}}]}})");
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->device_classes[0].other_selectors, 1);
  EXPECT_TRUE(batch->device_classes[0].cel_selectors.empty());
}

}  // namespace
}  // namespace gse
