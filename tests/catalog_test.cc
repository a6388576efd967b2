// Tests of the GPU catalog (state/catalog.h): file format, validation messages a user sees,
// hostile input, the built-in catalog, name rules and lookup.
#include "state/catalog.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A valid first offering (lines 4-5), so that the offering under test is offerings[1] and
// starts on line 6.
constexpr char kHeader[] =
    "apiVersion: gpu.themelio.io/v1\n"
    "kind: GpuCatalog\n"
    "offerings:\n"
    "- resource: example.com/first\n"
    "  aliases: [example.com/first-old]\n";

std::string WithOffering(const std::string& offering_yaml) {
  return absl::StrCat(kHeader, offering_yaml);
}

std::string ErrorOf(absl::string_view text) {
  absl::StatusOr<Catalog> c = Catalog::Parse(text);
  if (c.ok()) return "<parsed without error>";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

TEST(CatalogBuiltInFirstUse, ManyThreadsSeeOneCatalog) {
  // Defined first in this file so that (unshuffled) it is the first use of BuiltIn() in the
  // process: all threads race on the lazy initialisation, which TSan checks.
  std::vector<const Catalog*> seen(8, nullptr);
  std::vector<const Offering*> found(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, &found, i] {
      seen[i] = &Catalog::BuiltIn();
      found[i] = seen[i]->Find("nvidia.com/gpu-a100");
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i], seen[0]);
    ASSERT_NE(found[i], nullptr);
    EXPECT_EQ(found[i]->resource, "nvidia.com/a100");
  }
}

// ---------------------------------------------------------------------------------------
// Valid documents.

TEST(CatalogParse, MinimalOfferingGetsDefaults) {
  absl::StatusOr<Catalog> c = Catalog::Parse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n- resource: "
      "example.com/gpu\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 1u);
  const Offering& o = c->Get(0);
  EXPECT_EQ(o.id, 0);
  EXPECT_EQ(o.resource, "example.com/gpu");
  EXPECT_EQ(o.unit, UnitKind::kGpu);
  EXPECT_EQ(o.sharing, Sharing::kExclusive);
  EXPECT_EQ(o.replicas, 1);
  EXPECT_EQ(o.quota_key, "requests.example.com/gpu");
  EXPECT_FALSE(o.shared());
  EXPECT_TRUE(o.aliases.empty());
  EXPECT_TRUE(o.node_selector.empty());
}

TEST(CatalogParse, EveryFieldIsRead) {
  absl::StatusOr<Catalog> c = Catalog::Parse(R"(
apiVersion: gpu.themelio.io/v1
kind: GpuCatalog
offerings:
- resource: nvidia.com/gpu
- resource: nvidia.com/mig-1g.5gb.shared
  aliases: [example.com/small-shared, example.com/tiny]
  unit: mig
  sharing: mps
  replicas: 4
  product: NVIDIA-A100-SXM4-40GB
  migProfile: 1g.10gb+me
  memory: 5Gi
  deviceClass: mig-1g-5gb.shared.nvidia.com
  displayName: "A100 MIG 1g.5gb (shared) – ünïcode ok"
  quotaKey: requests.example.com/slices
  nodeSelector: {nvidia.com/mig.config: all-1g.5gb, zone: ""}
  mpsSingleProject: true
)");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->size(), 2u);
  const Offering& o = c->Get(1);
  EXPECT_EQ(o.id, 1);
  EXPECT_EQ(o.resource, "nvidia.com/mig-1g.5gb.shared");
  EXPECT_THAT(o.aliases, ::testing::ElementsAre("example.com/small-shared", "example.com/tiny"));
  EXPECT_EQ(o.unit, UnitKind::kMig);
  EXPECT_EQ(o.sharing, Sharing::kMps);
  EXPECT_TRUE(o.shared());
  EXPECT_EQ(o.replicas, 4);
  EXPECT_EQ(o.product, "NVIDIA-A100-SXM4-40GB");
  EXPECT_EQ(o.mig_profile, "1g.10gb+me");
  EXPECT_EQ(o.memory, "5Gi");
  EXPECT_EQ(o.device_class, "mig-1g-5gb.shared.nvidia.com");
  EXPECT_EQ(o.display_name, "A100 MIG 1g.5gb (shared) – ünïcode ok");
  EXPECT_EQ(o.quota_key, "requests.example.com/slices");
  EXPECT_EQ(o.node_selector, (std::map<std::string, std::string>{
                                 {"nvidia.com/mig.config", "all-1g.5gb"}, {"zone", ""}}));
  EXPECT_TRUE(o.mps_single_project);
}

TEST(CatalogParse, NullMeansNotSetAndAnchorsWork) {
  absl::StatusOr<Catalog> c = Catalog::Parse(R"(
apiVersion: gpu.themelio.io/v1
kind: GpuCatalog
offerings:
- resource: example.com/a
  memory: ~
  aliases:
  replicas:
  nodeSelector: &sel {pool: gpu}
- resource: example.com/b
  nodeSelector: *sel
)");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Get(0).memory, "");
  EXPECT_EQ(c->Get(0).replicas, 1);
  EXPECT_TRUE(c->Get(0).aliases.empty());
  EXPECT_EQ(c->Get(1).node_selector.at("pool"), "gpu");
}

TEST(CatalogParse, ExampleInDocsParses) {
  const std::string doc = testing::ReadFileOrDie(testing::SourcePath("docs/catalog.md"));
  size_t start = doc.find("```yaml\n");
  ASSERT_NE(start, std::string::npos);
  start += 8;
  size_t end = doc.find("```", start);
  ASSERT_NE(end, std::string::npos);
  absl::StatusOr<Catalog> c = Catalog::Parse(doc.substr(start, end - start));
  ASSERT_TRUE(c.ok()) << c.status();
  const Offering* shared = c->Find("example.com/a100-small-shared");
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->resource, "nvidia.com/mig-1g.5gb.shared");
  EXPECT_EQ(shared->replicas, 4);
}

// ---------------------------------------------------------------------------------------
// Validation: every error names the offering (index and resource) and the field.

struct BadOffering {
  std::string name;
  std::string yaml;      // offerings[1], appended after kHeader
  std::string expected;  // substring of the message: "<offering label>: <field>: <reason>"
};

// Failure output names the case instead of dumping the struct's bytes.
void PrintTo(const BadOffering& tc, std::ostream* os) { *os << tc.name; }

class CatalogBadOffering : public ::testing::TestWithParam<BadOffering> {};

TEST_P(CatalogBadOffering, MessageNamesOfferingFieldAndLine) {
  const BadOffering& tc = GetParam();
  std::string msg = ErrorOf(WithOffering(tc.yaml));
  EXPECT_THAT(msg, HasSubstr(tc.expected));
  EXPECT_THAT(msg, HasSubstr("(line "));
  // Messages stay one printable ASCII line whatever the input held.
  for (char ch : msg) {
    EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << "non-printable byte in: " << msg;
  }
}

