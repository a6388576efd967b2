// Static quota file (state/static_quota.h): parsing with errors that name the path, and the
// quotas it gives projects in the mirror, alone and together with ResourceQuotas, surviving a
// relist (Mirror::ReplaceAll).
#include "state/static_quota.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

using ::testing::HasSubstr;

constexpr char kGpu[] = "nvidia.com/gpu";
constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";

std::shared_ptr<const Catalog> TestCatalog() {
  std::vector<Offering> v(2);
  v[0].resource = kGpu;
  v[0].aliases = {"nvidia.com/gpu-any"};
  v[1].resource = kTs;
  v[1].unit = UnitKind::kMig;
  v[1].mig_profile = "1g.5gb";
  v[1].sharing = Sharing::kTimeSliced;
  v[1].replicas = 4;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(std::move(v));
  EXPECT_TRUE(c.ok()) << c.status();
  return std::make_shared<const Catalog>(*std::move(c));
}

std::string ErrorOf(absl::string_view json) {
  absl::StatusOr<StaticQuotas> q = ParseStaticQuotas(json, *TestCatalog());
  return q.ok() ? "ok" : std::string(q.status().message());
}

TEST(StaticQuotaTest, ParsesQuantitiesPerProjectInMilliUnits) {
  absl::StatusOr<StaticQuotas> q = ParseStaticQuotas(
      R"({"projects":{"ml-team":{"requests.nvidia.com/mig-1g.5gb.shared":"9",
                                 "requests.nvidia.com/gpu-any":2},
                      "web":{}}})",
      *TestCatalog());
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->at("ml-team").at("requests.nvidia.com/mig-1g.5gb.shared"), 9000);
  EXPECT_EQ(q->at("ml-team").at("requests.nvidia.com/gpu-any"), 2000);
  EXPECT_TRUE(q->at("web").empty());
}

TEST(StaticQuotaTest, BadFilesAreRefusedWithThePathAndTheReason) {
  const struct {
    const char* json;
    const char* error;
  } cases[] = {
      {"", "document: invalid JSON"},
      {"[1]", "document: must be a JSON object"},
      {R"({})", "projects: missing"},
      {R"({"projects":[]})", "projects: must be an object"},
      {R"({"projects":{},"extra":1})", "document[\"extra\"]: unknown field"},
      {R"({"projects":{"a":7}})", "projects[\"a\"]: must be an object"},
      {R"({"projects":{"":{}}})", "project name must be 1 to 253 bytes"},
      {R"({"projects":{"a\u0001b":{}}})", "control character"},
      {R"({"projects":{"a":{},"a":{}}})", "projects[\"a\"]: project given twice"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpux":"1"}}})",
       "projects[\"a\"][\"requests.nvidia.com/gpux\"]: no catalog offering has this quota key"},
      {R"({"projects":{"a":{"nvidia.com/gpu":"1"}}})", "no catalog offering has this quota key"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":"-1"}}})", "is negative"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":"1.5"}}})", "is not a whole number"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":"lots"}}})", "requests.nvidia.com/gpu\"]:"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":true}}})", "must be a quantity"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":1.5}}})", "must be a quantity"},
      {R"({"projects":{"a":{"requests.nvidia.com/gpu":"1","requests.nvidia.com/gpu":"2"}}})",
       "key given twice"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ErrorOf(c.json), HasSubstr(c.error)) << c.json;
  }
  // Hostile sizes: deep nesting and too many projects are refused, not crashed on.
  EXPECT_THAT(ErrorOf(std::string(100000, '[')), HasSubstr("nested deeper than"));
  std::string many = R"({"projects":{)";
  for (size_t i = 0; i <= kMaxStaticQuotaProjects; ++i) {
    absl::StrAppend(&many, i ? "," : "", "\"p", i, "\":{}");
  }
  many += "}}";
  EXPECT_THAT(ErrorOf(many), HasSubstr("more than 10000 projects"));
}

