// Tests of tools/catalog_render.h: what the catalog renders (golden files for the built-in
// catalog, YAML that reads back as written whatever the catalog's strings hold, DRA selectors)
// and what `catalog check` reports (kube-scheduler's extender validation, drift between the
// catalog and a scheduler configuration or the cluster's nodes), one line per problem.
//
// GSE_UPDATE_GOLDEN=1 rewrites tests/golden/*.yaml from the current renders (then review the
// diff: a golden file is what platform teams apply).
#include "tools/catalog_render.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testsupport/paths.h"
#include "yaml-cpp/yaml.h"

namespace gse {
namespace {

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SourcePath;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<std::string> Lines(const CheckReport& report) {
  std::vector<std::string> out;
  for (const CheckProblem& p : report.problems()) out.push_back(p.Line());
  return out;
}

std::string Dump(const CheckReport& report) { return absl::StrJoin(Lines(report), "\n"); }

// The one problem line containing every needle; fails the test unless exactly one does.
std::string OneLine(const CheckReport& report, const std::vector<std::string>& needles) {
  std::vector<std::string> hits;
  for (const std::string& line : Lines(report)) {
    bool all = true;
    for (const std::string& n : needles) all = all && line.find(n) != std::string::npos;
    if (all) hits.push_back(line);
  }
  EXPECT_EQ(hits.size(), 1u) << "needles: " << absl::StrJoin(needles, " | ") << "\nreport:\n"
                             << Dump(report);
  return hits.empty() ? "" : hits[0];
}

Catalog MustParse(const std::string& yaml) {
  absl::StatusOr<Catalog> c = Catalog::Parse(yaml);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : Catalog::BuiltIn();
}

// ---------------------------------------------------------------------------------------
// Render

TEST(CatalogRenderTest, BuiltInCatalogMatchesGoldenFiles) {
  const bool update = std::getenv("GSE_UPDATE_GOLDEN") != nullptr &&
                      std::string(std::getenv("GSE_UPDATE_GOLDEN")) == "1";
  for (const std::string& name : RenderTargetNames()) {
    SCOPED_TRACE(name);
    absl::StatusOr<RenderTarget> target = ParseRenderTarget(name);
    ASSERT_TRUE(target.ok()) << target.status();
    const std::string rendered = RenderCatalog(Catalog::BuiltIn(), *target);
    const std::string path = SourcePath(absl::StrCat("tests/golden/", name, ".yaml"));
    if (update) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << rendered;
      std::printf("rewrote %s\n", path.c_str());
    }
    std::string golden;
    ASSERT_NO_THROW(golden = ReadFileOrDie(path)) << "run with GSE_UPDATE_GOLDEN=1 to create it";
    EXPECT_EQ(rendered, golden) << "the render of the built-in catalog changed; if on purpose, "
                                   "rerun with GSE_UPDATE_GOLDEN=1 and review the diff";
  }
}

TEST(CatalogRenderTest, DeviceClassesPublishEveryOfferingWithADeviceClass) {
  const Catalog& catalog = Catalog::BuiltIn();
  const std::vector<YAML::Node> docs =
      YAML::LoadAll(RenderCatalog(catalog, RenderTarget::kDeviceClasses));
  // Every built-in exclusive offering has a deviceClass; the shared ones have none (DRA would
  // give each pod a whole unit), so the render holds the exclusive offerings in order.
  std::vector<const Offering*> published;
  for (const Offering& o : catalog.offerings()) {
    if (!o.shared()) published.push_back(&o);
  }
  ASSERT_EQ(docs.size(), published.size());
  for (size_t i = 0; i < docs.size(); ++i) {
    const Offering& o = *published[i];
    SCOPED_TRACE(o.resource);
    const YAML::Node& d = docs[i];
    EXPECT_EQ(d["apiVersion"].as<std::string>(), "resource.k8s.io/v1");
    EXPECT_EQ(d["kind"].as<std::string>(), "DeviceClass");
    EXPECT_EQ(d["metadata"]["name"].as<std::string>(), o.device_class);
    EXPECT_FALSE(d["metadata"]["namespace"]) << "DeviceClass is cluster-scoped";
    EXPECT_EQ(d["spec"]["extendedResourceName"].as<std::string>(), o.resource);
    ASSERT_EQ(d["spec"]["selectors"].size(), 1u);
    EXPECT_EQ(d["spec"]["selectors"][0]["cel"]["expression"].as<std::string>(), DeviceClassCel(o));
    EXPECT_EQ(d["metadata"]["annotations"]["gpu.themelio.io/dra-node-label"].as<std::string>(),
              "nvidia.com/dra-kubelet-plugin=true");
  }
  // The header says how to mark a DRA-capable node.
  EXPECT_THAT(RenderCatalog(catalog, RenderTarget::kDeviceClasses),
              HasSubstr("#   kubectl label node <node> nvidia.com/dra-kubelet-plugin=true\n"));
}

TEST(CatalogRenderTest, CelSelectsDriverTypeProfileAndProduct) {
  const Catalog& catalog = Catalog::BuiltIn();
  EXPECT_EQ(DeviceClassCel(*catalog.Find("nvidia.com/mig-1g.5gb")),
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == "
            "'mig' && device.attributes['gpu.nvidia.com'].profile == '1g.5gb'");
  EXPECT_EQ(DeviceClassCel(*catalog.Find("nvidia.com/gpu")),
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == "
            "'gpu'");
  const std::string a100_mig = DeviceClassCel(*catalog.Find("nvidia.com/a100-mig-1g.5gb"));
  EXPECT_THAT(a100_mig, AllOf(HasSubstr(".type == 'mig'"), HasSubstr(".profile == '1g.5gb'"),
                              HasSubstr(".productName.matches('^NVIDIA[ -]A100')")));

  // The pattern matches the DRA attribute (NVML name, spaces) and the GFD label (dashes), and
  // no other product. std::regex ECMAScript reads these patterns as RE2 does.
  Offering o = *catalog.Find("nvidia.com/a100");
  o.product = "NVIDIA-A100-SXM4-40GB.v2";
  const std::string cel = DeviceClassCel(o);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(cel, m, std::regex(R"(matches\('([^']*)'\))"))) << cel;
  EXPECT_EQ(m[1].str(), "^NVIDIA[ -]A100[ -]SXM4[ -]40GB[.]v2");
  const std::regex re(m[1].str());
  EXPECT_TRUE(std::regex_search(std::string("NVIDIA A100-SXM4-40GB.v2"), re));
  EXPECT_TRUE(std::regex_search(std::string("NVIDIA-A100-SXM4-40GB.v2"), re));
  EXPECT_FALSE(std::regex_search(std::string("NVIDIA A100-SXM4-40GBxv2"), re)) << "'.' is literal";
  EXPECT_FALSE(std::regex_search(std::string("XNVIDIA A100-SXM4-40GB.v2"), re)) << "anchored";
}