const std::string kLong(300, 'x');

INSTANTIATE_TEST_SUITE_P(
    Cases, CatalogBadOffering,
    ::testing::ValuesIn(std::vector<BadOffering>{
        {"MissingResource", "- unit: gpu\n", "offerings[1]: resource: must be set"},
        {"EmptyResource", "- resource: \"\"\n", "offerings[1]: resource: must be set"},
        {"NullResource", "- resource: ~\n", "offerings[1]: resource: must be set"},
        {"ResourceIsMap", "- resource: {a: b}\n",
         "offerings[1]: resource: must be a string, got a mapping"},
        {"ResourceIsList", "- resource: [example.com/a]\n",
         "offerings[1]: resource: must be a string, got a list"},
        {"DuplicateResource", "- resource: example.com/first\n",
         "offerings[1] (example.com/first): resource: \"example.com/first\" is already used by "
         "offerings[0] (example.com/first) as its resource"},
        {"ResourceEqualsOtherAlias", "- resource: example.com/first-old\n",
         "offerings[1] (example.com/first-old): resource: \"example.com/first-old\" is already "
         "used by offerings[0] (example.com/first) as an alias"},
        {"AliasEqualsOtherName", "- resource: example.com/b\n  aliases: [example.com/first]\n",
         "offerings[1] (example.com/b): aliases[0]: \"example.com/first\" is already used by "
         "offerings[0] (example.com/first) as its resource"},
        {"AliasEqualsOtherAlias",
         "- resource: example.com/b\n  aliases: [example.com/ok, example.com/first-old]\n",
         "offerings[1] (example.com/b): aliases[1]: \"example.com/first-old\" is already used "
         "by offerings[0] (example.com/first) as an alias"},
        {"AliasEqualsOwnName", "- resource: example.com/b\n  aliases: [example.com/b]\n",
         "offerings[1] (example.com/b): aliases[0]: \"example.com/b\" is the offering's own "
         "resource name"},
        {"AliasTwiceInOneOffering",
         "- resource: example.com/b\n  aliases: [example.com/x, example.com/x]\n",
         "offerings[1] (example.com/b): aliases[1]: \"example.com/x\" is listed twice (also "
         "aliases[0])"},
        {"AliasInvalid", "- resource: example.com/b\n  aliases: [requests.example.com/x]\n",
         "offerings[1] (example.com/b): aliases[0]: \"requests.example.com/x\" must not start "
         "with \"requests.\""},
        {"AliasNoDomain", "- resource: example.com/b\n  aliases: [gpu]\n",
         "offerings[1] (example.com/b): aliases[0]: \"gpu\" must have a domain prefix"},
        {"AliasEmpty", "- resource: example.com/b\n  aliases: [\"\"]\n",
         "offerings[1] (example.com/b): aliases[0]: must not be empty"},
        {"AliasesNotAList", "- resource: example.com/b\n  aliases: example.com/x\n",
         "offerings[1] (example.com/b): aliases: must be a list of resource names, got "
         "example.com/x"},
        {"AliasIsMap", "- resource: example.com/b\n  aliases: [{a: b}]\n",
         "offerings[1] (example.com/b): aliases[0]: must be a resource name, got a mapping"},
        {"TooManyAliases",
         absl::StrCat(
             "- resource: example.com/b\n  aliases: [",
             [] {
               std::vector<std::string> a;
               for (int i = 0; i < 65; ++i) a.push_back(absl::StrCat("example.com/a", i));
               return absl::StrJoin(a, ", ");
             }(),
             "]\n"),
         "offerings[1] (example.com/b): aliases: must list at most 64 names, got 65"},
        {"ReplicasZero", "- resource: example.com/b\n  sharing: time-sliced\n  replicas: 0\n",
         "offerings[1] (example.com/b): replicas: must be at least 1, got 0"},
        {"ReplicasNegative", "- resource: example.com/b\n  sharing: mps\n  replicas: -3\n",
         "offerings[1] (example.com/b): replicas: must be at least 1, got -3"},
        {"ReplicasExclusive",
         "- resource: nvidia.com/mig-1g.5gb\n  unit: mig\n  migProfile: 1g.5gb\n  replicas: 4\n",
         "offerings[1] (nvidia.com/mig-1g.5gb): replicas: must be 1 for sharing \"exclusive\", "
         "got 4 (line 9, column 13)"},
        {"ReplicasTooMany", "- resource: example.com/b\n  sharing: time-sliced\n  replicas: 1025\n",
         "offerings[1] (example.com/b): replicas: must be at most 1024, got 1025"},
        {"ReplicasQuoted", "- resource: example.com/b\n  sharing: mps\n  replicas: \"4\"\n",
         "offerings[1] (example.com/b): replicas: must be an integer, got the string \"4\""},
        {"ReplicasFraction", "- resource: example.com/b\n  sharing: mps\n  replicas: 4.5\n",
         "offerings[1] (example.com/b): replicas: must be an integer, got 4.5"},
        {"ReplicasFloatHuge", "- resource: example.com/b\n  sharing: mps\n  replicas: 1e30\n",
         "offerings[1] (example.com/b): replicas: must be an integer, got 1e30"},
        {"ReplicasHugeInteger",
         "- resource: example.com/b\n  sharing: mps\n  replicas: 99999999999999999999\n",
         "offerings[1] (example.com/b): replicas: must be at most 1024, got 99999999999999999999"},
        {"ReplicasAboveInt32",
         "- resource: example.com/b\n  sharing: mps\n  replicas: 4294967297\n",
         "offerings[1] (example.com/b): replicas: must be at most 1024, got 4294967297"},
        {"ReplicasHugeNegative",
         "- resource: example.com/b\n  sharing: mps\n  replicas: -99999999999999999999\n",
         "offerings[1] (example.com/b): replicas: must be at least 1, got -99999999999999999999"},
        {"ReplicasList", "- resource: example.com/b\n  sharing: mps\n  replicas: [4]\n",
         "offerings[1] (example.com/b): replicas: must be an integer, got a list"},
        {"ReplicasWord", "- resource: example.com/b\n  sharing: mps\n  replicas: four\n",
         "offerings[1] (example.com/b): replicas: must be an integer, got four"},
        {"UnknownSharing", "- resource: example.com/b\n  sharing: timesliced\n",
         "offerings[1] (example.com/b): sharing: must be \"exclusive\", \"time-sliced\" or "
         "\"mps\", got \"timesliced\""},
        {"UnknownUnit", "- resource: example.com/b\n  unit: slice\n",
         "offerings[1] (example.com/b): unit: must be \"gpu\" or \"mig\", got \"slice\""},
        {"UnitIsMap", "- resource: example.com/b\n  unit: {kind: mig}\n",
         "offerings[1] (example.com/b): unit: must be a string, got a mapping"},
        {"MalformedMigProfile", "- resource: example.com/b\n  unit: mig\n  migProfile: 1g5gb\n",
         "offerings[1] (example.com/b): migProfile: \"1g5gb\" is not a MIG profile"},
        {"MigProfileTooManyComputeSlices",
         "- resource: example.com/b\n  unit: mig\n  migProfile: 9g.5gb\n",
         "offerings[1] (example.com/b): migProfile: \"9g.5gb\" is not a MIG profile"},
        {"MigProfileOnGpu", "- resource: example.com/b\n  unit: gpu\n  migProfile: 1g.5gb\n",
         "offerings[1] (example.com/b): migProfile: must not be set for unit \"gpu\""},
        {"MigProfileOnDefaultUnit", "- resource: example.com/b\n  migProfile: 1g.5gb\n",
         "offerings[1] (example.com/b): migProfile: must not be set for unit \"gpu\""},
        {"MigProfileMissing", "- resource: example.com/b\n  unit: mig\n",
         "offerings[1] (example.com/b): migProfile: must be set for unit \"mig\""},
        {"ResourceNoDomain", "- resource: nodomain\n",
         "offerings[1] (nodomain): resource: must have a domain prefix"},
        {"ResourceKubernetesIo", "- resource: kubernetes.io/gpu\n",
         "offerings[1] (kubernetes.io/gpu): resource: must not be in the kubernetes.io domain"},
        {"ResourceUppercaseDomain", "- resource: Example.com/gpu\n",
         "offerings[1] (Example.com/gpu): resource: domain prefix must be a lowercase DNS "
         "subdomain"},
        {"ResourceUnicode", "- resource: nvidia.com/gp\xc3\xbc\n",
         "offerings[1] (nvidia.com/gp\\xc3\\xbc): resource: name part must consist of letters"},
        {"ResourceFullwidthDomain", "- resource: \xef\xbd\x8evidia.com/gpu\n",
         "resource: domain prefix must be a lowercase DNS subdomain"},
        {"ResourceTwoSlashes", "- resource: a/b/c\n",
         "offerings[1] (a/b/c): resource: must contain exactly one '/'"},
        {"ResourceRequestsPrefix", "- resource: requests.foo/bar\n",
         "offerings[1] (requests.foo/bar): resource: must not start with \"requests.\""},
        {"UnknownField", "- resource: example.com/b\n  replica: 4\n",
         "offerings[1] (example.com/b): unknown field \"replica\" (did you mean \"replicas\"?) "
         "(line 7, column 3)"},
        {"UnknownFieldFarFromAny", "- resource: example.com/b\n  colour: red\n",
         "offerings[1] (example.com/b): unknown field \"colour\" (known fields: resource,"},
        {"UnknownFieldBeforeResource", "- migprofile: 1g.5gb\n  resource: example.com/b\n",
         "offerings[1] (example.com/b): unknown field \"migprofile\" (did you mean "
         "\"migProfile\"?)"},
        {"RepeatedField", "- resource: example.com/b\n  sharing: mps\n  sharing: exclusive\n",
         "offerings[1] (example.com/b): sharing: is given twice (line 8, column 3)"},
        {"NonStringFieldName", "- resource: example.com/b\n  [a]: b\n",
         "offerings[1] (example.com/b): field names must be strings, got a list"},
        {"OfferingIsScalar", "- example.com/b\n",
         "offerings[1]: must be a mapping with at least a resource field, got example.com/b"},
        {"QuotaKeyWrongPrefix", "- resource: example.com/b\n  quotaKey: limits.example.com/b\n",
         "offerings[1] (example.com/b): quotaKey: must start with \"requests.\""},
        {"QuotaKeyInvalidName", "- resource: example.com/b\n  quotaKey: requests.example.com/a/b\n",
         "offerings[1] (example.com/b): quotaKey: \"requests.example.com/a/b\": the part after "
         "\"requests.\" must contain exactly one '/'"},
        {"MpsSingleProjectOnTimeSliced",
         "- resource: example.com/b\n  sharing: time-sliced\n  replicas: 2\n  mpsSingleProject: "
         "true\n",
         "offerings[1] (example.com/b): mpsSingleProject: applies only to sharing \"mps\""},
        {"MpsSingleProjectNotBool",
         "- resource: example.com/b\n  sharing: mps\n  replicas: 2\n  mpsSingleProject: yes\n",
         "offerings[1] (example.com/b): mpsSingleProject: must be true or false, got yes"},
        {"MpsSingleProjectQuoted",
         "- resource: example.com/b\n  sharing: mps\n  replicas: 2\n  mpsSingleProject: \"true\"\n",
         "offerings[1] (example.com/b): mpsSingleProject: must be true or false, got the string"},
        {"ProductNotALabelValue", "- resource: example.com/b\n  product: NVIDIA A100\n",
         "offerings[1] (example.com/b): product: \"NVIDIA A100\" cannot prefix a node label value"},
        {"DeviceClassInvalid", "- resource: example.com/b\n  deviceClass: Bad_Class\n",
         "offerings[1] (example.com/b): deviceClass: \"Bad_Class\" must be a lowercase DNS "
         "subdomain"},
        {"MemoryNotAQuantity", "- resource: example.com/b\n  memory: 5GB\n",
         "offerings[1] (example.com/b): memory: must be a quantity such as 5Gi or 80Gi, got "
         "\"5GB\""},
        {"DisplayNameIsMap", "- resource: example.com/b\n  displayName: {en: x}\n",
         "offerings[1] (example.com/b): displayName: must be a string, got a mapping"},
        {"DisplayNameTooLong",
         absl::StrCat("- resource: example.com/b\n  displayName: ", kLong, "\n"),
         "offerings[1] (example.com/b): displayName: must be at most 256 bytes, got 300"},
        {"DisplayNameControlChar", "- resource: example.com/b\n  displayName: \"a\\tb\"\n",
         "offerings[1] (example.com/b): displayName: must not contain control characters, got "
         "\"a\\tb\""},
        {"StringValueTooLong",
         absl::StrCat("- resource: example.com/b\n  product: ", std::string(2000, 'p'), "\n"),
         "offerings[1] (example.com/b): product: must be at most 1024 bytes, got 2000"},
        {"NodeSelectorIsList", "- resource: example.com/b\n  nodeSelector: [a, b]\n",
         "offerings[1] (example.com/b): nodeSelector: must be a mapping of node labels, got a "
         "list"},
        {"NodeSelectorBadKey", "- resource: example.com/b\n  nodeSelector: {\"bad key\": x}\n",
         "offerings[1] (example.com/b): nodeSelector: label key \"bad key\" name part must "
         "consist of"},
        {"NodeSelectorBadValue", "- resource: example.com/b\n  nodeSelector: {pool: \"a b\"}\n",
         "offerings[1] (example.com/b): nodeSelector: label value \"a b\" of \"pool\" must "
         "consist of"},
        {"NodeSelectorValueIsMap", "- resource: example.com/b\n  nodeSelector: {pool: {a: b}}\n",
         "offerings[1] (example.com/b): nodeSelector: value of \"pool\" must be a string, got a "
         "mapping"},
        {"NodeSelectorKeyTwice", "- resource: example.com/b\n  nodeSelector: {pool: a, pool: b}\n",
         "offerings[1] (example.com/b): nodeSelector: label key \"pool\" is given twice"},
    }),
    [](const ::testing::TestParamInfo<BadOffering>& info) { return info.param.name; });

