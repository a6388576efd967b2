// Assignment annotations: what bind writes onto a pod and what a restarted mirror reads back.
#include "state/assignment.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

Catalog TestCatalog() {
  std::vector<Offering> v(3);
  v[0].resource = "nvidia.com/gpu";
  v[1].resource = "nvidia.com/mig-1g.5gb.shared";
  v[1].aliases = {"nvidia.com/mig-1g.5gb-ts"};
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "1g.5gb";
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 4;
  v[2].resource = "nvidia.com/gpu.mps";
  v[2].sharing = Sharing::kMps;
  v[2].replicas = 8;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return *std::move(c);
}

class AssignmentTest : public ::testing::Test {
 protected:
  absl::StatusOr<Assignment> Parse(const std::string& unit, absl::string_view node = "",
                                   const std::string* amount = nullptr) {
    std::map<std::string, std::string> ann{{std::string(kAnnotationUnit), unit}};
    if (amount != nullptr) ann[std::string(kAnnotationAmount)] = *amount;
    return ParseAssignmentAnnotations(ann, node, catalog_);
  }
  OfferingId Id(absl::string_view name) { return catalog_.Find(name)->id; }

  Catalog catalog_ = TestCatalog();
};

TEST_F(AssignmentTest, UnitIdJoinsNodeResourceIndex) {
  EXPECT_EQ(UnitId("mig-a", "nvidia.com/mig-1g.5gb.shared", 3), "mig-a/nvidia.com/mig-1g.5gb.shared/3");
}

TEST_F(AssignmentTest, AnnotationsNameUnitAmountSharingProfileAndProject) {
  Assignment a{"mig-a", Id("nvidia.com/mig-1g.5gb.shared"), {2}, 1};
  auto ann = AssignmentAnnotations(a, catalog_, "team-a");
  EXPECT_EQ(ann.at(std::string(kAnnotationUnit)), "mig-a/nvidia.com/mig-1g.5gb.shared/2");
  EXPECT_EQ(ann.at(std::string(kAnnotationAmount)), "1");
  EXPECT_EQ(ann.at(std::string(kAnnotationSharing)), "time-sliced");
  EXPECT_EQ(ann.at(std::string(kAnnotationMigProfile)), "1g.5gb");
  EXPECT_EQ(ann.at(std::string(kAnnotationProject)), "team-a");

  Assignment whole{"h100-1", Id("nvidia.com/gpu"), {2, 3}, 1};
  auto ann2 = AssignmentAnnotations(whole, catalog_, "p");
  EXPECT_EQ(ann2.at(std::string(kAnnotationUnit)), "h100-1/nvidia.com/gpu/2,3");
  EXPECT_EQ(ann2.at(std::string(kAnnotationSharing)), "exclusive");
  EXPECT_EQ(ann2.count(std::string(kAnnotationMigProfile)), 0u) << "whole GPUs have no profile";

  Assignment mps{"n", Id("nvidia.com/gpu.mps"), {0}, 3};
  EXPECT_EQ(AssignmentAnnotations(mps, catalog_, "p").at(std::string(kAnnotationAmount)), "3");
}

TEST_F(AssignmentTest, RoundTripsThroughAnnotations) {
  const std::vector<Assignment> cases = {
      {"mig-a", Id("nvidia.com/mig-1g.5gb.shared"), {0}, 1},
      {"h100-1", Id("nvidia.com/gpu"), {0, 1, 5, 9999}, 1},
      {"n.example.com", Id("nvidia.com/gpu.mps"), {7}, 8},
  };
  for (const Assignment& a : cases) {
    auto ann = AssignmentAnnotations(a, catalog_, "proj");
    absl::StatusOr<Assignment> back = ParseAssignmentAnnotations(ann, a.node, catalog_);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, a) << ann.at(std::string(kAnnotationUnit));
    // Without a pod node (pending pods, snapshots) the node comes from the annotation.
    back = ParseAssignmentAnnotations(ann, "", catalog_);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->node, a.node);
  }
}

TEST_F(AssignmentTest, MissingUnitAnnotationIsNotFound) {
  std::map<std::string, std::string> ann{{"other", "x"}, {std::string(kAnnotationAmount), "1"}};
  EXPECT_EQ(ParseAssignmentAnnotations(ann, "n", catalog_).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(AssignmentTest, AliasResolvesToCanonicalOffering) {
  auto a = Parse("n/nvidia.com/mig-1g.5gb-ts/1");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->offering, Id("nvidia.com/mig-1g.5gb.shared"));
  EXPECT_EQ(a->units, std::vector<int32_t>{1});
  EXPECT_EQ(a->amount_per_unit, 1) << "absent amount means one per unit";
}

TEST_F(AssignmentTest, NodeMustMatchSpecNodeName) {
  auto a = Parse("node-a/nvidia.com/gpu/0", "node-b");
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("gpu.themelio.io/unit"));
  EXPECT_THAT(a.status().message(), HasSubstr("node-b"));
  EXPECT_TRUE(Parse("node-a/nvidia.com/gpu/0", "node-a").ok());
}