TEST(CatalogRenderTest, QuotasListEveryKeyOnceWithItsUnit) {
  const Catalog& catalog = Catalog::BuiltIn();
  const std::string text = RenderCatalog(catalog, RenderTarget::kResourceQuotas);
  const YAML::Node q = YAML::Load(text);
  EXPECT_EQ(q["apiVersion"].as<std::string>(), "v1");
  EXPECT_EQ(q["kind"].as<std::string>(), "ResourceQuota");
  EXPECT_EQ(q["metadata"]["name"].as<std::string>(), "gpu-quota");
  ASSERT_EQ(q["spec"]["hard"].size(), catalog.size());
  for (const Offering& o : catalog.offerings()) {
    ASSERT_TRUE(q["spec"]["hard"][o.quota_key]) << o.quota_key;
    EXPECT_EQ(q["spec"]["hard"][o.quota_key].Tag(), "!") << "a quoted string, as quantities are";
    EXPECT_EQ(q["spec"]["hard"][o.quota_key].as<std::string>(), "0");
  }
  EXPECT_THAT(text, HasSubstr("requests.nvidia.com/mig-1g.5gb.shared: \"0\"  # time-sliced "
                              "tickets, 4 per MIG 1g.5gb slice"));
  EXPECT_THAT(text, HasSubstr("requests.nvidia.com/gpu.mps: \"0\"  # MPS shares, 4 per GPU"));
  EXPECT_THAT(text, HasSubstr("requests.nvidia.com/mig-3g.20gb: \"0\"  # MIG 3g.20gb slices"));
}