TEST(CatalogValidation, ExampleMessageFromHeaderIsExact) {
  // The contract's own example: offerings[3], field replicas, sharing exclusive.
  std::string doc = absl::StrCat(kHeader,
                                 "- resource: example.com/second\n"
                                 "- resource: example.com/third\n"
                                 "- resource: nvidia.com/mig-1g.5gb\n"
                                 "  unit: mig\n"
                                 "  migProfile: 1g.5gb\n"
                                 "  replicas: 4\n");
  EXPECT_EQ(ErrorOf(doc),
            "offerings[3] (nvidia.com/mig-1g.5gb): replicas: must be 1 for sharing \"exclusive\", "
            "got 4 (line 11, column 13)");
}

// ---------------------------------------------------------------------------------------
// Document-level errors.

TEST(CatalogDocument, EmptyDocumentsAreRejected) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "---\n", "~\n"}) {
    EXPECT_THAT(ErrorOf(text), HasSubstr("empty document")) << "input: " << text;
  }
}

TEST(CatalogDocument, RootMustBeAMapping) {
  EXPECT_THAT(
      ErrorOf("- resource: example.com/a\n"),
      HasSubstr("document must be a mapping with apiVersion, kind and offerings, got a list"));
  EXPECT_THAT(ErrorOf("hello\n"), HasSubstr("document must be a mapping"));
}

