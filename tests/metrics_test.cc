// ExtenderMetrics: the series an operator's dashboards and alerts query appear with the right
// names, labels and values after real verb calls, and the exposition passes
// `promtool check metrics` (Prometheus' own linter).
#include "extender/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "extender/extender_service.h"
#include "extender/mirror_metrics.h"
#include "extender/task_mix_metrics.h"
#include "gtest/gtest.h"
#include "scoring/decision_core.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "scoring/task_mix.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "testsupport/paths.h"

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
  // promtool from PATH (scripts/setup.sh installs it); missing, the test fails: it must not
  // pass without having checked anything.
  ASSERT_EQ(std::system("command -v promtool >/dev/null 2>&1"), 0)
      << "promtool not found on PATH (scripts/setup.sh installs it)";
  ExtenderMetrics m;
  m.ObserveRequest("filter", 200, "ok", 0.001);
  m.ObserveRequest("prioritize", 503, "error", 0.0001);
  m.ObserveFilterVerdicts("nvidia.com/mig-1g.5gb", "fits", 3);
  m.ObserveFilterNodes(3, 0);
  m.ObserveBind("nvidia.com/mig-1g.5gb", "api_error", 0.02);
  m.ObserveAffinity("nvidia.com/mig-1g.5gb.shared", "new_unit");
  m.ObserveSpill("nvidia.com/mig-1g.5gb.shared", "no_candidate_with_own_unit");
  m.ObservePreemption(1, 2);
  m.InitSeries(Catalog::BuiltIn());
  m.ObserveWatchRestart("pods");
  m.ObserveApiError("bind");
  m.ObserveDriftRepair("pod");
  m.SetLastSync(absl::Now());
  Mirror mirror(std::make_shared<Catalog>(Catalog::BuiltIn()), MirrorOptions{});
  MirrorMetrics mirror_metrics(m.registry(), &mirror);
  mirror_metrics.Refresh();
  const std::string text = m.Serialize();

  char path[] = "/tmp/gse_metrics_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << text; }
  FILE* pipe = popen(absl::StrCat("promtool check metrics < ", path, " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  const int rc = pclose(pipe);
  unlink(path);
  EXPECT_EQ(rc, 0) << output << "\n--- exposition:\n" << text;
  EXPECT_EQ(output, "") << text;
}

// Dashboards divide and alerts compare these series; a quiet extender must answer them with 0,
// not with nothing (and a series born with its first increments loses them in rate()).
TEST(MetricsTest, SeriesThatQueriesNeedExistBeforeTraffic) {
  ExtenderMetrics metrics;
  Mirror mirror(std::make_shared<Catalog>(Catalog::BuiltIn()), MirrorOptions{});
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.metrics = &metrics;
  ExtenderService service(&mirror, MakePolicy("affinity-pack").value(), &binder, options);
  const std::string text = metrics.Serialize();

  int time_sliced = 0;
  for (const Offering& o : Catalog::BuiltIn().offerings()) {
    for (const char* outcome : {"bound", "unit_taken", "quota", "no_fit", "api_error",
                                "api_unknown", "client_throttled", "lease_lost"}) {
      EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", o.resource}, {"outcome", outcome}}), 0)
          << o.resource << " " << outcome;
    }
    const double want = o.sharing == Sharing::kTimeSliced ? 0 : -1;  // -1: no series
    time_sliced += o.sharing == Sharing::kTimeSliced;
    for (const char* placement : {"own_unit", "new_unit"}) {
      EXPECT_EQ(Sample(text, "gse_affinity_placements_total",
                       {{"offering", o.resource}, {"placement", placement}}),
                want)
          << o.resource;
    }
    EXPECT_EQ(Sample(text, "gse_affinity_spills_total",
                     {{"offering", o.resource}, {"cause", "no_candidate_with_own_unit"}}),
              want)
        << o.resource;
  }
  EXPECT_GT(time_sliced, 0);
  for (const char* outcome : {"not_synced", "not_leader", "unknown_pod", "bad_request",
                              "api_error", "api_unknown", "client_throttled", "lease_lost",
                              "overloaded"}) {
    EXPECT_EQ(Sample(text, "gse_bind_total", {{"offering", "none"}, {"outcome", outcome}}), 0) << outcome;
  }
  for (const char* verb : {"filter", "prioritize", "bind", "preempt"}) {
    EXPECT_EQ(Sample(text, "gse_http_request_duration_seconds_count", {{"verb", verb}}), 0) << verb;
    EXPECT_EQ(Sample(text, "gse_http_requests_in_flight", {{"verb", verb}}), 0) << verb;
    EXPECT_EQ(Sample(text, "gse_http_requests_total", {{"verb", verb}, {"code", "200"}, {"outcome", "ok"}}), 0)
        << verb;
  }
  for (const char* r : {"nodes", "pods", "namespaces", "resourcequotas", "other"}) {
    EXPECT_EQ(Sample(text, "gse_mirror_watch_restarts_total", {{"resource", r}}), 0) << r;
  }
  for (const char* op : {"list", "watch", "get", "bind", "lease", "other"}) {
    EXPECT_EQ(Sample(text, "gse_api_errors_total", {{"op", op}}), 0) << op;
  }
  for (const char* kind : {"pod", "node", "project_quota", "other"}) {
    EXPECT_EQ(Sample(text, "gse_mirror_drift_repairs_total", {{"kind", kind}}), 0) << kind;
  }
  for (const char* op : {"bind", "lease", "other"}) {
    EXPECT_EQ(Sample(text, "gse_api_write_wait_seconds_count", {{"op", op}}), 0) << op;
    EXPECT_EQ(Sample(text, "gse_api_writes_not_sent_total", {{"op", op}}), 0) << op;
  }
  EXPECT_EQ(Sample(text, "gse_mirror_last_sync_timestamp_seconds", {}), 0);
  for (const char* result : {"read", "failed"}) {
    EXPECT_EQ(Sample(text, "gse_dra_claim_reads_total", {{"result", result}}), 0) << result;
  }
}

// issue 14: what the write limiter did, per write; requests in flight per verb.
TEST(MetricsTest, WriteLimiterAndInFlightSeries) {
  ExtenderMetrics m;
  m.ObserveApiWrite("bind", true, absl::ZeroDuration());
  m.ObserveApiWrite("bind", true, absl::Milliseconds(1500));
  m.ObserveApiWrite("bind", false, absl::ZeroDuration());
  m.ObserveApiWrite("lease", true, absl::Milliseconds(3));
  m.ObserveApiWrite("patch", false, absl::ZeroDuration());  // outside the vocabulary: "other"
  m.AddRequestsInFlight("bind", 1);
  m.AddRequestsInFlight("bind", 1);
  m.AddRequestsInFlight("filter", 1);
  m.AddRequestsInFlight("filter", -1);
  const std::string text = m.Serialize();
  // Sent writes are in the histogram with their wait; writes not sent are counted apart.
  EXPECT_EQ(Sample(text, "gse_api_write_wait_seconds_count", {{"op", "bind"}}), 2);
  EXPECT_DOUBLE_EQ(Sample(text, "gse_api_write_wait_seconds_sum", {{"op", "bind"}}), 1.5);
  EXPECT_EQ(Sample(text, "gse_api_write_wait_seconds_bucket", {{"op", "bind"}, {"le", "1"}}), 1);
  EXPECT_EQ(Sample(text, "gse_api_write_wait_seconds_bucket", {{"op", "bind"}, {"le", "2"}}), 2);
  EXPECT_EQ(Sample(text, "gse_api_writes_not_sent_total", {{"op", "bind"}}), 1);
  EXPECT_EQ(Sample(text, "gse_api_write_wait_seconds_count", {{"op", "lease"}}), 1);
  EXPECT_EQ(Sample(text, "gse_api_writes_not_sent_total", {{"op", "other"}}), 1);
  EXPECT_EQ(Sample(text, "gse_api_writes_not_sent_total", {{"op", "patch"}}), -1);
  EXPECT_EQ(Sample(text, "gse_http_requests_in_flight", {{"verb", "bind"}}), 2);
  EXPECT_EQ(Sample(text, "gse_http_requests_in_flight", {{"verb", "filter"}}), 0);
}

// The live-cluster work reports through these; whatever it passes, the label values stay the
// documented vocabulary (anything else is "other"), so the series count cannot grow.
TEST(MetricsTest, LiveClusterCountersKeepTheirVocabulary) {
  ExtenderMetrics m;
  m.ObserveWatchRestart("pods");
  m.ObserveWatchRestart("pods");
  m.ObserveWatchRestart("secrets");
  m.ObserveApiError("bind", 2);
  m.ObserveApiError("patch-some-node-xyz");
  m.ObserveDriftRepair("pod", 3);
  m.ObserveDriftRepair("node");
  m.ObserveDriftRepair("node", 0);   // nothing
  m.ObserveDriftRepair("node", -4);  // nothing: counters never go down
  m.SetLastSync(absl::FromUnixSeconds(1700000000));
  m.ObserveDraClaimRead(true);
  m.ObserveDraClaimRead(true);
  m.ObserveDraClaimRead(false);
  std::string text = m.Serialize();
  EXPECT_EQ(Sample(text, "gse_dra_claim_reads_total", {{"result", "read"}}), 2);
  EXPECT_EQ(Sample(text, "gse_dra_claim_reads_total", {{"result", "failed"}}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_watch_restarts_total", {{"resource", "pods"}}), 2);
  EXPECT_EQ(Sample(text, "gse_mirror_watch_restarts_total", {{"resource", "other"}}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_watch_restarts_total", {{"resource", "secrets"}}), -1);
  EXPECT_EQ(Sample(text, "gse_api_errors_total", {{"op", "bind"}}), 2);
  EXPECT_EQ(Sample(text, "gse_api_errors_total", {{"op", "other"}}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_drift_repairs_total", {{"kind", "pod"}}), 3);
  EXPECT_EQ(Sample(text, "gse_mirror_drift_repairs_total", {{"kind", "node"}}), 1);
  EXPECT_DOUBLE_EQ(Sample(text, "gse_mirror_last_sync_timestamp_seconds", {}), 1700000000);
  int api_series = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    api_series += absl::StartsWith(line, "gse_api_errors_total{");
  }
  EXPECT_EQ(api_series, 6) << text;
  m.SetLastSync(absl::InfinitePast());  // never synced
  EXPECT_EQ(Sample(m.Serialize(), "gse_mirror_last_sync_timestamp_seconds", {}), 0);
}

// A node with two 1g.5gb slices time-sliced 4 ways; team-a holds two tickets of slice 0 (our
// annotation) and reserves a third; team-b's pod was bound by something else without an
// assignment, so the mirror charges it a whole slice.
constexpr char kMirrorList[] = R"({"kind":"List","apiVersion":"v1","items":[
 {"kind":"Node","apiVersion":"v1","metadata":{"name":"ts","labels":{
   "nvidia.com/mig-1g.5gb.count":"2","nvidia.com/mig-1g.5gb.replicas":"4"}},
  "status":{"allocatable":{"nvidia.com/mig-1g.5gb.shared":"8"}}},
 {"kind":"ResourceQuota","apiVersion":"v1","metadata":{"name":"gpu","namespace":"team-a"},
  "spec":{"hard":{"requests.nvidia.com/mig-1g.5gb.shared":"8"}}},
 {"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"team-a","uid":"ua",
   "annotations":{"gpu.themelio.io/unit":"ts/nvidia.com/mig-1g.5gb.shared/0","gpu.themelio.io/amount":"1"}},
  "spec":{"nodeName":"ts","containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb.shared":"1"}}}]},
  "status":{"phase":"Running"}},
 {"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"team-a","uid":"ub",
   "annotations":{"gpu.themelio.io/unit":"ts/nvidia.com/mig-1g.5gb.shared/0","gpu.themelio.io/amount":"1"}},
  "spec":{"nodeName":"ts","containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb.shared":"1"}}}]},
  "status":{"phase":"Running"}},
 {"kind":"Pod","apiVersion":"v1","metadata":{"name":"c","namespace":"team-b","uid":"uc"},
  "spec":{"nodeName":"ts","schedulerName":"other-scheduler",
   "containers":[{"name":"c","resources":{"limits":{"nvidia.com/mig-1g.5gb.shared":"1"}}}]},
  "status":{"phase":"Running"}}
]})";