TEST(CatalogRenderTest, KubeflowAndManagedResourcesFollowTheCatalog) {
  const Catalog& catalog = Catalog::BuiltIn();
  const YAML::Node kf = YAML::Load(RenderCatalog(catalog, RenderTarget::kKubeflow));
  const YAML::Node vendors = kf["spawnerFormDefaults"]["gpus"]["value"]["vendors"];
  ASSERT_EQ(vendors.size(), catalog.size());
  for (size_t i = 0; i < catalog.size(); ++i) {
    EXPECT_EQ(vendors[i]["limitsKey"].as<std::string>(), catalog.offerings()[i].resource);
    EXPECT_EQ(vendors[i]["uiName"].as<std::string>(), catalog.offerings()[i].display_name);
  }

  const YAML::Node se = YAML::Load(RenderCatalog(catalog, RenderTarget::kSchedulerExtender));
  std::vector<std::string> names;
  for (const YAML::Node& m : se["managedResources"]) {
    names.push_back(m["name"].as<std::string>());
    EXPECT_EQ(m["ignoredByScheduler"].as<std::string>(), "false");
  }
  std::vector<std::string> want = catalog.AllNames();
  std::sort(names.begin(), names.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);
}

TEST(CatalogRenderTest, StringsReadBackAsTheSameStrings) {
  // Display names that a naive emitter turns into booleans, numbers, nulls, comments or
  // broken YAML; a deviceClass that looks like a number.
  // clang-format off
  const std::vector<std::string> names = {
      "true", "No", "0", "1.5", "null", "~", "a: b", "x # y", "\"quoted\"", "back\\slash",
      "- dash", "[flow]", "{map}", "ends with space ", "Ünïcödé GPU", "*alias", "&anchor", "!tag",
      "%percent", "@at", "`tick`", "'single'", ""};
  // clang-format on
  std::string yaml = "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n";
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&yaml, "- resource: example.com/r", i, "\n  deviceClass: ", i,
                    "x.example.com\n  displayName: \"",
                    absl::StrReplaceAll(names[i], {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"\n");
  }
  const Catalog catalog = MustParse(yaml);
  ASSERT_EQ(catalog.size(), names.size());
  const YAML::Node kf = YAML::Load(RenderCatalog(catalog, RenderTarget::kKubeflow));
  const YAML::Node vendors = kf["spawnerFormDefaults"]["gpus"]["value"]["vendors"];
  ASSERT_EQ(vendors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    SCOPED_TRACE(names[i]);
    const std::string want = names[i].empty() ? absl::StrCat("example.com/r", i) : names[i];
    EXPECT_EQ(vendors[i]["uiName"].as<std::string>(), want);
  }
  // "true", "No", "0", ...: quoted, so that YAML 1.1 readers (kubectl) see strings.
  for (size_t i : {0, 1, 2, 3, 4, 5}) EXPECT_EQ(vendors[i]["uiName"].Tag(), "!") << names[i];
  const std::vector<YAML::Node> classes =
      YAML::LoadAll(RenderCatalog(catalog, RenderTarget::kDeviceClasses));
  ASSERT_EQ(classes.size(), names.size());
  EXPECT_EQ(classes[0]["metadata"]["name"].as<std::string>(), "0x.example.com");
  EXPECT_EQ(classes[0]["metadata"]["name"].Tag(), "!") << "0x... would read as a number";
}

TEST(CatalogRenderTest, OfferingsWithoutDeviceClassAreLeftOut) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/a\n  deviceClass: a.example.com\n"
      "- resource: example.com/b\n");
  const std::vector<YAML::Node> docs =
      YAML::LoadAll(RenderCatalog(catalog, RenderTarget::kDeviceClasses));
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0]["spec"]["extendedResourceName"].as<std::string>(), "example.com/a");
  CheckReport report;
  CheckCatalog(catalog, "c.yaml", &report);
  EXPECT_EQ(report.errors(), 0) << Dump(report);
  EXPECT_THAT(OneLine(report, {"warning: c.yaml: offerings[1] (example.com/b).deviceClass:"}),
              HasSubstr("no DRA DeviceClass"));
}

TEST(CatalogRenderTest, UnknownTargetNamesTheValidOnes) {
  absl::StatusOr<RenderTarget> t = ParseRenderTarget("devices");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(
      std::string(t.status().message()),
      AllOf(HasSubstr("--what=\"devices\""), HasSubstr("device-classes"),
            HasSubstr("resource-quotas"), HasSubstr("kubeflow"), HasSubstr("scheduler-extender")));
}

// ---------------------------------------------------------------------------------------
// Check: the catalog itself