TEST(CatalogDocument, HeaderFieldsAreChecked) {
  EXPECT_THAT(ErrorOf("kind: GpuCatalog\nofferings: [{resource: example.com/a}]\n"),
              HasSubstr("apiVersion: must be set to \"gpu.themelio.io/v1\""));
  EXPECT_THAT(
      ErrorOf("apiVersion: v1\nkind: GpuCatalog\nofferings: [{resource: example.com/a}]\n"),
      HasSubstr("apiVersion: must be \"gpu.themelio.io/v1\", got \"v1\" (line 1, column 13)"));
  EXPECT_THAT(ErrorOf("apiVersion: gpu.themelio.io/v1\nofferings: [{resource: example.com/a}]\n"),
              HasSubstr("kind: must be set to \"GpuCatalog\""));
  EXPECT_THAT(ErrorOf("apiVersion: gpu.themelio.io/v1\nkind: Catalog\nofferings: [{resource: "
                      "example.com/a}]\n"),
              HasSubstr("kind: must be \"GpuCatalog\", got \"Catalog\""));
  EXPECT_THAT(ErrorOf("apiVersion: gpu.themelio.io/v1\nkind: [GpuCatalog]\nofferings: []\n"),
              HasSubstr("kind: must be a string, got a list"));
}

TEST(CatalogDocument, UnknownTopLevelFieldIsNamed) {
  EXPECT_THAT(
      ErrorOf("apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\noffering:\n- resource: "
              "example.com/a\n"),
      HasSubstr("unknown field \"offering\" (did you mean \"offerings\"?) (line 3, column 1)"));
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "metadata: {name: x}\n")),
              HasSubstr("unknown field \"metadata\""));
}

TEST(CatalogDocument, OfferingsMustBeANonEmptyList) {
  const std::string head = "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\n";
  EXPECT_THAT(ErrorOf(head), HasSubstr("offerings: must be set"));
  EXPECT_THAT(ErrorOf(head + "offerings:\n"), HasSubstr("offerings: must be set"));
  EXPECT_THAT(ErrorOf(head + "offerings: []\n"),
              HasSubstr("offerings: must list at least one offering"));
  EXPECT_THAT(ErrorOf(head + "offerings: {a: b}\n"),
              HasSubstr("offerings: must be a list of offerings, got a mapping"));
}

std::string ManyOfferings(int n) {
  std::string doc = "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n";
  for (int i = 0; i < n; ++i) absl::StrAppend(&doc, "- resource: example.com/g", i, "\n");
  return doc;
}

TEST(CatalogDocument, AtMostThousandOfferings) {
  absl::StatusOr<Catalog> ok = Catalog::Parse(ManyOfferings(1000));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->size(), 1000u);
  EXPECT_EQ(ok->Get(999).resource, "example.com/g999");
  EXPECT_EQ(ok->Get(999).id, 999);
  EXPECT_THAT(ErrorOf(ManyOfferings(1001)),
              HasSubstr("offerings: must list at most 1000 offerings, got 1001"));
}

TEST(CatalogDocument, SyntaxErrorHasLineAndColumn) {
  EXPECT_THAT(ErrorOf("apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog: x\n"),
              HasSubstr("YAML syntax error at line 2, column 17"));
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "- resource: [example.com/a\n  unit: gpu\n")),
              AllOf(HasSubstr("YAML syntax error at line "), HasSubstr("flow")));
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "- resource: *undefined\n")),
              HasSubstr("YAML syntax error at line 6"));
}

TEST(CatalogDocument, OnlyOneDocumentPerFile) {
  std::string doc = absl::StrCat(kHeader, "---\n", kHeader);
  EXPECT_THAT(ErrorOf(doc), HasSubstr("document stream holds a second YAML document at line 6, "
                                      "column 1; a catalog is exactly one YAML document"));
  // yaml-cpp starts a new document where a block list ends at column 0 and a mapping follows.
  EXPECT_THAT(ErrorOf("- a\n- b\nkind: GpuCatalog\n"),
              HasSubstr("second YAML document at line 3, column 1"));
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "---\n---\n---\n")),
              HasSubstr("second YAML document at line 6"));
}

// fuzz/catalog_fuzz found that these few bytes made the loader spin for ever, allocating
// (yaml-cpp 0.7's LoadAll never consumes a ',' where a node should start and "parses" empty
// documents at that place until memory runs out). Each must end with an error at the ','.
TEST(CatalogHostile, StrayCommaWhereANodeStartsIsASyntaxErrorNotAHang) {
  EXPECT_THAT(ErrorOf("!Th,e*"),
              HasSubstr("YAML syntax error at line 1, column 4: ',' cannot start a YAML node "
                        "(',' only separates the entries of [...] or {...})"));
  EXPECT_THAT(ErrorOf(","), HasSubstr("YAML syntax error at line 1, column 1: ',' cannot start"));
  EXPECT_THAT(ErrorOf("&anchor ,"), HasSubstr("at line 1, column 9: ',' cannot start"));
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "...\n,\n")),
              HasSubstr("at line 7, column 1: ',' cannot start"));
  EXPECT_THAT(ErrorOf("--- !tag\n, offerings\n"), HasSubstr("at line 2, column 1: ',' cannot"));
}

