// The number of Prometheus series must not grow with the cluster (issue 5: "at 5,000 nodes
// the series count must stay bounded; print it"). The same workload — a few hundred GPU pods
// of 40 projects through filter -> prioritize -> bind over the real HTTP server, plus preempt,
// a malformed bind, an unknown pod, health and metrics scrapes — runs against synthetic
// clusters of 500 and 5,000 nodes (perf/synthetic_cluster; 500 candidates per filter, as
// kube-scheduler sends at 5,000 nodes), the mirror gauges are refreshed,
// and every sample line of /metrics is counted. The counts must be equal (no series depends on
// a node or a pod) and below 2,000, and no label value may name a node or a pod.
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "extender/metrics.h"
#include "extender/mirror_metrics.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "perf/synthetic_cluster.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

constexpr int kProjects = 40;
constexpr int kPods = 300;
constexpr int kMaxSeries = 2000;

struct SeriesCount {
  size_t total = 0;
  std::map<std::string, size_t> per_family;  // metric name (with _bucket/_sum/_count)
  std::vector<std::string> label_values;
  std::vector<std::string> verdicts;  // gse_filter_verdicts_total label sets (diagnostics)
};

// Counts the sample lines of a text exposition: each is one series in Prometheus.
SeriesCount CountSeries(const std::string& text) {
  SeriesCount count;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (line[0] == '#') continue;
    ++count.total;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    absl::string_view name = line.substr(0, std::min(brace, space));
    ++count.per_family[std::string(name)];
    if (name == "gse_filter_verdicts_total") count.verdicts.emplace_back(line.substr(0, space));
    if (brace == absl::string_view::npos) continue;
    absl::string_view labels = line.substr(brace + 1, line.rfind('}') - brace - 1);
    for (absl::string_view pair : absl::StrSplit(labels, "\",", absl::SkipEmpty())) {
      const size_t eq = pair.find("=\"");
      if (eq == absl::string_view::npos) continue;
      absl::string_view value = pair.substr(eq + 2);
      if (absl::EndsWith(value, "\"")) value.remove_suffix(1);
      count.label_values.emplace_back(value);
    }
  }
  return count;
}

// Quotas in every project's namespace for the three synthetic offerings, so that the
// per-project quota series exist as in a real cluster.
ResourceQuotaObject QuotaOf(int project) {
  ResourceQuotaObject q;
  q.name = "gpu";
  q.namespace_name = perf::ProjectNamespace(project);
  q.hard_milli["requests.nvidia.com/mig-1g.5gb.shared"] = 400 * 1000;
  q.hard_milli["requests.nvidia.com/mig-3g.20gb"] = 40 * 1000;
  q.hard_milli["requests.nvidia.com/gpu"] = 100 * 1000;
  return q;
}

std::string NodeNamesJson(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) absl::StrAppend(&out, i ? "," : "", "\"", names[i], "\"");
  return out + "]";
}