TEST_F(AssignmentTest, HostileUnitValuesAreInvalidArgumentNamingTheAnnotation) {
  std::string ten_thousand = "n/nvidia.com/gpu/";
  for (int i = 0; i < 10000; ++i) absl::StrAppend(&ten_thousand, i == 0 ? "" : ",", i);
  std::vector<int> sixty_five(65);
  for (int i = 0; i < 65; ++i) sixty_five[i] = i;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "want <node>"},
      {"n", "want <node>"},
      {"n/0", "want <node>"},
      {"/nvidia.com/gpu/0", "node name is empty"},
      {"N/nvidia.com/gpu/0", "DNS subdomain"},
      {"n x/nvidia.com/gpu/0", "DNS subdomain"},
      {"-n/nvidia.com/gpu/0", "alphanumeric"},
      {std::string(254, 'a') + "/nvidia.com/gpu/0", "253"},
      {"n//0", "resource name is empty"},
      {"n/nvidia.com/gpu/", "no unit index"},
      {"n/nvidia.com/tpu/0", "not in the GPU catalog"},
      {"n/nvidia.com/gpu/01", "leading zero"},
      {"n/nvidia.com/gpu/-1", "leading zero"},
      {"n/nvidia.com/gpu/+1", "leading zero"},
      {"n/nvidia.com/gpu/ 1", "leading zero"},
      {"n/nvidia.com/gpu/1 ", "leading zero"},
      {"n/nvidia.com/gpu/10000", "0..9999"},
      {"n/nvidia.com/gpu/99999999999999999999999", "0..9999"},
      {"n/nvidia.com/gpu/1,,2", "0..9999"},
      {"n/nvidia.com/gpu/1,", "0..9999"},
      {"n/nvidia.com/gpu/0x1", "0..9999"},
      {"n/nvidia.com/gpu/2,1", "sorted and distinct"},
      {"n/nvidia.com/gpu/1,1", "sorted and distinct"},
      {"n/nvidia.com/gpu/" + absl::StrJoin(sixty_five, ","), "at most 64"},
      {ten_thousand, "at most 64"},
      {std::string("n/nvidia.com/gpu/0\0", 19), "0..9999"},
  };
  for (const auto& [value, reason] : cases) {
    auto a = Parse(value);
    ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << value.substr(0, 60);
    EXPECT_THAT(a.status().message(), HasSubstr("annotation gpu.themelio.io/unit")) << value.substr(0, 60);
    EXPECT_THAT(a.status().message(), HasSubstr(reason)) << value.substr(0, 60);
    EXPECT_LT(a.status().message().size(), 400u) << "hostile values are quoted truncated";
  }
  // 64 indices is the limit, not an error.
  std::vector<int> sixty_four(64);
  for (int i = 0; i < 64; ++i) sixty_four[i] = i;
  auto ok = Parse("n/nvidia.com/gpu/" + absl::StrJoin(sixty_four, ","));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->units.size(), 64u);
}

TEST_F(AssignmentTest, HostileAmountValuesAreInvalidArgumentNamingTheAnnotation) {
  for (const std::string amount :
       {"", "0", "-1", "01", "1025", "4294967297", "99999999999999999999", " 1", "1.5", "x"}) {
    auto a = Parse("n/nvidia.com/gpu.mps/0", "", &amount);
    ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << amount;
    EXPECT_THAT(a.status().message(), HasSubstr("annotation gpu.themelio.io/amount")) << amount;
  }
  for (const std::string amount : {"1", "8", "1024"}) {
    auto a = Parse("n/nvidia.com/gpu.mps/0", "", &amount);
    ASSERT_TRUE(a.ok()) << amount << ": " << a.status();
    EXPECT_EQ(a->amount_per_unit, std::stoi(amount));
  }
}

// The annotation the real API server stored on a pod after our Binding (kube-api-1.26).
TEST_F(AssignmentTest, ReadsTheRealBoundPodWithTheBuiltInCatalog) {
  const std::string json =
      testing::ReadFileOrDie(testing::SharedPath("protocol/kube-api-1.26/pod-after-binding.json"));
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(json);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->pods.size(), 1u);
  const PodObject& pod = batch->pods[0];
  const Catalog& builtin = Catalog::BuiltIn();
  absl::StatusOr<Assignment> a = ParseAssignmentAnnotations(pod.annotations, pod.node_name, builtin);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->node, "mig-a");
  EXPECT_EQ(builtin.Get(a->offering).resource, "nvidia.com/mig-1g.5gb.shared");
  EXPECT_EQ(a->units, std::vector<int32_t>{0});
  EXPECT_EQ(a->amount_per_unit, 1);
}

}  // namespace
}  // namespace gse