// Issue 12, finding 7: the file is strict RFC 8259 JSON, and the error names the offset.
TEST(StaticQuotaTest, FilesThatAreNotStrictJsonAreRefusedAtTheirOffset) {
  const std::string good = R"({"projects":{"ml-team":{"requests.nvidia.com/gpu":"2"}}})";
  ASSERT_EQ(ErrorOf(good + "\n"), "ok");
  std::string control = good;
  control[15] = '\x1a';  // in "ml-team"
  EXPECT_EQ(ErrorOf(control),
            "quota file: document: invalid JSON at offset 15: Unescaped control character "
            "U+001A.");
  std::string utf8 = good;
  utf8[15] = '\xe2';
  EXPECT_EQ(ErrorOf(utf8), "quota file: document: invalid JSON at offset 15: Invalid UTF-8 "
                           "encoding.");
  EXPECT_EQ(ErrorOf(good + "{}"),
            absl::StrCat("quota file: document: invalid JSON at offset ", good.size(),
                         ": The document root must not be followed by other values."));
  EXPECT_EQ(ErrorOf(good + std::string(1, '\0')),
            absl::StrCat("quota file: document: invalid JSON at offset ", good.size(),
                         ": NUL byte in the document"));
}

NodeObject Node(const std::string& name, int64_t gpus, int64_t tickets) {
  NodeObject n;
  n.name = name;
  n.allocatable_milli[kGpu] = gpus * 1000;
  n.allocatable_milli[kTs] = tickets * 1000;
  return n;
}

TEST(StaticQuotaTest, MirrorEnforcesTheTighterOfFileAndResourceQuota) {
  MirrorOptions options;
  absl::StatusOr<StaticQuotas> q = ParseStaticQuotas(
      R"({"projects":{"ml-team":{"requests.nvidia.com/gpu":"3",
                                 "requests.nvidia.com/mig-1g.5gb.shared":"5"}}})",
      *TestCatalog());
  ASSERT_TRUE(q.ok()) << q.status();
  options.static_quotas = *q;
  Mirror mirror(TestCatalog(), options);
  const OfferingId gpu = TestCatalog()->Find(kGpu)->id;
  const OfferingId ts = TestCatalog()->Find(kTs)->id;
  auto quota = [&](OfferingId o) {
    return mirror.Read([&](const ClusterState& s) { return s.Quota(s.FindProject("ml-team"), o); });
  };
  // From the file alone; time-sliced quota is kept in tickets, as for a ResourceQuota.
  EXPECT_EQ(quota(gpu), 3);
  EXPECT_EQ(quota(ts), 5);

  // A ResourceQuota in the project's namespace: the tighter of the two counts.
  ObjectBatch batch;
  batch.nodes.push_back(Node("n1", 8, 28));
  ResourceQuotaObject rq;
  rq.namespace_name = "ml-team";
  rq.name = "gpus";
  rq.hard_milli["requests.nvidia.com/gpu"] = 1000;
  rq.hard_milli["requests.nvidia.com/mig-1g.5gb.shared"] = 40000;
  batch.quotas.push_back(rq);
  mirror.Write([&](ClusterState& s) {
    s.ApplyBatch(batch);
    return true;
  });
  EXPECT_EQ(quota(gpu), 1);  // the ResourceQuota's 1 < the file's 3
  EXPECT_EQ(quota(ts), 5);   // the file's 5 tickets < the ResourceQuota's 40

  // Reserve enforces it: one GPU, then no second.
  const PodClaim first{"ml-team/a", "uid-a", "ml-team", "ml-team"};
  const PodClaim second{"ml-team/b", "uid-b", "ml-team", "ml-team"};
  absl::StatusOr<Assignment> got = mirror.ReserveWith(first, [&](const ClusterState&) {
    return absl::StatusOr<Assignment>(Assignment{"n1", gpu, {0}, 1});
  });
  ASSERT_TRUE(got.ok()) << got.status();
  got = mirror.ReserveWith(second, [&](const ClusterState&) {
    return absl::StatusOr<Assignment>(Assignment{"n1", gpu, {1}, 1});
  });
  EXPECT_FALSE(got.ok());
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("quota"));

  // A relist rebuilds the mirror from the API alone: the file's quotas stay.
  batch.quotas.clear();
  mirror.ReplaceAll(batch, absl::Now());
  EXPECT_EQ(quota(gpu), 3);
  EXPECT_EQ(quota(ts), 5);
}

}  // namespace
}  // namespace gse