// ---------------------------------------------------------------------------------------
// Hostile input: clear errors, no crash, no huge allocation.

TEST(CatalogHostile, DocumentOverFourMiBIsRejectedBeforeParsing) {
  std::string doc = WithOffering("- resource: example.com/b\n");
  doc += "# " + std::string(10 * 1024 * 1024 - doc.size() - 3, 'x') + "\n";
  ASSERT_EQ(doc.size(), 10u * 1024 * 1024);
  EXPECT_THAT(
      ErrorOf(doc),
      HasSubstr("document is 10485760 bytes; a catalog may be at most 4 MiB (4194304 bytes)"));
}

TEST(CatalogHostile, DocumentOfExactlyFourMiBIsAccepted) {
  std::string doc = WithOffering("- resource: example.com/b\n");
  const size_t limit = 4u * 1024 * 1024;
  doc += "#" + std::string(limit - doc.size() - 2, 'c') + "\n";
  ASSERT_EQ(doc.size(), limit);
  absl::StatusOr<Catalog> c = Catalog::Parse(doc);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->size(), 2u);
  EXPECT_THAT(ErrorOf(doc + "\n"), HasSubstr("at most 4 MiB"));
}

TEST(CatalogHostile, NulByteIsRejectedWithItsPosition) {
  std::string doc = WithOffering("- resource: example.com/b\n");
  doc.insert(doc.find("GpuCatalog") + 3, 1, '\0');
  EXPECT_THAT(ErrorOf(doc), HasSubstr("document contains a NUL byte at line 2, column 10"));
}

// Issue 12, finding 7: a catalog is text (YAML refuses control characters and invalid UTF-8
// too; yaml-cpp does not check), and a JSON catalog is strict JSON.
TEST(CatalogHostile, ControlCharactersAndInvalidUtf8AreRefusedWithTheirPosition) {
  const std::string doc = WithOffering("- resource: example.com/b\n  displayName: Bee\n");
  const size_t at = doc.find("Bee") + 1;
  std::string control = doc;
  control[at] = '\x1a';
  EXPECT_THAT(ErrorOf(control),
              HasSubstr(absl::StrCat("document contains the control character U+001A at line ",
                                     std::count(doc.begin(), doc.begin() + at, '\n') + 1,
                                     ", column 17 (byte offset ", at, ";")));
  std::string utf8 = doc;
  utf8[at] = '\xff';
  EXPECT_THAT(ErrorOf(utf8), HasSubstr("document contains invalid UTF-8 at line "));
  // Tab, LF and CR are text (a display name itself may hold no control character at all, the
  // offering's own rule); UTF-8 display names pass.
  absl::StatusOr<Catalog> ok = Catalog::Parse(
      WithOffering("- resource: example.com/b\r\n  displayName: \"Bb\xc3\xa9\"\t# a\ttab\r\n"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Get(1).display_name, "Bb\xc3\xa9");
}

TEST(CatalogJson, JsonCatalogsAreStrictJson) {
  const std::string json =
      "{\"apiVersion\":\"gpu.themelio.io/v1\",\"kind\":\"GpuCatalog\","
      "\"offerings\":[{\"resource\":\"example.com/a\"}]}";
  ASSERT_TRUE(Catalog::Parse(json + "\n").ok());
  EXPECT_EQ(ErrorOf(json + "\n{}"),
            absl::StrCat("JSON catalog: invalid JSON at offset ", json.size() + 1,
                         ": The document root must not be followed by other values."));
  std::string trailing_comma = json;
  trailing_comma.insert(trailing_comma.size() - 2, ",");
  EXPECT_THAT(ErrorOf(trailing_comma), StartsWith("JSON catalog: invalid JSON at offset "));
  EXPECT_THAT(ErrorOf("  {'apiVersion': 'gpu.themelio.io/v1'}"),
              StartsWith("JSON catalog: invalid JSON at offset 3: "));
}

TEST(CatalogHostile, DeepFlowNestingDoesNotCrash) {
  EXPECT_THAT(ErrorOf(std::string(100000, '[')),
              HasSubstr("document nests deeper than 32 levels at line 1"));
  std::string closed = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(ErrorOf(closed), HasSubstr("nests deeper than 32 levels"));
  std::string maps;
  for (int i = 0; i < 50000; ++i) maps += "{\"a\":";
  EXPECT_THAT(ErrorOf(maps), HasSubstr("nests deeper than 32 levels"));
  // Nesting inside a field that expects a string.
  EXPECT_THAT(ErrorOf(absl::StrCat(kHeader, "- resource: ", std::string(100000, '['), "\n")),
              HasSubstr("nests deeper than 32 levels at line 6"));
}

TEST(CatalogHostile, DeepBlockNestingDoesNotCrash) {
  std::string seqs;
  for (int i = 0; i < 50000; ++i) seqs += "- ";
  seqs += "x\n";
  EXPECT_THAT(ErrorOf(seqs), HasSubstr("nests deeper than 32 levels at line 1"));
  std::string maps;
  for (int i = 0; i < 2000; ++i) maps += std::string(static_cast<size_t>(i), ' ') + "k:\n";
  EXPECT_THAT(ErrorOf(maps), HasSubstr("nests deeper than 32 levels at line 17"));
}

TEST(CatalogHostile, BracketsInsideStringsAndCommentsAreNotNesting) {
  const std::string brackets(40, '[');
  absl::StatusOr<Catalog> c = Catalog::Parse(
      absl::StrCat(kHeader,                                                               //
                   "- resource: example.com/b  # ", brackets, "\n",                       //
                   "  displayName: \"", brackets, "\"\n",                                 //
                   "- resource: example.com/c\n  displayName: 'it''s ", brackets, "'\n",  //
                   "- resource: example.com/d\n  displayName: >-\n    ", brackets, "\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Get(1).display_name, brackets);
  EXPECT_EQ(c->Get(2).display_name, "it's " + brackets);
  EXPECT_EQ(c->Get(3).display_name, brackets);
}

TEST(CatalogHostile, HugeFlatListIsRejectedBeforeYamlCppAllocates) {
  // yaml-cpp needs ~500 bytes per node: 1 MiB of "1," would cost it ~250 MB.
  std::string doc = "[";
  while (doc.size() < 1024 * 1024) doc += "1,";
  doc += "1]";
  EXPECT_THAT(ErrorOf(doc), HasSubstr("document has more than 100000 YAML tokens"));
}

TEST(CatalogHostile, AliasesCannotMultiplyAHugeString) {
  // One 1 MiB anchored string referenced by 997 offerings would copy 1 GB if accepted.
  std::string doc = absl::StrCat(kHeader, "- resource: example.com/b\n  displayName: &big ",
                                 std::string(1024 * 1024, 'y'), "\n");
  for (int i = 0; i < 997; ++i) {
    absl::StrAppend(&doc, "- {resource: example.com/c", i, ", displayName: *big}\n");
  }
  EXPECT_THAT(ErrorOf(doc),
              HasSubstr("offerings[1] (example.com/b): displayName: must be at most 1024 bytes, "
                        "got 1048576"));
}

TEST(CatalogHostile, BinaryGarbageGivesAnError) {
  std::string garbage;
  uint32_t x = 12345;
  for (int i = 0; i < 100000; ++i) {
    x = x * 1103515245u + 12345u;
    char c = static_cast<char>((x >> 16) & 0xff);
    garbage += c == '\0' ? '\x01' : c;
  }
  absl::StatusOr<Catalog> c = Catalog::Parse(garbage);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------
// FromOfferings: the same rules for offerings built in code.

Offering Make(std::string resource, Sharing sharing = Sharing::kExclusive, int32_t replicas = 1) {
  Offering o;
  o.resource = std::move(resource);
  o.sharing = sharing;
  o.replicas = replicas;
  return o;
}

TEST(CatalogFromOfferings, AssignsIdsAndDefaults) {
  Offering b = Make("example.com/b", Sharing::kTimeSliced, 4);
  b.id = 42;  // ignored: ids are indexes
  b.aliases = {"example.com/b-old"};
  b.quota_key = "requests.example.com/b-quota";
  absl::StatusOr<Catalog> c = Catalog::FromOfferings({Make("example.com/a"), b});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Get(0).id, 0);
  EXPECT_EQ(c->Get(1).id, 1);
  EXPECT_EQ(c->Get(0).quota_key, "requests.example.com/a");
  EXPECT_EQ(c->Get(1).quota_key, "requests.example.com/b-quota");
  EXPECT_EQ(c->Find("example.com/b-old"), &c->Get(1));
}

TEST(CatalogFromOfferings, SameMessagesWithoutLineNumbers) {
  absl::StatusOr<Catalog> c = Catalog::FromOfferings(
      {Make("example.com/a"), Make("example.com/b", Sharing::kExclusive, 4)});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "offerings[1] (example.com/b): replicas: must be 1 for sharing \"exclusive\", got 4");

  c = Catalog::FromOfferings({Make("example.com/a"), Make("example.com/a")});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("offerings[1] (example.com/a): resource: "
                                              "\"example.com/a\" is already used by offerings[0]"));

  Offering mig = Make("example.com/m");
  mig.unit = UnitKind::kMig;
  c = Catalog::FromOfferings({mig});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "offerings[0] (example.com/m): migProfile: must be set for unit \"mig\"");

  Offering bad_unit = Make("example.com/u");
  bad_unit.unit = static_cast<UnitKind>(7);
  c = Catalog::FromOfferings({bad_unit});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("offerings[0] (example.com/u): unit: unknown unit kind 7"));

  Offering bad_quota = Make("example.com/q");
  bad_quota.quota_key = "example.com/q";
  c = Catalog::FromOfferings({bad_quota});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(),
              HasSubstr("offerings[0] (example.com/q): quotaKey: must start with \"requests.\""));
}