TEST(CatalogCheckTest, SharedDeviceClassOrQuotaKeyIsAnError) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/a\n  deviceClass: one.example.com\n"
      "- resource: example.com/b\n  deviceClass: one.example.com\n"
      "  quotaKey: requests.example.com/a\n");
  CheckReport report;
  CheckCatalog(catalog, "c.yaml", &report);
  EXPECT_EQ(report.errors(), 2) << Dump(report);
  OneLine(report, {"error: c.yaml: offerings[1] (example.com/b).deviceClass: \"one.example.com\"",
                   "offerings[0] (example.com/a)", "one extendedResourceName"});
  OneLine(report, {"error: c.yaml: offerings[1] (example.com/b).quotaKey:",
                   "\"requests.example.com/a\"", "offerings[0] (example.com/a)"});
  EXPECT_TRUE(report.Failed(false));
  // The render publishes the first and says why the second is missing.
  const std::string rendered = RenderCatalog(catalog, RenderTarget::kDeviceClasses);
  const std::vector<YAML::Node> docs = YAML::LoadAll(rendered);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0]["spec"]["extendedResourceName"].as<std::string>(), "example.com/a");
  EXPECT_THAT(rendered, HasSubstr("# Skipped: offerings[1] (example.com/b) names deviceClass "
                                  "one.example.com, already published for example.com/a."));
  const YAML::Node quota = YAML::Load(RenderCatalog(catalog, RenderTarget::kResourceQuotas));
  EXPECT_EQ(quota["spec"]["hard"].size(), 1u) << "one key, listed once";
}

// Issue 16, fact sheet §5-6: DRA gives every pod's extended-resource claim a device of its
// own, so a shared offering whose class serves the name is not shared there.
TEST(CatalogCheckTest, TimeSlicedOfferingWithDraDeviceClassIsFlagged) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/mig-1g.5gb.shared\n  unit: mig\n  migProfile: 1g.5gb\n"
      "  sharing: time-sliced\n  replicas: 4\n  deviceClass: mig-1g-5gb.shared.example.com\n");
  CheckReport report;
  CheckCatalog(catalog, "c.yaml", &report);
  EXPECT_EQ(report.errors(), 0) << Dump(report);
  EXPECT_EQ(report.warnings(), 1) << Dump(report);
  const std::string line = OneLine(
      report, {"warning: c.yaml: offerings[0] (example.com/mig-1g.5gb.shared).deviceClass: ",
               "\"mig-1g-5gb.shared.example.com\" is a DRA DeviceClass",
               "sharing \"time-sliced\" (4 tickets per MIG 1g.5gb slice)"});
  EXPECT_THAT(line, AllOf(HasSubstr("cannot be shared between pods"),
                          HasSubstr("each claim consumes the device's full capacities"),
                          HasSubstr("each pod gets a whole MIG 1g.5gb slice"),
                          HasSubstr("drop deviceClass, or make the offering exclusive")));
  EXPECT_FALSE(report.Failed(false)) << "a warning, as for a missing deviceClass";
  EXPECT_TRUE(report.Failed(true)) << "--strict fails";
}

TEST(CatalogCheckTest, MpsOfferingWithDraDeviceClassIsFlagged) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/gpu.mps\n  sharing: mps\n  replicas: 4\n"
      "  deviceClass: gpu-mps.example.com\n"
      "- resource: example.com/mig-2g.10gb.mps\n  unit: mig\n  migProfile: 2g.10gb\n"
      "  sharing: mps\n  replicas: 2\n  deviceClass: mig-2g-10gb-mps.example.com\n"
      "- resource: example.com/gpu.shared\n  sharing: time-sliced\n  replicas: 4\n"
      "  deviceClass: gpu-shared.example.com\n");
  CheckReport report;
  CheckCatalog(catalog, "c.yaml", &report);
  EXPECT_EQ(report.errors(), 0) << Dump(report);
  EXPECT_EQ(report.warnings(), 3) << Dump(report);
  // A time-sliced whole GPU can be shared through DRA, with the driver's ConsumableShares.
  EXPECT_THAT(OneLine(report, {"offerings[2] (example.com/gpu.shared).deviceClass: ",
                               "sharing \"time-sliced\" (4 tickets per GPU)"}),
              AllOf(HasSubstr("unless the NVIDIA driver runs with ConsumableShares"),
                    Not(HasSubstr("MPS"))));
  EXPECT_THAT(OneLine(report, {"warning: c.yaml: offerings[0] (example.com/gpu.mps).deviceClass: ",
                               "\"gpu-mps.example.com\"", "sharing \"mps\" (4 shares per GPU)"}),
              AllOf(HasSubstr("one MPS daemon per claim"),
                    HasSubstr("refuses MPS together with ConsumableShares"),
                    HasSubstr("one share of quota buys a whole GPU")));
  EXPECT_THAT(OneLine(report, {"offerings[1] (example.com/mig-2g.10gb.mps).deviceClass: ",
                               "sharing \"mps\" (2 shares per MIG 2g.10gb slice)"}),
              HasSubstr("cannot be shared between pods"));
}