SeriesCount DriveCluster(int node_count) {
  perf::SyntheticClusterSpec spec;
  spec.nodes = node_count;
  spec.projects = kProjects;
  // The same bound pods at both sizes (filling the first ~36 nodes): the projects' usage, and
  // so the outcomes of the workload, do not change with the cluster's size; only the number
  // of nodes every filter and every gauge has to go through does.
  spec.bound_pods = 2000;
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(perf::SyntheticClusterJson(spec));
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok()) return {};
  for (int p = 0; p < kProjects; ++p) batch->quotas.push_back(QuotaOf(p));

  auto catalog = std::make_shared<const Catalog>(Catalog::BuiltIn());
  Mirror mirror(catalog, MirrorOptions{});
  mirror.Write([&](ClusterState& s) { s.ApplyBatch(*batch); });

  ExtenderMetrics metrics;
  MirrorMetrics mirror_metrics(metrics.registry(), &mirror);
  mirror_metrics.SetSynced(true);
  mirror_metrics.SetLeader(true);
  DecisionLog quiet(DecisionLogLevel::kOff, nullptr);
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.metrics = &metrics;
  options.decision_log = &quiet;
  ExtenderService service(&mirror, MakePolicy("affinity-pack").value(), &binder, options);
  HttpServerOptions http;
  http.port = 0;
  http.threads = 2;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(&service, &metrics, http);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  (*server)->Start();
  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_tcp_nodelay(true);
  client.set_keep_alive(true);
  auto post = [&](const std::string& path, const std::string& body) -> std::string {
    httplib::Result r = client.Post(path, body, "application/json");
    EXPECT_TRUE(r) << path;
    return r ? r->body : std::string();
  };

  // kube-scheduler sends the extender the feasible nodes it found, and stops looking after
  // numFeasibleNodesToFind = max(100, N x (50 - N/125)%) of them: all 500 of the small
  // cluster, 500 of the large one. Here: the first 250 nodes (where the bound pods are, so
  // full nodes are seen at both sizes) plus a window of 250 that rotates over the rest, as
  // kube-scheduler's start index does.
  const std::vector<std::string> all_names = perf::SyntheticNodeNames(spec);
  auto candidates = [&](int pod) {
    if (all_names.size() <= 500) return NodeNamesJson(all_names);
    std::vector<std::string> c(all_names.begin(), all_names.begin() + 250);
    const size_t rest = all_names.size() - 250;
    for (size_t k = 0; k < 250; ++k) c.push_back(all_names[250 + (static_cast<size_t>(pod) * 250 + k) % rest]);
    return NodeNamesJson(c);
  };
  const char* const resources[] = {"nvidia.com/mig-1g.5gb.shared", "nvidia.com/mig-3g.20gb",
                                   "nvidia.com/gpu"};
  std::mt19937 rng(7);
  int bound = 0;
  std::string victim_node, victim_uid;
  for (int i = 0; i < kPods; ++i) {
    const std::string ns = perf::ProjectNamespace(i % kProjects);
    const std::string name = absl::StrCat("load-", i);
    const std::string uid = absl::StrCat("load-uid-", i);
    const int kind = static_cast<int>(rng() % 3);
    const std::string pod = perf::PendingPodJson(ns, name, uid, resources[kind], 1);
    const std::string args =
        absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":)", candidates(i), "}");
    rapidjson::Document filter;
    filter.Parse(post("/filter", args).c_str());
    if (!filter.IsObject() || !filter["NodeNames"].IsArray() || filter["NodeNames"].Empty()) continue;
    std::vector<std::string> passed;
    for (const auto& n : filter["NodeNames"].GetArray()) passed.emplace_back(n.GetString());
    rapidjson::Document scores;
    scores.Parse(post("/prioritize", absl::StrCat(R"({"Pod":)", pod,
                                                  R"(,"Nodes":null,"NodeNames":)",
                                                  NodeNamesJson(passed), "}"))
                     .c_str());
    std::string best = passed.front();
    int64_t best_score = -1;
    if (scores.IsArray()) {
      for (const auto& s : scores.GetArray()) {
        if (s["Score"].GetInt64() > best_score) {
          best_score = s["Score"].GetInt64();
          best = s["Host"].GetString();
        }
      }
    }
    const std::string answer =
        post("/bind", absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":")", ns,
                                   R"(","PodUID":")", uid, R"(","Node":")", best, R"("})"));
    if (answer == R"({"Error":""})") {
      ++bound;
      victim_node = best;
      victim_uid = uid;
    }
  }
  EXPECT_GT(bound, kPods / 2) << "the workload must mostly bind to measure bound series";

  // The rest of the verbs and outcomes, so that every label value the service knows occurs.
  post("/bind", "{");
  post("/bind", R"({"PodName":"ghost","PodNamespace":"x","PodUID":"u","Node":"node-00000"})");
  const std::string preemptor = perf::PendingPodJson(perf::ProjectNamespace(0), "big", "big-uid",
                                                     "nvidia.com/gpu", 1);
  post("/preempt", absl::StrCat(R"({"Pod":)", preemptor, R"(,"NodeNameToMetaVictims":{")",
                                victim_node, R"(":{"Pods":[{"UID":")", victim_uid,
                                R"("}],"NumPDBViolations":0}}})"));
  for (const char* path : {"/healthz", "/readyz", "/metrics", "/no-such-path"}) client.Get(path);
  service.SetReady(false);
  post("/bind", R"({"PodName":"late","PodNamespace":"x","PodUID":"u","Node":"node-00000"})");
  post("/prioritize", R"({"Pod":{"metadata":{"name":"p","namespace":"x"}},"NodeNames":[]})");
  service.SetReady(true);

  const AuditReport audit = mirror_metrics.Refresh();
  EXPECT_EQ(audit.oversubscribed_units, 0);
  client.stop();  // closes the keep-alive connection, so the server's worker is free at once
  (*server)->Stop();
  EXPECT_TRUE((*server)->Wait(absl::Seconds(30)));
  return CountSeries(metrics.Serialize());
}

TEST(MetricsCardinalityTest, SeriesCountIsBoundedAndIndependentOfNodeCount) {
  const SeriesCount small = DriveCluster(500);
  const SeriesCount large = DriveCluster(5000);
  std::printf("series at 500 nodes: %zu; at 5,000 nodes: %zu (limit %d)\n", small.total,
              large.total, kMaxSeries);
  for (const auto& [family, n] : large.per_family) std::printf("  %6zu  %s\n", n, family.c_str());

  EXPECT_LT(large.total, static_cast<size_t>(kMaxSeries));
  EXPECT_GT(large.total, 100u) << "the exposition lost its series";
  EXPECT_EQ(small.total, large.total);
  EXPECT_EQ(small.per_family, large.per_family);
  EXPECT_EQ(small.verdicts, large.verdicts);
  // Nothing per node or per pod: no label value names one.
  for (const std::string& value : large.label_values) {
    EXPECT_FALSE(absl::StartsWith(value, "node-")) << value;
    EXPECT_FALSE(absl::StartsWith(value, "load-")) << value;
    EXPECT_FALSE(absl::StrContains(value, "uid")) << value;
  }
}

}  // namespace
}  // namespace gse
