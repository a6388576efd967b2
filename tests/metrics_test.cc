// ExtenderMetrics: the series an operator's dashboards and alerts query appear with the right
// names, labels and values after real verb calls, and the exposition passes
// `promtool check metrics` (Prometheus' own linter).
#include "extender/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "extender/extender_service.h"
#include "gtest/gtest.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "tests/testing/paths.h"

namespace gse {
namespace {

using Labels = std::map<std::string, std::string>;

// Reads one sample from the text exposition: the value of `name{labels}` (labels exactly),
// or -1 when the series is absent. Label values in these tests contain no escapes.
double Sample(const std::string& text, const std::string& name, const Labels& labels) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    absl::string_view series = line.substr(0, space);
    absl::string_view metric = brace == absl::string_view::npos || brace > space
                                   ? series
                                   : series.substr(0, brace);
    if (metric != name) continue;
    Labels found;
    if (brace != absl::string_view::npos && brace < space) {
      absl::string_view body = series.substr(brace + 1, series.size() - brace - 2);
      for (absl::string_view pair : absl::StrSplit(body, "\",", absl::SkipEmpty())) {
        const size_t eq = pair.find("=\"");
        std::string value(pair.substr(eq + 2));
        if (!value.empty() && value.back() == '"') value.pop_back();
        found[std::string(pair.substr(0, eq))] = value;
      }
    }
    if (found != labels) continue;
    double v = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &v)) << line;
    return v;
  }
  return -1;
}

std::string Protocol(const std::string& rel) {
  return gse::testing::ReadFileOrDie(gse::testing::SharedPath("protocol/" + rel));
}