TEST(CatalogCheckTest, ExclusiveOfferingWithDraDeviceClassIsNotFlagged) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/mig-1g.5gb\n  unit: mig\n  migProfile: 1g.5gb\n"
      "  deviceClass: mig-1g-5gb.example.com\n"
      "- resource: example.com/gpu\n  sharing: exclusive\n  deviceClass: gpu.example.com\n"
      // A shared offering without a class is what DRA can serve: nothing to say either.
      "- resource: example.com/gpu.shared\n  sharing: time-sliced\n  replicas: 4\n");
  CheckReport report;
  CheckCatalog(catalog, "c.yaml", &report);
  EXPECT_THAT(report.problems(), IsEmpty()) << Dump(report);
}

TEST(CatalogCheckTest, BuiltInCatalogIsClean) {
  CheckReport report;
  CheckCatalog(Catalog::BuiltIn(), "built-in catalog", &report);
  EXPECT_THAT(report.problems(), IsEmpty()) << Dump(report);
}

// ---------------------------------------------------------------------------------------
// Check: scheduler configurations

class SchedulerConfigCheckTest : public ::testing::Test {
 protected:
  CheckReport Check(const std::string& yaml) {
    CheckReport report;
    CheckSchedulerConfig(Catalog::BuiltIn(), "built-in catalog", yaml, "ksc.yaml", &report);
    return report;
  }
  // The shipped default-profile configuration with `from` replaced by `to` (once).
  std::string Shipped(const std::string& from = "", const std::string& to = "") {
    std::string text = ReadFileOrDie(SourcePath("scheduler-config/default-profile.yaml"));
    if (from.empty()) return text;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    return text;
  }
  static constexpr char kEntry[] = "  - name: nvidia.com/a10g\n    ignoredByScheduler: false\n";
  static constexpr char kAliasEntry[] =
      "  - name: nvidia.com/gpu-a100\n    ignoredByScheduler: false\n";
};

TEST_F(SchedulerConfigCheckTest, ShippedConfigsAreClean) {
  for (const char* f : {"default-profile.yaml", "gpu-scheduler.yaml", "tls.yaml"}) {
    SCOPED_TRACE(f);
    CheckReport report;
    CheckSchedulerConfig(Catalog::BuiltIn(), "built-in catalog",
                         ReadFileOrDie(SourcePath(absl::StrCat("scheduler-config/", f))), f,
                         &report);
    EXPECT_THAT(report.problems(), IsEmpty()) << Dump(report);
  }
}

// scheduler-config/all-pods.yaml is for an extender run with --score-all-pods: its entry has no
// managedResources, which catalog check --score-all-pods wants and plain catalog check refuses.
TEST_F(SchedulerConfigCheckTest, AllPodsConfigWantsNoManagedResources) {
  const std::string all = ReadFileOrDie(SourcePath("scheduler-config/all-pods.yaml"));
  CheckReport r;
  CheckSchedulerConfig(Catalog::BuiltIn(), "built-in catalog", all, "all-pods.yaml", &r,
                       /*score_all_pods=*/true);
  EXPECT_THAT(r.problems(), IsEmpty()) << Dump(r);

  r = CheckReport();
  CheckSchedulerConfig(Catalog::BuiltIn(), "built-in catalog", all, "all-pods.yaml", &r);
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: all-pods.yaml: extenders[0].managedResources: empty: kube-scheduler sends "
              "every pod", "check with --score-all-pods if that is the intent"});

  r = CheckReport();
  CheckSchedulerConfig(Catalog::BuiltIn(), "built-in catalog", Shipped(), "ksc.yaml", &r,
                       /*score_all_pods=*/true);
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {absl::StrCat("error: ksc.yaml: extenders[0].managedResources: ",
                           Catalog::BuiltIn().AllNames().size(), " name(s) listed"),
              "--score-all-pods never sees the others"});
}

TEST_F(SchedulerConfigCheckTest, MissingResourceAndUnmanagedAliasAreNamed) {
  CheckReport r = Check(Shipped(kEntry, ""));
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[0].managedResources: missing \"nvidia.com/a10g\"",
              "offerings[20]", "never reach the extender"});
  r = Check(Shipped(kAliasEntry, ""));
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[0].managedResources: alias \"nvidia.com/gpu-a100\" of "
              "nvidia.com/a100 is not managed"});
}