// fgd's task mix and the host demand of pods without a GPU, as --policy=fgd learns them.
TEST(MetricsTest, FgdGaugesShowTheLearnedMixAndTheOtherHostDemand) {
  ExtenderMetrics metrics;
  auto catalog = std::make_shared<const Catalog>(Catalog::BuiltIn());
  Mirror mirror(catalog, MirrorOptions{});
  auto pod = [](const std::string& name, const std::string& node, int64_t cpu_milli, bool gpu) {
    PodObject p;
    p.name = name;
    p.namespace_name = "team-a";
    p.uid = name + "-uid";
    p.node_name = node;
    ContainerResources c;
    c.name = "c";
    c.requests_milli["cpu"] = cpu_milli;
    if (gpu) c.requests_milli["nvidia.com/gpu"] = 1000;
    if (gpu) c.limits_milli["nvidia.com/gpu"] = 1000;
    p.containers.push_back(c);
    return p;
  };
  mirror.Write([&](ClusterState& s) {
    NodeObject n;
    n.name = "n1";
    n.allocatable_milli["nvidia.com/gpu"] = 4000;
    n.allocatable_milli["cpu"] = 64000;
    n.allocatable_milli["memory"] = (int64_t{256} << 30) * 1000;
    n.allocatable_milli["pods"] = 110000;
    s.ApplyNode(n);
    s.ApplyPod(pod("train", "n1", 8000, /*gpu=*/true));
    s.ApplyPod(pod("web", "n1", 4000, /*gpu=*/false));
  });
  TaskMixOptions o;
  o.republish_every = 1;
  o.half_life_pods = 1000000;  // no decay to speak of: the ratio is 4 / 8
  absl::StatusOr<std::unique_ptr<LearnedFgdPolicy>> policy =
      LearnedFgdPolicy::Create(catalog, CatalogTaskMix(*catalog), o, MirrorHostFree);
  ASSERT_TRUE(policy.ok()) << policy.status();
  TaskMixMetrics mix_metrics(metrics.registry(), policy->get());
  mix_metrics.Refresh();
  std::string text = metrics.Serialize();
  EXPECT_EQ(Sample(text, "gse_fgd_task_mix_pods_observed", {}), 0);
  EXPECT_EQ(Sample(text, "gse_fgd_other_host_demand_ratio", {{"resource", "cpu"}}), 0);

  DecisionCore core(&mirror, policy->get());
  core.Filter(pod("next", "", 8000, /*gpu=*/true), {"n1"});
  mix_metrics.Refresh();
  text = metrics.Serialize();
  EXPECT_EQ(Sample(text, "gse_fgd_task_mix_pods_observed", {}), 1);
  EXPECT_GT(Sample(text, "gse_fgd_task_mix_cpu_cores", {{"resource", "nvidia.com/gpu"}, {"amount", "1"}}), 0);
  EXPECT_NEAR(Sample(text, "gse_fgd_other_host_demand_ratio", {{"resource", "cpu"}}), 0.5, 1e-3);
  EXPECT_EQ(Sample(text, "gse_fgd_other_host_demand_ratio", {{"resource", "memory"}}), 0);
}

