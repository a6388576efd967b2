// http_load: a small, deterministic scheduler stand-in that drives a running extender over
// HTTP the way kube-scheduler does (filter -> prioritize -> bind, preempt), for tests of the
// surroundings (tests/prometheus_e2e_test.sh) and manual demos.
//
//   http_load --write_snapshot=cluster.json [--nodes=100 --projects=6]
//   gpu-slice-extender --snapshot=cluster.json --listen=127.0.0.1:0 &
//   http_load --extender=http://127.0.0.1:PORT [--nodes=100 --projects=6 --pods=300]
//
// The cluster is perf/synthetic_cluster's (half A100s with time-sliced 1g.5gb slices and
// exclusive 3g.20gb slices, half H100s) without bound pods, plus a ResourceQuota per project,
// so the load meets every kind of decision:
//   * time-sliced pods of several projects: placements onto the project's own slice and onto
//     new slices; every 4th such pod is offered only nodes where its project has no pod (as if
//     other plugins had filtered them out), which makes the extender open a new slice although
//     the project's own slice has free tickets: an affinity spill;
//   * quotas small enough that projects reach them: filter answers quota_exhausted;
//   * a bind race: when a project has room for one more GPU, two of its GPU pods are filtered
//     before either binds, so the second bind is refused for quota (outcome "quota");
//   * a preempt call per project whose quota is full (a victim of the same project frees it);
//   * one bind of a pod never filtered (unknown_pod) and one malformed bind (bad_request).
// Deterministic for a given seed (one client, requests in order). Prints a tally of what it
// saw ("key=value" lines) that the test compares with the extender's metrics. Exit 0 when
// every request got the expected HTTP status, 1 otherwise, 2 for bad flags.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "perf/synthetic_cluster.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"

ABSL_FLAG(std::string, write_snapshot, "",
          "write the cluster (a List of Namespaces, ResourceQuotas and Nodes) to this file and "
          "exit");
ABSL_FLAG(std::string, extender, "", "base URL of the running extender, e.g. http://127.0.0.1:8888");
ABSL_FLAG(int32_t, nodes, 100,
          "nodes in the cluster (the same value for both modes); the synthetic cluster mixes "
          "A100 and H100 nodes per hundred, so keep it a multiple of 100");
ABSL_FLAG(int32_t, projects, 6, "projects (namespaces proj-000, ...), each with a quota");
ABSL_FLAG(int32_t, pods, 300, "pods to schedule");
ABSL_FLAG(uint64_t, seed, 1, "seed of the pod mix and the candidate lists");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(4),
          "spread the pods over this long (so that a scraper sees the load as rates)");

namespace gse::perf {
namespace {

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kBig[] = "nvidia.com/mig-3g.20gb";
constexpr char kGpu[] = "nvidia.com/gpu";
// Per project: 16 tickets = 4 slices of 4 tickets, 2 big slices, 3 GPUs.
constexpr int kSharedQuotaTickets = 16;
constexpr int kBigQuota = 2;
constexpr int kGpuQuota = 3;

SyntheticClusterSpec Spec() {
  SyntheticClusterSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.projects = absl::GetFlag(FLAGS_projects);
  spec.bound_pods = 0;
  spec.replicas = 4;
  spec.seed = absl::GetFlag(FLAGS_seed);
  return spec;
}

int WriteSnapshot(const std::string& path) {
  const SyntheticClusterSpec spec = Spec();
  rapidjson::Document doc;
  const std::string json = SyntheticClusterJson(spec);
  doc.Parse(json.c_str(), json.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    std::fprintf(stderr, "http_load: the synthetic cluster is not JSON\n");
    return 1;
  }
  auto& a = doc.GetAllocator();
  rapidjson::Value& items = doc["items"];
  for (int p = 0; p < spec.projects; ++p) {
    rapidjson::Value quota(rapidjson::kObjectType), meta(rapidjson::kObjectType),
        spec_obj(rapidjson::kObjectType), hard(rapidjson::kObjectType);
    quota.AddMember("apiVersion", "v1", a);
    quota.AddMember("kind", "ResourceQuota", a);
    meta.AddMember("name", "gpu", a);
    meta.AddMember("namespace", rapidjson::Value(ProjectNamespace(p).c_str(), a), a);
    quota.AddMember("metadata", meta, a);
    hard.AddMember(rapidjson::Value(absl::StrCat("requests.", kShared).c_str(), a),
                   rapidjson::Value(absl::StrCat(kSharedQuotaTickets).c_str(), a), a);
    hard.AddMember(rapidjson::Value(absl::StrCat("requests.", kBig).c_str(), a),
                   rapidjson::Value(absl::StrCat(kBigQuota).c_str(), a), a);
    hard.AddMember(rapidjson::Value(absl::StrCat("requests.", kGpu).c_str(), a),
                   rapidjson::Value(absl::StrCat(kGpuQuota).c_str(), a), a);
    spec_obj.AddMember("hard", hard, a);
    quota.AddMember("spec", spec_obj, a);
    items.PushBack(quota, a);
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  doc.Accept(w);
  std::ofstream out(path, std::ios::binary);
  out.write(buf.GetString(), static_cast<std::streamsize>(buf.GetSize()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "http_load: --write_snapshot=%s: cannot write the file\n", path.c_str());
    return 1;
  }
  std::printf("wrote %s: %d nodes, %d projects with quotas\n", path.c_str(), spec.nodes,
              spec.projects);
  return 0;
}

std::string NamesJson(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) absl::StrAppend(&out, i ? "," : "", "\"", names[i], "\"");
  return out + "]";
}

struct Pod {
  std::string ns, name, uid, resource, json;
  int project = 0;
};

class Driver {
 public:
  explicit Driver(const std::string& url) : client_(url) {
    client_.set_tcp_nodelay(true);
    client_.set_keep_alive(true);
    client_.set_connection_timeout(5);
    client_.set_read_timeout(30);
  }