TEST_F(SchedulerConfigCheckTest, ExtraNameAndIgnoredBySchedulerAreErrors) {
  CheckReport r = Check(Shipped(kEntry, std::string(kEntry) + "  - name: example.com/tpu\n"
                                                              "    ignoredByScheduler: false\n"));
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[0].managedResources[",
              "].name: \"example.com/tpu\" is "
              "not in the built-in catalog (extra)"});
  r = Check(Shipped("  - name: nvidia.com/gpu\n    ignoredByScheduler: false\n",
                    "  - name: nvidia.com/gpu\n    ignoredByScheduler: true\n"));
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[0].managedResources[0].ignoredByScheduler: true"});
}

TEST_F(SchedulerConfigCheckTest, KubeSchedulerValidationOfExtenders) {
  // Zero, missing and negative weight with prioritizeVerb set.
  CheckReport r = Check(Shipped("weight: 5", "weight: 0"));
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[0].weight: Invalid value: 0: must have a positive "
              "weight applied to it"});
  r = Check(Shipped("weight: 5", "weight: -3"));
  OneLine(r, {"extenders[0].weight: Invalid value: -3: must have a positive weight"});
  r = Check(Shipped("  weight: 5\n", ""));
  OneLine(r, {"extenders[0].weight: Invalid value: 0: must have a positive weight"});
  // Without prioritizeVerb the weight does not matter.
  std::string no_prioritize = Shipped("  prioritizeVerb: prioritize\n", "");
  no_prioritize.replace(no_prioritize.find("weight: 5"), 9, "weight: 0");
  r = Check(no_prioritize);
  EXPECT_EQ(r.errors(), 0) << Dump(r);

  // Two binders.
  const std::string second =
      "- urlPrefix: http://other-extender:8080\n"
      "  filterVerb: filter\n"
      "  bindVerb: bind\n"
      "  managedResources:\n"
      "  - name: example.com/fpga\n";
  r = Check(Shipped() + second);
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders: Invalid value: \"found 2 extenders implementing "
              "bind\": only one extender can implement bind (extenders[0], extenders[1])"});

  // Invalid names, as kube-scheduler's IsExtendedResourceName sees them.
  for (const char* bad : {"kubernetes.io/gpu", "requests.nvidia.com/gpu", "gpu", "nvidia.com/-x",
                          "Nvidia.com/gpu", "a/b/c"}) {
    SCOPED_TRACE(bad);
    r = Check(Shipped(kEntry, absl::StrCat(kEntry, "  - name: ", bad, "\n")));
    OneLine(r, {absl::StrCat("].name: Invalid value: \"", bad,
                             "\": is an invalid extended resource name")});
  }

  // Duplicates within one extender and across extenders.
  r = Check(Shipped(kEntry, std::string(kEntry) + kEntry));
  OneLine(r, {"error: ksc.yaml: extenders[0].managedResources[",
              "].name: Invalid value: "
              "\"nvidia.com/a10g\": duplicate extender managed resource name (first at "
              "extenders[0].managedResources["});
  r = Check(Shipped() +
            "- urlPrefix: http://other-extender:8080\n  filterVerb: filter\n"
            "  managedResources:\n  - name: nvidia.com/gpu\n");
  EXPECT_EQ(r.errors(), 1) << Dump(r);
  OneLine(r, {"error: ksc.yaml: extenders[1].managedResources[0].name: Invalid value: "
              "\"nvidia.com/gpu\": duplicate extender managed resource name (first at "
              "extenders[0].managedResources[0])"});
}

TEST_F(SchedulerConfigCheckTest, StrictDecodingAndTypes) {
  CheckReport r = Check(Shipped("  nodeCacheCapable: true\n", "  nodeCacheCapabel: true\n"));
  OneLine(r, {"error: ksc.yaml: extenders[0]: unknown field \"nodeCacheCapabel\""});
  r = Check(Shipped("weight: 5", "weight: \"5\""));
  OneLine(r, {"error: ksc.yaml: extenders[0].weight: must be an integer, got \"5\""});
  r = Check(Shipped("ignorable: false", "ignorable: maybe"));
  OneLine(r, {"extenders[0].ignorable: must be true or false, got \"maybe\""});
  r = Check(Shipped("httpTimeout: 5s", "httpTimeout: five"));
  OneLine(r, {"extenders[0].httpTimeout: \"five\" is not a duration"});
  r = Check(
      Shipped("    ignoredByScheduler: false\n", "    ignoredByScheduler: false\n    x: 1\n"));
  OneLine(r, {"extenders[0].managedResources[0]: unknown field \"x\""});
}