TEST(CatalogFromOfferings, CountLimits) {
  absl::StatusOr<Catalog> c = Catalog::FromOfferings({});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "offerings: must list at least one offering");
  std::vector<Offering> many;
  for (int i = 0; i < 1001; ++i) many.push_back(Make(absl::StrCat("example.com/g", i)));
  c = Catalog::FromOfferings(many);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "offerings: must list at most 1000 offerings, got 1001");
  many.pop_back();
  EXPECT_TRUE(Catalog::FromOfferings(many).ok());
}

// ---------------------------------------------------------------------------------------
// Lookup.

TEST(CatalogLookup, FindResolvesNamesAndAliases) {
  Offering a = Make("example.com/a");
  a.aliases = {"example.com/z-old", "example.com/a-old"};
  Offering b = Make("example.com/b");
  b.aliases = {"example.com/b-old"};
  absl::StatusOr<Catalog> c = Catalog::FromOfferings({b, a});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_NE(c->Find("example.com/a"), nullptr);
  EXPECT_EQ(c->Find("example.com/a")->id, 1);
  EXPECT_EQ(c->Find("example.com/z-old"), c->Find("example.com/a"));
  EXPECT_EQ(c->Find("example.com/b-old")->resource, "example.com/b");
  EXPECT_EQ(c->Find("example.com/c"), nullptr);
  EXPECT_EQ(c->Find("example.com/"), nullptr);
  EXPECT_EQ(c->Find(""), nullptr);
  EXPECT_EQ(c->Find("EXAMPLE.com/a"), nullptr);  // names are case-sensitive
  EXPECT_THAT(c->AllNames(),
              ::testing::ElementsAre("example.com/a", "example.com/b", "example.com/a-old",
                                     "example.com/b-old", "example.com/z-old"));
}

// ---------------------------------------------------------------------------------------
// The built-in catalog.

TEST(CatalogBuiltIn, ParsesAndIsTheSameObjectEveryTime) {
  absl::StatusOr<Catalog> parsed = Catalog::Parse(Catalog::BuiltInYaml());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Catalog& builtin = Catalog::BuiltIn();
  EXPECT_EQ(&builtin, &Catalog::BuiltIn());
  EXPECT_EQ(builtin.size(), parsed->size());
  EXPECT_EQ(builtin.AllNames(), parsed->AllNames());
}

struct Expected {
  std::string resource;
  UnitKind unit;
  Sharing sharing;
  int32_t replicas;
  std::string mig_profile;
  std::string product;
};