TEST(MetricsTest, MirrorGaugesCountUnitsProjectsAndPodSources) {
  ExtenderMetrics metrics;
  const Catalog& catalog = Catalog::BuiltIn();
  Mirror mirror(std::make_shared<Catalog>(catalog), MirrorOptions{});
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(kMirrorList);
  ASSERT_TRUE(batch.ok()) << batch.status();
  mirror.Write([&](ClusterState& s) { s.ApplyBatch(*batch); });
  const std::string shared = "nvidia.com/mig-1g.5gb.shared";
  Assignment a;
  a.node = "ts";
  a.offering = catalog.Find(shared)->id;
  a.units = {0};
  ASSERT_TRUE(mirror.Write([&](ClusterState& s) {
                      return s.Reserve(PodClaim{"team-a/d", "ud", "team-a", "team-a"}, a);
                    }).ok());

  MirrorMetrics mirror_metrics(metrics.registry(), &mirror);
  mirror_metrics.SetSynced(true);
  mirror_metrics.SetLeader(false);
  const AuditReport audit = mirror_metrics.Refresh();
  EXPECT_EQ(audit.oversubscribed_units, 0);
  std::string text = metrics.Serialize();

  // Slice 0: 3 of 4 tickets (partial); slice 1: charged whole (full).
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", shared}, {"state", "partial"}}), 1);
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", shared}, {"state", "full"}}), 1);
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", shared}, {"state", "free"}}), 0);
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", shared}, {"state", "draining"}}), 0);
  EXPECT_EQ(Sample(text, "gse_inventory_slots", {{"offering", shared}}), 8);
  EXPECT_EQ(Sample(text, "gse_inventory_slots_used", {{"offering", shared}}), 7);
  // Offerings no node has still answer with 0.
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", "nvidia.com/gpu"}, {"state", "free"}}), 0);
  // Quota 8 tickets; team-a owns one slice, charged its 4 tickets, team-b (no quota:
  // unlimited) one.
  EXPECT_EQ(Sample(text, "gse_project_units", {{"project", "team-a"}, {"offering", shared}}), 4);
  EXPECT_EQ(Sample(text, "gse_project_quota_units", {{"project", "team-a"}, {"offering", shared}}), 8);
  EXPECT_EQ(Sample(text, "gse_project_units", {{"project", "team-b"}, {"offering", shared}}), 4);
  EXPECT_EQ(Sample(text, "gse_project_quota_units", {{"project", "team-b"}, {"offering", shared}}), -1);
  EXPECT_EQ(Sample(text, "gse_mirror_pods", {{"source", "confirmed"}}), 2);
  EXPECT_EQ(Sample(text, "gse_mirror_pods", {{"source", "reserved"}}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_pods", {{"source", "charged"}}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_nodes", {}), 1);
  EXPECT_EQ(Sample(text, "gse_mirror_synced", {}), 1);
  EXPECT_EQ(Sample(text, "gse_leader", {}), 0);
  EXPECT_EQ(Sample(text, "gse_audit_oversubscribed_units", {}), 0);
  EXPECT_EQ(Sample(text, "gse_audit_runs_total", {}), 1);
  EXPECT_GE(Sample(text, "gse_audit_duration_seconds", {}), 0);

  // The other scheduler's pod ends and team-a's quota is dropped: no stale series remain.
  mirror.Write([&](ClusterState& s) {
    s.RemovePod(s.FindPod("team-b/c")->uid, "team-b/c");
    s.RemoveQuota("team-a", "gpu");
  });
  mirror_metrics.Refresh();
  text = metrics.Serialize();
  EXPECT_EQ(Sample(text, "gse_mirror_pods", {{"source", "charged"}}), 0);
  EXPECT_EQ(Sample(text, "gse_inventory_units", {{"offering", shared}, {"state", "free"}}), 1);
  EXPECT_EQ(Sample(text, "gse_project_units", {{"project", "team-b"}, {"offering", shared}}), -1);
  EXPECT_EQ(Sample(text, "gse_project_quota_units", {{"project", "team-a"}, {"offering", shared}}), -1);
  EXPECT_EQ(Sample(text, "gse_project_units", {{"project", "team-a"}, {"offering", shared}}), 4);
  EXPECT_EQ(Sample(text, "gse_audit_runs_total", {}), 2);
}

}  // namespace
}  // namespace gse