TEST(MetricsTest, DirectObservationsProduceLabelledSeries) {
  ExtenderMetrics m;
  m.ObserveRequest("filter", 200, "ok", 0.0003);
  m.ObserveRequest("filter", 200, "ok", 0.002);
  m.ObserveRequest("bind", 400, "bad_request", 0.00001);
  m.ObserveFilterVerdicts("nvidia.com/mig-1g.5gb", "no_free_unit", 4998);
  m.ObserveFilterVerdict("nvidia.com/mig-1g.5gb", "fits");
  m.ObserveFilterVerdict("nvidia.com/mig-1g.5gb", "fits");
  m.ObserveFilterVerdicts("nvidia.com/mig-1g.5gb", "node_unknown", 0);  // no series for 0
  m.ObserveFilterNodes(2, 4998);
  m.ObserveBind("nvidia.com/mig-1g.5gb", "bound", 0.004);
  m.ObserveBind("none", "unknown_pod", -1);  // binder not called: no API observation
  m.ObserveAffinity("nvidia.com/mig-1g.5gb.shared", "own_unit");
  m.ObserveSpill("nvidia.com/mig-1g.5gb.shared", "no_candidate_with_own_unit");
  m.ObservePreemption(3, 5);
  const std::string text = m.Serialize();

  EXPECT_EQ(Sample(text, "gse_http_requests_total", {{"verb", "filter"}, {"code", "200"}, {"outcome", "ok"}}), 2);
  EXPECT_EQ(Sample(text, "gse_http_requests_total",
                   {{"verb", "bind"}, {"code", "400"}, {"outcome", "bad_request"}}),
            1);
  EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_count", {{"verb", "filter"}}), 2);
  EXPECT_NEAR(Sample(text, "gse_http_request_duration_seconds_sum", {{"verb", "filter"}}), 0.0023, 1e-9);
  // 0.0003 s lands in the 0.0005 bucket, 0.002 s does not; everything is under +Inf.
  EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_bucket", {{"verb", "filter"}, {"le", "0.0005"}}), 1);
  EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_bucket", {{"verb", "filter"}, {"le", "+Inf"}}), 2);
  EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_bucket", {{"verb", "bind"}, {"le", "5e-05"}}), 1);
  EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_bucket", {{"verb", "bind"}, {"le", "10"}}), 1);

  EXPECT_EQ(Sample(text, "gse_filter_verdicts_total",
                   {{"offering", "nvidia.com/mig-1g.5gb"}, {"reason", "no_free_unit"}}),
            4998);
  EXPECT_EQ(Sample(text, "gse_filter_verdicts_total", {{"offering", "nvidia.com/mig-1g.5gb"}, {"reason", "fits"}}), 2);
  EXPECT_EQ(Sample(text, "gse_filter_verdicts_total",
                   {{"offering", "nvidia.com/mig-1g.5gb"}, {"reason", "node_unknown"}}),
            -1);
  EXPECT_EQ(Sample(text, "gse_filter_nodes_sum", {{"result", "failed"}}), 4998);
  EXPECT_EQ(Sample(text, "gse_filter_nodes_count", {{"result", "passed"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", "nvidia.com/mig-1g.5gb"}, {"outcome", "bound"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", "none"}, {"outcome", "unknown_pod"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_api_duration_seconds_count", {}), 1);
  EXPECT_EQ(Sample(text, "gse_affinity_placements_total",
                   {{"offering", "nvidia.com/mig-1g.5gb.shared"}, {"placement", "own_unit"}}),
            1);
  EXPECT_EQ(Sample(text, "gse_affinity_spills_total",
                   {{"offering", "nvidia.com/mig-1g.5gb.shared"}, {"cause", "no_candidate_with_own_unit"}}),
            1);
  EXPECT_EQ(Sample(text, "gse_preemption_nodes_total", {}), 3);
  EXPECT_EQ(Sample(text, "gse_preemption_victims_total", {}), 5);

  // Build info is a constant-1 gauge whose labels carry the version.
  bool build_info = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, "gse_build_info{")) {
      build_info = true;
      EXPECT_TRUE(absl::StrContains(line, "revision=\"")) << line;
      EXPECT_TRUE(absl::StrContains(line, "version=\"")) << line;
      EXPECT_TRUE(absl::EndsWith(line, " 1")) << line;
    }
  }
  EXPECT_TRUE(build_info) << text;
}

TEST(MetricsTest, ServiceCallsAreCounted) {
  ExtenderMetrics metrics;
  Mirror mirror(std::make_shared<Catalog>(Catalog::BuiltIn()), MirrorOptions{});
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.metrics = &metrics;
  ExtenderService service(&mirror, MakePolicy("affinity-pack").value(), &binder, options);

  // Nodes mode: node a fits, node b's time-sliced slices are unusable as the catalog's
  // exclusive mig-1g.5gb.
  ASSERT_EQ(service.Filter(Protocol("filter-request.json")).status, 200);
  ASSERT_EQ(service.Bind(Protocol("bind-request.json")).body, R"({"Error":""})");
  ASSERT_EQ(service.Bind(R"({"PodName":"ghost","PodNamespace":"x","PodUID":"u","Node":"n"})").status, 200);
  ASSERT_EQ(service.Bind("{").status, 400);
  service.Preempt(Protocol("preempt-request-nodecache.json"));
  const std::string text = metrics.Serialize();

  const std::string mig = "nvidia.com/mig-1g.5gb";
  EXPECT_EQ(Sample(text, "gse_filter_verdicts_total", {{"offering", mig}, {"reason", "fits"}}), 1);
  EXPECT_EQ(Sample(text, "gse_filter_verdicts_total", {{"offering", mig}, {"reason", "offering_unusable"}}), 1);
  EXPECT_EQ(Sample(text, "gse_filter_nodes_sum", {{"result", "passed"}}), 1);
  EXPECT_EQ(Sample(text, "gse_filter_nodes_sum", {{"result", "failed"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", mig}, {"outcome", "bound"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", "none"}, {"outcome", "unknown_pod"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", "none"}, {"outcome", "bad_request"}}), 1);
  EXPECT_EQ(Sample(text, "gse_bind_api_duration_seconds_count", {}), 1);
  // Exclusive offerings have no affinity placements.
  EXPECT_EQ(Sample(text, "gse_affinity_placements_total", {{"offering", mig}, {"placement", "new_unit"}}), -1);
  // The preemption's victim is unknown to the mirror while node a still has free slices, so
  // the pod already fits there: the node is proposed with its one victim.
  EXPECT_EQ(Sample(text, "gse_preemption_nodes_total", {}), 1);
  EXPECT_EQ(Sample(text, "gse_preemption_victims_total", {}), 1);
}

TEST(MetricsTest, TimeSlicedPlacementsCountOwnAndNewUnits) {
  ExtenderMetrics metrics;
  Mirror mirror(std::make_shared<Catalog>(Catalog::BuiltIn()), MirrorOptions{});
  NodeObject node;
  node.name = "ts";
  node.labels["nvidia.com/mig-1g.5gb.count"] = "2";
  node.labels["nvidia.com/mig-1g.5gb.replicas"] = "4";
  node.allocatable_milli["nvidia.com/mig-1g.5gb.shared"] = 8000;
  mirror.Write([&](ClusterState& s) { return s.ApplyNode(node); });
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.metrics = &metrics;
  ExtenderService service(&mirror, MakePolicy("affinity-pack").value(), &binder, options);
  for (const std::string name : {"a", "b", "c"}) {
    const std::string pod = absl::StrCat(
        R"({"metadata":{"name":")", name, R"(","namespace":"ml-team","uid":"uid-)", name,
        R"("},"spec":{"containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb.shared":"1"}}}]}})");
    ASSERT_EQ(service.Filter(absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":["ts"]})")).status,
              200);
    ASSERT_EQ(service.Bind(absl::StrCat(R"({"PodName":")", name,
                                        R"(","PodNamespace":"ml-team","PodUID":"uid-)", name,
                                        R"(","Node":"ts"})"))
                  .body,
              R"({"Error":""})");
  }
  const std::string text = metrics.Serialize();
  const std::string shared = "nvidia.com/mig-1g.5gb.shared";
  EXPECT_EQ(Sample(text, "gse_affinity_placements_total", {{"offering", shared}, {"placement", "new_unit"}}), 1);
  EXPECT_EQ(Sample(text, "gse_affinity_placements_total", {{"offering", shared}, {"placement", "own_unit"}}), 2);
}

TEST(MetricsTest, ExpositionPassesPromtool) {
  if (access("/usr/bin/promtool", X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  ExtenderMetrics m;
  m.ObserveRequest("filter", 200, "ok", 0.001);
  m.ObserveRequest("prioritize", 503, "error", 0.0001);
  m.ObserveFilterVerdicts("nvidia.com/mig-1g.5gb", "fits", 3);
  m.ObserveFilterNodes(3, 0);
  m.ObserveBind("nvidia.com/mig-1g.5gb", "api_error", 0.02);
  m.ObserveAffinity("nvidia.com/mig-1g.5gb.shared", "new_unit");
  m.ObserveSpill("nvidia.com/mig-1g.5gb.shared", "no_candidate_with_own_unit");
  m.ObservePreemption(1, 2);
  const std::string text = m.Serialize();

  char path[] = "/tmp/gse_metrics_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << text; }
  FILE* pipe = popen(absl::StrCat("/usr/bin/promtool check metrics < ", path, " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int rc = pclose(pipe);
  unlink(path);
  EXPECT_EQ(rc, 0) << output << "\n--- exposition:\n" << text;
  EXPECT_EQ(output, "") << text;
}

}  // namespace
}  // namespace gse