TEST(CatalogBuiltIn, HasTheRequiredOfferings) {
  const Catalog& c = Catalog::BuiltIn();
  const UnitKind G = UnitKind::kGpu, M = UnitKind::kMig;
  const Sharing X = Sharing::kExclusive, T = Sharing::kTimeSliced;
  const std::vector<Expected> want = {
      {"nvidia.com/gpu", G, X, 1, "", ""},
      {"nvidia.com/gpu.shared", G, T, 4, "", ""},
      {"nvidia.com/mig-1g.5gb", M, X, 1, "1g.5gb", ""},
      {"nvidia.com/mig-2g.10gb", M, X, 1, "2g.10gb", ""},
      {"nvidia.com/mig-3g.20gb", M, X, 1, "3g.20gb", ""},
      {"nvidia.com/mig-4g.20gb", M, X, 1, "4g.20gb", ""},
      {"nvidia.com/mig-7g.40gb", M, X, 1, "7g.40gb", ""},
      {"nvidia.com/mig-1g.10gb", M, X, 1, "1g.10gb", ""},
      {"nvidia.com/mig-2g.20gb", M, X, 1, "2g.20gb", ""},
      {"nvidia.com/mig-3g.40gb", M, X, 1, "3g.40gb", ""},
      {"nvidia.com/mig-4g.40gb", M, X, 1, "4g.40gb", ""},
      {"nvidia.com/mig-7g.80gb", M, X, 1, "7g.80gb", ""},
      {"nvidia.com/mig-1g.20gb", M, X, 1, "1g.20gb", ""},
      {"nvidia.com/mig-1g.5gb.shared", M, T, 4, "1g.5gb", ""},
      {"nvidia.com/mig-2g.10gb.shared", M, T, 2, "2g.10gb", ""},
      {"nvidia.com/mig-1g.10gb.shared", M, T, 4, "1g.10gb", ""},
      {"nvidia.com/mig-3g.20gb.shared", M, T, 2, "3g.20gb", ""},
      {"nvidia.com/a100", G, X, 1, "", "NVIDIA-A100"},
      {"nvidia.com/h100", G, X, 1, "", "NVIDIA-H100"},
      {"nvidia.com/a10g", G, X, 1, "", "NVIDIA-A10G"},
      {"nvidia.com/a100-mig-1g.5gb", M, X, 1, "1g.5gb", "NVIDIA-A100"},
      {"nvidia.com/a100-mig-1g.5gb.shared", M, T, 4, "1g.5gb", "NVIDIA-A100"},
  };
  for (const Expected& w : want) {
    const Offering* o = c.Find(w.resource);
    ASSERT_NE(o, nullptr) << w.resource;
    EXPECT_EQ(o->resource, w.resource);
    EXPECT_EQ(o->unit, w.unit) << w.resource;
    EXPECT_EQ(o->sharing, w.sharing) << w.resource;
    EXPECT_EQ(o->replicas, w.replicas) << w.resource;
    EXPECT_EQ(o->mig_profile, w.mig_profile) << w.resource;
    EXPECT_EQ(o->product, w.product) << w.resource;
    EXPECT_EQ(o->quota_key, "requests." + w.resource) << w.resource;
  }
  EXPECT_EQ(c.Find("nvidia.com/gpu")->display_name, "NVIDIA GPU (whole)");
  EXPECT_EQ(c.Find("nvidia.com/a100")->device_class, "a100.nvidia.com");
  EXPECT_EQ(c.Find("nvidia.com/mig-1g.5gb")->device_class, "mig-1g-5gb.nvidia.com");

  // Exactly one MPS offering, with its own name (not the time-sliced or whole-GPU one).
  std::vector<const Offering*> mps;
  for (const Offering& o : c.offerings()) {
    if (o.sharing == Sharing::kMps) mps.push_back(&o);
  }
  ASSERT_EQ(mps.size(), 1u);
  EXPECT_EQ(mps[0]->resource, "nvidia.com/gpu.mps");
  EXPECT_GT(mps[0]->replicas, 1);
}

TEST(CatalogBuiltIn, EveryOfferingHasDisplayMetadata) {
  for (const Offering& o : Catalog::BuiltIn().offerings()) {
    // Exclusive offerings name their DRA DeviceClass; shared ones none, since DRA gives every
    // pod's extended-resource claim a whole device (catalog check warns about a class there).
    EXPECT_EQ(o.device_class.empty(), o.shared()) << o.resource;
    EXPECT_FALSE(o.display_name.empty()) << o.resource;
    EXPECT_FALSE(o.memory.empty()) << o.resource;
    if (o.shared()) {
      EXPECT_GT(o.replicas, 1) << o.resource;
    }
  }
}

TEST(CatalogBuiltIn, AliasesResolveAndNeverShadowGenericNames) {
  const Catalog& c = Catalog::BuiltIn();
  const Offering* a100 = c.Find("nvidia.com/gpu-a100");
  ASSERT_NE(a100, nullptr);
  EXPECT_EQ(a100->resource, "nvidia.com/a100");
  EXPECT_EQ(c.Find("nvidia.com/gpu")->resource, "nvidia.com/gpu");
  std::vector<std::string> names = c.AllNames();
  EXPECT_THAT(names, ::testing::Contains("nvidia.com/gpu-a100"));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  size_t alias_count = 0;
  for (const Offering& o : c.offerings()) alias_count += o.aliases.size();
  EXPECT_GT(alias_count, 0u);
  EXPECT_EQ(names.size(), c.size() + alias_count);
}

// ---------------------------------------------------------------------------------------
// JSON form: a catalog written as JSON parses back to the same offerings.

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string ToJson(const Catalog& c) {
  std::vector<std::string> items;
  for (const Offering& o : c.offerings()) {
    std::vector<std::string> aliases, selector;
    for (const std::string& a : o.aliases) aliases.push_back(JsonString(a));
    for (const auto& [k, v] : o.node_selector)
      selector.push_back(JsonString(k) + ":" + JsonString(v));
    items.push_back(absl::StrCat(
        "{\"resource\":", JsonString(o.resource), ",\"aliases\":[", absl::StrJoin(aliases, ","),
        "],\"unit\":", JsonString(std::string(UnitKindName(o.unit))), ",\"sharing\":",
        JsonString(std::string(SharingName(o.sharing))), ",\"replicas\":", o.replicas,
        ",\"product\":", JsonString(o.product), ",\"migProfile\":", JsonString(o.mig_profile),
        ",\"memory\":", JsonString(o.memory), ",\"deviceClass\":", JsonString(o.device_class),
        ",\"displayName\":", JsonString(o.display_name), ",\"quotaKey\":", JsonString(o.quota_key),
        ",\"nodeSelector\":{", absl::StrJoin(selector, ","),
        "},\"mpsSingleProject\":", o.mps_single_project ? "true" : "false", "}"));
  }
  return absl::StrCat(
      "{\"apiVersion\":\"gpu.themelio.io/v1\",\"kind\":\"GpuCatalog\",\"offerings\":[",
      absl::StrJoin(items, ","), "]}");
}

void ExpectSameOfferings(const Catalog& a, const Catalog& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Offering& x = a.offerings()[i];
    const Offering& y = b.offerings()[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.resource, y.resource);
    EXPECT_EQ(x.aliases, y.aliases);
    EXPECT_EQ(x.unit, y.unit);
    EXPECT_EQ(x.sharing, y.sharing);
    EXPECT_EQ(x.replicas, y.replicas);
    EXPECT_EQ(x.product, y.product);
    EXPECT_EQ(x.mig_profile, y.mig_profile);
    EXPECT_EQ(x.memory, y.memory);
    EXPECT_EQ(x.device_class, y.device_class);
    EXPECT_EQ(x.display_name, y.display_name);
    EXPECT_EQ(x.quota_key, y.quota_key);
    EXPECT_EQ(x.node_selector, y.node_selector);
    EXPECT_EQ(x.mps_single_project, y.mps_single_project);
  }
}

TEST(CatalogJson, BuiltInRoundTripsThroughJson) {
  const Catalog& builtin = Catalog::BuiltIn();
  absl::StatusOr<Catalog> back = Catalog::Parse(ToJson(builtin));
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameOfferings(builtin, *back);
}