  // POST, expecting `want_status`; the body, or "" after a failure (counted).
  std::string Post(const std::string& path, const std::string& body, int want_status = 200) {
    httplib::Result r = client_.Post(path, body, "application/json");
    if (!r) {
      ++tally_["http_failures"];
      std::fprintf(stderr, "http_load: POST %s: %s\n", path.c_str(),
                   httplib::to_string(r.error()).c_str());
      return "";
    }
    if (r->status != want_status) {
      ++tally_["http_failures"];
      std::fprintf(stderr, "http_load: POST %s: HTTP %d (want %d): %s\n", path.c_str(), r->status,
                   want_status, r->body.c_str());
    }
    return r->body;
  }

  // Filter over `candidates`: the nodes that passed.
  std::vector<std::string> Filter(const Pod& pod, const std::vector<std::string>& candidates) {
    ++tally_["filter_calls"];
    rapidjson::Document d;
    const std::string body = Post("/filter", absl::StrCat(R"({"Pod":)", pod.json,
                                                          R"(,"Nodes":null,"NodeNames":)",
                                                          NamesJson(candidates), "}"));
    d.Parse(body.c_str());
    std::vector<std::string> passed;
    if (d.IsObject() && d.HasMember("NodeNames") && d["NodeNames"].IsArray()) {
      for (const auto& n : d["NodeNames"].GetArray()) passed.emplace_back(n.GetString());
    }
    if (passed.empty()) ++tally_["filter_no_node"];
    return passed;
  }

  // Prioritize over the passed nodes: the best (first of the highest score).
  std::string Choose(const Pod& pod, const std::vector<std::string>& passed) {
    rapidjson::Document d;
    const std::string body = Post("/prioritize", absl::StrCat(R"({"Pod":)", pod.json,
                                                              R"(,"Nodes":null,"NodeNames":)",
                                                              NamesJson(passed), "}"));
    d.Parse(body.c_str());
    std::string best = passed.front();
    int64_t best_score = -1;
    if (d.IsArray()) {
      for (const auto& s : d.GetArray()) {
        if (s.IsObject() && s["Score"].IsInt64() && s["Score"].GetInt64() > best_score) {
          best_score = s["Score"].GetInt64();
          best = s["Host"].GetString();
        }
      }
    }
    return best;
  }

  // Bind; true when bound.
  bool Bind(const Pod& pod, const std::string& node) {
    ++tally_["binds"];
    const std::string body =
        Post("/bind", absl::StrCat(R"({"PodName":")", pod.name, R"(","PodNamespace":")", pod.ns,
                                   R"(","PodUID":")", pod.uid, R"(","Node":")", node, R"("})"));
    const bool ok = body == R"({"Error":""})";
    ++tally_[ok ? "bound" : "bind_refused"];
    return ok;
  }

  std::map<std::string, int64_t>& tally() { return tally_; }