TEST_F(SchedulerConfigCheckTest, WarningsForWeakerSettings) {
  CheckReport r = Check(Shipped("ignorable: false", "ignorable: true"));
  EXPECT_EQ(r.errors(), 0) << Dump(r);
  OneLine(r, {"warning: ksc.yaml: extenders[0].ignorable: true"});
  EXPECT_FALSE(r.Failed(false));
  EXPECT_TRUE(r.Failed(true));
  r = Check(Shipped("percentageOfNodesToScore: 100\n", ""));
  OneLine(r, {"warning: ksc.yaml: percentageOfNodesToScore: unset (adaptive sampling)"});
  r = Check(Shipped("percentageOfNodesToScore: 100\n", "percentageOfNodesToScore: 50\n"));
  OneLine(r, {"warning: ksc.yaml: percentageOfNodesToScore: is 50, not 100"});
  // A profile's own value wins over the top-level one.
  r = Check(Shipped() +
            "profiles:\n- schedulerName: default-scheduler\n"
            "  percentageOfNodesToScore: 30\n");
  OneLine(r, {"warning: ksc.yaml: profiles[0].percentageOfNodesToScore: is 30"});
  r = Check(Shipped("percentageOfNodesToScore: 100\n", "") +
            "profiles:\n- schedulerName: default-scheduler\n  percentageOfNodesToScore: 100\n");
  EXPECT_THAT(r.problems(), IsEmpty()) << Dump(r);
}

TEST_F(SchedulerConfigCheckTest, BrokenFilesAreProblemsNotCrashes) {
  struct Case {
    std::string yaml;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"extenders: [\n", "error: ksc.yaml: YAML syntax error at line"},
      {"a: 1\n---\nb: 2\n", "error: ksc.yaml: holds 2 YAML documents"},
      {"- 1\n- 2\n", "must be a KubeSchedulerConfiguration mapping, got a list"},
      {"", "error: ksc.yaml: empty: want a KubeSchedulerConfiguration"},
      {"~\n", "must be a KubeSchedulerConfiguration mapping, got null"},
      {"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
       "percentageOfNodesToScore: 100\n",
       "error: ksc.yaml: extenders: no extenders"},
      {"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
       "percentageOfNodesToScore: 100\nextenders: {a: 1}\n",
       "error: ksc.yaml: extenders: must be a list, got a mapping"},
      {"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
       "percentageOfNodesToScore: 100\nextenders:\n- urlPrefix: http://x\n  filterVerb: f\n",
       "error: ksc.yaml: extenders: no gpu-slice-extender entry"},
      {"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
       "percentageOfNodesToScore: 100\nextenders:\n- urlPrefix: http://gpu-slice-extender\n"
       "  filterVerb: filter\n",
       "error: ksc.yaml: extenders[0].managedResources: empty"},
      {"apiVersion: v1\nkind: Pod\n", "error: ksc.yaml: kind: want KubeSchedulerConfiguration"},
      {"apiVersion: [1]\n", "error: ksc.yaml: apiVersion: must be a string, got a list"},
      {"extenders:\n- 7\n", "error: ksc.yaml: extenders[0]: must be a mapping, got a scalar"},
      {"extenders:\n- managedResources: [7]\n",
       "extenders[0].managedResources[0]: must be a mapping, got a scalar"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.yaml);
    CheckReport r = Check(c.yaml);
    EXPECT_TRUE(r.Failed(false));
    OneLine(r, {c.needle});
  }
  const CheckReport r = Check(std::string(5u << 20, ' '));
  OneLine(r, {"at most 4 MiB"});
}

// ---------------------------------------------------------------------------------------
// Check: nodes

NodeAdvertisement Node(const std::string& name, std::map<std::string, int64_t> allocatable,
                       std::map<std::string, std::string> labels = {}) {
  for (auto& [k, v] : allocatable) v *= 1000;
  return {name, std::move(labels), std::move(allocatable)};
}