TEST(CatalogJson, EveryFieldRoundTripsThroughJson) {
  Offering o = Make("example.com/h100-mig-1g.10gb-me.mps", Sharing::kMps, 7);
  o.aliases = {"example.com/a", "example.com/b"};
  o.unit = UnitKind::kMig;
  o.mig_profile = "1g.10gb+me";
  o.product = "NVIDIA-H100";
  o.memory = "10Gi";
  o.device_class = "h100-mig.example.com";
  o.display_name = "H100 \"MIG\" slice \\ MPS";
  o.quota_key = "requests.example.com/slices";
  o.node_selector = {{"example.com/pool", "gpu"}, {"tier", ""}};
  o.mps_single_project = true;
  absl::StatusOr<Catalog> c = Catalog::FromOfferings({Make("example.com/first"), o});
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string json = ToJson(*c);
  absl::StatusOr<Catalog> back = Catalog::Parse(json);
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << json;
  ExpectSameOfferings(*c, *back);
}

TEST(CatalogJson, JsonErrorsNameTheField) {
  EXPECT_THAT(
      ErrorOf("{\"apiVersion\":\"gpu.themelio.io/v1\",\"kind\":\"GpuCatalog\","
              "\"offerings\":[{\"resource\":\"example.com/a\",\"replicas\":\"2\","
              "\"sharing\":\"mps\"}]}"),
      HasSubstr(
          "offerings[0] (example.com/a): replicas: must be an integer, got the string \"2\""));
}

// ---------------------------------------------------------------------------------------
// Name and profile rules.

TEST(ExtendedResourceName, KubernetesRules) {
  const std::string d244(244, 'd'), d245(245, 'd');
  struct Case {
    std::string name;
    std::string error;  // "" = valid, else a substring of the reason
  };
  const std::vector<Case> cases = {
      {"nvidia.com/gpu", ""},
      {"nvidia.com/mig-1g.5gb.shared", ""},
      {"example.com/A_b.c-9", ""},
      {"a/b", ""},
      {"example.com/" + std::string(63, 'n'), ""},
      {d244 + "/gpu", ""},
      {"", "must not be empty"},
      {"nodomain", "must have a domain prefix"},
      {"kubernetes.io/foo", "must not be in the kubernetes.io domain"},
      {"foo.kubernetes.io/bar", "must not be in the kubernetes.io domain"},
      {"requests.foo/bar", "must not start with \"requests.\""},
      {"a/b/c", "must contain exactly one '/'"},
      {"/gpu", "domain prefix must not be empty"},
      {"example.com/", "name part must not be empty"},
      {"example.com/" + std::string(64, 'n'), "name part must be at most 63 characters, got 64"},
      {"Example.com/gpu", "domain prefix must be a lowercase DNS subdomain"},
      {"exa_mple.com/gpu", "domain prefix must be a lowercase DNS subdomain"},
      {"example..com/gpu", "domain prefix must be a lowercase DNS subdomain"},
      {"-example.com/gpu", "domain prefix must be a lowercase DNS subdomain"},
      {d245 + "/gpu", "domain prefix must be at most 244 characters"},
      {std::string(254, 'd') + "/gpu", "domain prefix must be at most 253 characters"},
      {"example.com/-gpu", "name part must consist of"},
      {"example.com/gpu-", "name part must consist of"},
      {"example.com/g pu", "name part must consist of"},
      {"example.com/gp\xc3\xbc", "name part must consist of"},
  };
  for (const Case& c : cases) {
    std::string err = ExtendedResourceNameError(c.name);
    if (c.error.empty()) {
      EXPECT_EQ(err, "") << c.name;
    } else {
      EXPECT_THAT(err, HasSubstr(c.error)) << c.name;
    }
  }
}

TEST(MigProfile, Shapes) {
  for (const char* ok :
       {"1g.5gb", "7g.80gb", "8g.999gb", "1g.10gb+me", "1g.10gb+me.all", "2g.20gb+gfx", "1g.1gb"}) {
    EXPECT_TRUE(IsValidMigProfile(ok)) << ok;
  }
  for (const char* bad :
       {"",          "0g.5gb",   "9g.5gb",     "10g.5gb",    "1g.0gb",    "1g.1000gb", "1g.05gb",
        "1g5gb",     "1g.5g",    "1g.5gbx",    "1g.5GB",     " 1g.5gb",   "1g.5gb ",   "1g.5gb+",
        "1g.5gb+ME", "1g.5gb+1", "1g.5gb++me", "1g.5gb+.me", "1c.1g.5gb", "g.5gb",     "1g.gb"}) {
    EXPECT_FALSE(IsValidMigProfile(bad)) << bad;
  }
}

TEST(CatalogNames, UnitAndSharingNames) {
  EXPECT_EQ(UnitKindName(UnitKind::kGpu), "gpu");
  EXPECT_EQ(UnitKindName(UnitKind::kMig), "mig");
  EXPECT_EQ(SharingName(Sharing::kExclusive), "exclusive");
  EXPECT_EQ(SharingName(Sharing::kTimeSliced), "time-sliced");
  EXPECT_EQ(SharingName(Sharing::kMps), "mps");
}

// ---------------------------------------------------------------------------------------
// Files.

TEST(CatalogFile, MissingFileIsNotFound) {
  const std::string path = ::testing::TempDir() + "/gse-no-such-catalog.yaml";
  absl::StatusOr<Catalog> c = Catalog::LoadFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), AllOf(HasSubstr(path), HasSubstr("No such file")));
}

TEST(CatalogFile, LoadsAFileAndPrefixesErrorsWithThePath) {
  const std::string path = ::testing::TempDir() + "/gse-catalog-test.yaml";
  {
    std::ofstream out(path, std::ios::binary);
    out << Catalog::BuiltInYaml();
  }
  absl::StatusOr<Catalog> c = Catalog::LoadFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->size(), Catalog::BuiltIn().size());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << WithOffering("- resource: example.com/b\n  sharing: shared\n");
  }
  c = Catalog::LoadFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(),
              HasSubstr(absl::StrCat("catalog file \"", path,
                                     "\": offerings[1] (example.com/b): sharing: must be")));
  std::remove(path.c_str());
}

TEST(CatalogFile, BigFileIsRejectedWithoutReadingItAll) {
  const std::string path = ::testing::TempDir() + "/gse-catalog-big.yaml";
  {
    std::ofstream out(path, std::ios::binary);
    std::string chunk(1024 * 1024, '#');
    for (int i = 0; i < 10; ++i) out << chunk;
  }
  absl::StatusOr<Catalog> c = Catalog::LoadFile(path);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("at most 4 MiB"));
  std::remove(path.c_str());
}

TEST(CatalogFile, DirectoryIsAnError) {
  absl::StatusOr<Catalog> c = Catalog::LoadFile(::testing::TempDir());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("catalog file"));
}

}  // namespace
}  // namespace gse