 private:
  httplib::Client client_;
  std::map<std::string, int64_t> tally_;
};

int RunLoad(const std::string& url) {
  const SyntheticClusterSpec spec = Spec();
  const std::vector<std::string> nodes = SyntheticNodeNames(spec);
  const int pods = absl::GetFlag(FLAGS_pods);
  if (spec.nodes < 2 || spec.projects < 1 || pods < 1) {
    std::fprintf(stderr, "http_load: want --nodes >= 2, --projects >= 1, --pods >= 1\n");
    return 2;
  }
  const absl::Duration pace = absl::GetFlag(FLAGS_duration) / pods;
  std::mt19937_64 rng(spec.seed);
  Driver driver(url);
  auto& tally = driver.tally();

  // What the driver knows of its own placements (the cluster starts empty).
  std::map<int, std::set<std::string>> shared_nodes;  // project -> nodes with its shared pods
  std::map<int, int> gpus_bound;                       // project -> GPUs bound
  std::map<int, std::vector<std::pair<std::string, std::string>>> gpu_pods;  // (node, uid)
  int serial = 0;
  auto make_pod = [&](int project, const char* resource) {
    Pod p;
    p.project = project;
    p.ns = ProjectNamespace(project);
    p.name = absl::StrCat("load-", serial);
    p.uid = absl::StrCat("load-uid-", serial);
    ++serial;
    p.resource = resource;
    p.json = PendingPodJson(p.ns, p.name, p.uid, resource, 1);
    return p;
  };
  // Half of the nodes, as if kube-scheduler's own plugins had filtered out the rest.
  auto candidates = [&](const std::set<std::string>& exclude) {
    std::vector<std::string> out;
    for (const std::string& n : nodes) {
      if (exclude.count(n) == 0 && rng() % 2 == 0) out.push_back(n);
    }
    if (out.empty()) {
      for (const std::string& n : nodes) {
        if (exclude.count(n) == 0) out.push_back(n);
      }
    }
    return out;
  };
  auto schedule = [&](const Pod& pod, const std::vector<std::string>& cands) {
    std::vector<std::string> passed = driver.Filter(pod, cands);
    if (passed.empty()) return false;
    const std::string node = driver.Choose(pod, passed);
    if (!driver.Bind(pod, node)) return false;
    if (pod.resource == kShared) shared_nodes[pod.project].insert(node);
    if (pod.resource == kGpu) {
      ++gpus_bound[pod.project];
      gpu_pods[pod.project].emplace_back(node, pod.uid);
    }
    return true;
  };

  const auto start = std::chrono::steady_clock::now();
  int shared_count = 0;
  for (int i = 0; i < pods; ++i) {
    std::this_thread::sleep_until(start + absl::ToChronoNanoseconds(pace * i));
    const int project = i % spec.projects;
    const uint64_t kind = rng() % 10;
    if (kind < 6) {
      const Pod pod = make_pod(project, kShared);
      const bool constrained = ++shared_count % 4 == 0 && !shared_nodes[project].empty();
      if (constrained) ++tally["shared_constrained"];
      schedule(pod, candidates(constrained ? shared_nodes[project] : std::set<std::string>{}));
    } else if (kind < 8) {
      schedule(make_pod(project, kBig), candidates({}));
    } else if (gpus_bound[project] == kGpuQuota - 1) {
      // Room for one more GPU: two pods pass filter, the second bind meets the quota.
      const Pod a = make_pod(project, kGpu), b = make_pod(project, kGpu);
      const std::vector<std::string> cands = candidates({});
      const std::vector<std::string> pa = driver.Filter(a, cands);
      const std::vector<std::string> pb = driver.Filter(b, cands);
      if (pa.empty() || pb.empty()) continue;
      ++tally["quota_races"];
      const std::string na = driver.Choose(a, pa), nb = driver.Choose(b, pb);
      if (driver.Bind(a, na)) {
        ++gpus_bound[project];
        gpu_pods[project].emplace_back(na, a.uid);
      }
      if (driver.Bind(b, nb)) {
        ++gpus_bound[project];
        gpu_pods[project].emplace_back(nb, b.uid);
      } else {
        ++tally["quota_race_refused"];
      }
    } else {
      schedule(make_pod(project, kGpu), candidates({}));
    }
  }

  // Preemption: a GPU pod of each project at its quota, with one of its own GPU pods as the
  // victim (evicting it frees the quota, so the node is proposed back).
  for (const auto& [project, placed] : gpu_pods) {
    if (gpus_bound[project] < kGpuQuota || placed.empty()) continue;
    const Pod preemptor = make_pod(project, kGpu);
    const std::string body = driver.Post(
        "/preempt", absl::StrCat(R"({"Pod":)", preemptor.json, R"(,"NodeNameToMetaVictims":{")",
                                 placed.front().first, R"(":{"Pods":[{"UID":")",
                                 placed.front().second, R"("}],"NumPDBViolations":0}}})"));
    ++tally["preempt_calls"];
    rapidjson::Document d;
    d.Parse(body.c_str());
    if (d.IsObject() && d.HasMember("NodeNameToMetaVictims") && d["NodeNameToMetaVictims"].IsObject()) {
      for (const auto& m : d["NodeNameToMetaVictims"].GetObject()) {
        ++tally["preempt_nodes"];
        tally["preempt_victims"] += m.value["Pods"].Size();
      }
    }
  }

  // A pod kube-scheduler never filtered, and a body that is not JSON.
  driver.Bind(make_pod(0, kGpu), nodes.front());  // counted in binds and bind_refused
  ++tally["unknown_pod_binds"];
  driver.Post("/bind", "{", 400);
  ++tally["binds"];
  ++tally["bad_request_binds"];

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  tally["pods"] = serial;
  for (const auto& [key, value] : tally) std::printf("%s=%lld\n", key.c_str(), static_cast<long long>(value));
  std::printf("seconds=%.3f\n", seconds);
  return tally["http_failures"] == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gse::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "drives a running gpu-slice-extender like kube-scheduler: http_load --extender=URL, or "
      "writes the matching cluster: http_load --write_snapshot=FILE");
  absl::ParseCommandLine(argc, argv);
  const std::string snapshot = absl::GetFlag(FLAGS_write_snapshot);
  if (!snapshot.empty()) return gse::perf::WriteSnapshot(snapshot);
  const std::string url = absl::GetFlag(FLAGS_extender);
  if (url.empty()) {
    std::fprintf(stderr, "http_load: give --extender=URL or --write_snapshot=FILE\n");
    return 2;
  }
  return gse::perf::RunLoad(url);
}