TEST(CatalogNodesCheckTest, UnknownGpuResourcesAreErrors) {
  const std::vector<NodeAdvertisement> nodes = {
      Node("n1",
           {{"cpu", 64},
            {"nvidia.com/mig-9g.99gb", 1},           // a profile the catalog lacks
            {"nvidia.com/rdma_shared_device_a", 1},  // network operator: not a GPU
            {"example.com/fpga", 2},                 // no GFD labels: not a GPU
            {"amd.com/gpu", 8}},                     // GFD-style labels: a GPU
           {{"amd.com/gpu.count", "8"}}),
  };
  CheckReport r;
  CheckNodes(Catalog::BuiltIn(), "built-in catalog", nodes, "snap.json", &r);
  EXPECT_EQ(r.errors(), 2) << Dump(r);
  OneLine(r, {"error: snap.json: nodes/n1: status.allocatable[\"nvidia.com/mig-9g.99gb\"]: a GPU "
              "resource the built-in catalog does not know"});
  OneLine(r, {"error: snap.json: nodes/n1: status.allocatable[\"amd.com/gpu\"]"});
  EXPECT_THAT(Dump(r),
              AllOf(Not(HasSubstr("rdma")), Not(HasSubstr("fpga")), Not(HasSubstr("\"cpu\""))));
}

TEST(CatalogNodesCheckTest, OfferingsNoNodeAdvertisesAreWarnings) {
  const Catalog catalog = MustParse(
      "apiVersion: gpu.themelio.io/v1\nkind: GpuCatalog\nofferings:\n"
      "- resource: example.com/a\n  deviceClass: a.example.com\n"
      "- resource: example.com/b\n  aliases: [example.com/b-old]\n  deviceClass: b.example.com\n"
      "- resource: example.com/c\n  deviceClass: c.example.com\n");
  CheckReport r;
  CheckNodes(catalog, "c.yaml",
             {Node("n1", {{"example.com/a", 1}}), Node("n2", {{"example.com/b-old", 0}})},
             "snap.json", &r);
  EXPECT_EQ(r.errors(), 0) << Dump(r);
  EXPECT_EQ(r.warnings(), 1) << Dump(r);
  OneLine(r, {"warning: c.yaml: offerings[2] (example.com/c): no node in snap.json advertises it"});
  EXPECT_FALSE(r.Failed(false));
  EXPECT_TRUE(r.Failed(true));
}

TEST(CatalogNodesCheckTest, UnusableAdvertisementsAreWarnings) {
  const Catalog& catalog = Catalog::BuiltIn();
  const std::vector<NodeAdvertisement> nodes = {
      // nvidia.com/a100 on an H100 node: the product does not match.
      Node("h1", {{"nvidia.com/a100", 8}}, {{"nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"}}),
      // Exclusive nvidia.com/gpu that the device plugin time-slices.
      Node("t1", {{"nvidia.com/gpu", 16}}, {{"nvidia.com/gpu.replicas", "4"}}),
      // Time-sliced offering that the node does not share.
      Node("s1", {{"nvidia.com/mig-1g.5gb.shared", 7}}, {{"nvidia.com/mig-1g.5gb.replicas", "1"}}),
      // Fine: product matches (label under the resource's base name wins).
      Node("a1", {{"nvidia.com/a100-mig-1g.5gb", 7}},
           {{"nvidia.com/a100-mig-1g.5gb.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
            {"nvidia.com/gpu.product", "something-else"}}),
  };
  CheckReport r;
  CheckNodes(catalog, "built-in catalog", nodes, "snap.json", &r);
  EXPECT_EQ(r.errors(), 0) << Dump(r);
  OneLine(r,
          {"warning: snap.json: nodes/h1: status.allocatable[\"nvidia.com/a100\"]:",
           "\"NVIDIA-H100-80GB-HBM3\" does not start with the offering's product \"NVIDIA-A100\"",
           "unusable"});
  OneLine(r, {"warning: snap.json: nodes/t1: status.allocatable[\"nvidia.com/gpu\"]: the node "
              "time-slices it (nvidia.com/gpu.replicas=4)"});
  OneLine(
      r, {"warning: snap.json: nodes/s1:", "does not share it (nvidia.com/mig-1g.5gb.replicas=1)"});
  EXPECT_THAT(Dump(r), Not(HasSubstr("nodes/a1")));
}

TEST(CheckReportTest, LineNamesSeverityFileAndField) {
  CheckReport r;
  r.Error("f.yaml", "extenders[0].weight", "bad");
  r.Warning("g.json", "", "whole file");
  EXPECT_EQ(r.problems()[0].Line(), "error: f.yaml: extenders[0].weight: bad");
  EXPECT_EQ(r.problems()[1].Line(), "warning: g.json: whole file");
  EXPECT_EQ(r.errors(), 1);
  EXPECT_EQ(r.warnings(), 1);
}

}  // namespace
}  // namespace gse
