// extender_bench: issue 3's service benchmarks, printed as figures with the ratio to a floor
// measured in the same run (never a pass/fail in unit tests); then filter/prioritize latency
// and the sustained rate of each policy of --compare_policies (fgd included) side by side.
//
//   build/bin/extender_bench                 # 5,000 nodes x 8 GPUs, 150,000 bound pods
//   build/bin/extender_bench --nodes=200 --pods=4000 --iterations=20 --sustain_pods=200  # smoke
//
// Floor: a loopback httplib server on the same settings (TCP_NODELAY, keep-alive) whose
// handler parses the same body with RapidJSON in place and answers a body of the same size
// as the extender's answer. The extender's own cost is the ratio above it.
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "httplib.h"
#include "kube/binder.h"
#include "perf/bench_stats.h"
#include "perf/synthetic_cluster.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "scoring/task_mix.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

ABSL_FLAG(int32_t, nodes, 5000, "nodes in the synthetic cluster (8 GPUs each)");
ABSL_FLAG(int32_t, pods, 150000, "pods already bound when the benchmark starts");
ABSL_FLAG(int32_t, iterations, 300, "requests per latency measurement");
ABSL_FLAG(int32_t, full_node_iterations, 20, "filter calls with full Node objects");
ABSL_FLAG(int32_t, sustain_pods, 3000, "pods scheduled per sustained-throughput run");
ABSL_FLAG(int32_t, clients, 4, "concurrent scheduler clients in the sustained runs");
ABSL_FLAG(int32_t, small_candidates, 500, "candidate nodes in the second sustained run");
ABSL_FLAG(std::string, policy, "affinity-pack", "placement policy of the main run");
ABSL_FLAG(std::string, compare_policies, "affinity-pack,spread,fgd",
          "policies whose filter/prioritize latency and sustained rate are printed side by side "
          "(comma-separated; empty: none)");
ABSL_FLAG(int32_t, compare_sustain_pods, 1000,
          "pods scheduled per policy in the side-by-side sustained run");

namespace gse::perf {
namespace {

using Clock = std::chrono::steady_clock;

double RssMiB() {
  std::ifstream statm("/proc/self/statm");
  long pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return static_cast<double>(pages_resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

std::unique_ptr<httplib::Client> NewClient(int port) {
  auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
  c->set_tcp_nodelay(true);
  c->set_keep_alive(true);
  c->set_read_timeout(30, 0);
  c->set_write_timeout(30, 0);
  return c;
}

// The floor: parse in place, answer `reply_size` bytes.
class EchoFloor {
 public:
  EchoFloor() {
    server_.set_tcp_nodelay(true);
    server_.set_keep_alive_max_count(100000);
    server_.Post("/echo", [this](const httplib::Request& req, httplib::Response& res) {
      std::optional<std::string> answer = Answer(req.body, reply_size_.load());
      if (!answer) {
        res.status = 400;
        return;
      }
      res.set_content(*std::move(answer), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~EchoFloor() {
    server_.stop();
    thread_.join();
  }
  void set_reply_size(size_t n) { reply_size_.store(n); }
  // The floor's work on one request, as the handler does it: copy, parse in place, answer.
  static std::optional<std::string> Answer(std::string body, size_t reply_size) {
    rapidjson::Document doc;
    doc.ParseInsitu(body.data());
    if (doc.HasParseError()) return std::nullopt;
    return std::string(reply_size, ' ');
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  std::atomic<size_t> reply_size_{2};
  int port_ = 0;
  std::thread thread_;
};

// The first Node object of the filter request kube-scheduler 1.26 sent (nodeCacheCapable:
// false), as text.
absl::StatusOr<std::string> ReadCapturedNode() {
  const std::string path =
      std::string(GSE_SHARED_DIR) + "/protocol/captured-k8s-1.26/k8s1.26-filter-request-nodecache-false.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  rapidjson::Document doc;
  doc.Parse(text.data(), text.size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("Nodes") ||
      !doc["Nodes"].IsObject() || !doc["Nodes"].HasMember("items") ||
      !doc["Nodes"]["items"].IsArray() || doc["Nodes"]["items"].Empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no Nodes.items"));
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  doc["Nodes"]["items"][0].Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

// `node_json` (a synthetic Node) with what a real Node object carries besides the facts the
// extender reads: the captured node's managedFields, annotations and creationTimestamp, its
// labels other than nvidia.com/* (which would change the GPUs), and its status conditions,
// addresses, daemonEndpoints and nodeInfo. The resourceVersion changes so that the first
// request applies the objects afresh.
std::string WithCapturedBulk(const std::string& node_json, const std::string& captured_json) {
  rapidjson::Document node, captured;
  node.Parse(node_json.data(), node_json.size());
  captured.Parse(captured_json.data(), captured_json.size());
  auto& a = node.GetAllocator();
  rapidjson::Value& meta = node["metadata"];
  const rapidjson::Value& cmeta = captured["metadata"];
  meta["resourceVersion"].SetString("2", a);
  for (const char* key : {"creationTimestamp", "annotations", "managedFields"}) {
    if (cmeta.HasMember(key)) meta.AddMember(rapidjson::StringRef(key), rapidjson::Value(cmeta[key], a), a);
  }
  if (cmeta.HasMember("labels")) {
    for (const auto& label : cmeta["labels"].GetObject()) {
      const std::string key = label.name.GetString();
      if (key.rfind("nvidia.com/", 0) == 0 || meta["labels"].HasMember(key.c_str())) continue;
      meta["labels"].AddMember(rapidjson::Value(key.c_str(), a), rapidjson::Value(label.value, a), a);
    }
  }
  for (const char* key : {"conditions", "addresses", "daemonEndpoints", "nodeInfo"}) {
    if (captured["status"].HasMember(key)) {
      node["status"].AddMember(rapidjson::StringRef(key), rapidjson::Value(captured["status"][key], a), a);
    }
  }
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  node.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

// Times `iterations` POSTs of `body` to `path`; returns per-request microseconds.
std::vector<double> TimePosts(httplib::Client& client, const std::string& path,
                              const std::vector<std::string>& bodies, size_t* reply_size) {
  std::vector<double> us;
  us.reserve(bodies.size());
  for (const std::string& body : bodies) {
    auto t0 = Clock::now();
    auto res = client.Post(path, body, "application/json");
    auto t1 = Clock::now();
    if (!res || res->status != 200) {
      std::fprintf(stderr, "POST %s failed: %s\n", path.c_str(),
                   res ? std::to_string(res->status).c_str() : httplib::to_string(res.error()).c_str());
      std::exit(1);
    }
    if (reply_size != nullptr) *reply_size = res->body.size();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return us;
}

std::string NamesArray(const std::vector<std::string>& names) {
  return absl::StrCat("[\"", absl::StrJoin(names, "\",\""), "\"]");
}

void PrintLatency(const char* what, const Percentiles& ours, const Percentiles& floor,
                  size_t request_bytes, size_t answer_bytes, const char* target) {
  std::printf("%-44s p50 %8.0f us  p99 %8.0f us | floor p50 %7.0f us p99 %7.0f us | ratio p99 %.2fx | target %s | request %zu KB, answer %zu KB\n",
              what, ours.p50_us, ours.p99_us, floor.p50_us, floor.p99_us,
              floor.p99_us > 0 ? ours.p99_us / floor.p99_us : 0.0, target, request_bytes / 1000,
              answer_bytes / 1000);
}

// One scheduling cycle the way kube-scheduler runs it: filter -> prioritize (when more than
// one node passed) -> bind the best. Returns false when the pod fit nowhere.
bool ScheduleOne(httplib::Client& client, const std::string& pod_json, const std::string& ns,
                 const std::string& name, const std::string& uid, const std::string& names_json) {
  std::string args = absl::StrCat("{\"Pod\":", pod_json, ",\"Nodes\":null,\"NodeNames\":", names_json, "}");
  auto res = client.Post("/filter", args, "application/json");
  if (!res || res->status != 200) return false;
  // The client shares the cores with the server: parse answers in place, as cheaply as the
  // library allows (kube-scheduler runs elsewhere).
  rapidjson::Document doc;
  doc.ParseInsitu(res->body.data());
  if (!doc.IsObject() || !doc["NodeNames"].IsArray() || doc["NodeNames"].Empty()) return false;
  std::string best = doc["NodeNames"][0].GetString();
  if (doc["NodeNames"].Size() > 1) {
    std::vector<std::string> passing;
    for (const auto& v : doc["NodeNames"].GetArray()) passing.emplace_back(v.GetString());
    std::string pargs = absl::StrCat("{\"Pod\":", pod_json, ",\"Nodes\":null,\"NodeNames\":", NamesArray(passing), "}");
    auto pres = client.Post("/prioritize", pargs, "application/json");
    if (!pres || pres->status != 200) return false;
    rapidjson::Document scores;
    scores.ParseInsitu(pres->body.data());
    int64_t top = -1;
    for (const auto& s : scores.GetArray()) {
      if (s["Score"].GetInt64() > top) {
        top = s["Score"].GetInt64();
        best = s["Host"].GetString();
      }
    }
  }
  std::string bargs = absl::StrCat("{\"PodName\":\"", name, "\",\"PodNamespace\":\"", ns,
                                   "\",\"PodUID\":\"", uid, "\",\"Node\":\"", best, "\"}");
  auto bres = client.Post("/bind", bargs, "application/json");
  return bres && bres->status == 200 && bres->body.find("\"Error\":\"\"") != std::string::npos;
}

struct PodSpecPick {
  std::string resource;
};

const char* PickResource(std::mt19937_64& rng) {
  uint64_t r = rng() % 10;
  if (r < 8) return "nvidia.com/mig-1g.5gb.shared";
  if (r < 9) return "nvidia.com/mig-3g.20gb";
  return "nvidia.com/gpu";
}

void SustainedRun(int port, const std::vector<std::string>& candidates, int pods, int clients,
                  const SyntheticClusterSpec& spec, const char* label, const char* target,
                  int run_id) {
  const std::string names_json = NamesArray(candidates);
  std::atomic<int> next{0}, bound{0}, unschedulable{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = NewClient(port);
      std::mt19937_64 rng(static_cast<uint64_t>(c + 1000 * run_id));
      for (int i = next++; i < pods; i = next++) {
        const std::string ns = ProjectNamespace(static_cast<int>(rng() % static_cast<uint64_t>(spec.projects)));
        const std::string name = absl::StrCat("bench-", run_id, "-", i);
        const std::string uid = absl::StrCat("uid-", name);
        const std::string pod = PendingPodJson(ns, name, uid, PickResource(rng), 1);
        if (ScheduleOne(*client, pod, ns, name, uid, names_json)) {
          ++bound;
        } else {
          ++unschedulable;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("%-44s %8.0f pods/s (%d bound, %d unschedulable, %d clients, %.2f s) | target %s\n",
              label, pods / seconds, bound.load(), unschedulable.load(), clients, seconds, target);
}

// Each policy of --compare_policies over the same mirror (its own service and HTTP server):
// filter and prioritize latency at every candidate name next to the floor, and the sustained
// rate at every candidate. The mirror fills as the runs bind, in policy order.
int ComparePolicies(Mirror* mirror, const SyntheticClusterSpec& spec,
                    const std::vector<std::string>& names, const std::vector<std::string>& bodies,
                    EchoFloor& floor) {
  const std::string list = absl::GetFlag(FLAGS_compare_policies);
  if (list.empty()) return 0;
  std::shared_ptr<const Catalog> catalog(&Catalog::BuiltIn(), [](const Catalog*) {});
  auto floor_client = NewClient(floor.port());
  int run_id = 10;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakeServicePolicy(name, catalog);
    if (!policy.ok()) {
      std::fprintf(stderr, "--compare_policies: %s\n", policy.status().ToString().c_str());
      return 2;
    }
    RecordOnlyBinder binder;
    DecisionLog quiet(DecisionLogLevel::kOff, [](absl::string_view) {});
    ServiceOptions service_options;
    service_options.decision_log = &quiet;
    ExtenderService service(mirror, *std::move(policy), &binder, service_options);
    HttpServerOptions options;
    options.port = 0;
    options.threads = std::max(8, absl::GetFlag(FLAGS_clients) * 2);
    auto server = HttpServer::Create(&service, nullptr, options);
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
      return 1;
    }
    (*server)->Start();
    auto client = NewClient((*server)->port());
    for (const char* verb : {"filter", "prioritize"}) {
      size_t reply = 0;
      const std::string path = absl::StrCat("/", verb);
      TimePosts(*client, path, {bodies.begin(), bodies.begin() + std::min<size_t>(10, bodies.size())}, &reply);
      const Percentiles ours = Summarise(TimePosts(*client, path, bodies, &reply));
      floor.set_reply_size(reply);
      const Percentiles base = Summarise(TimePosts(*floor_client, "/echo", bodies, nullptr));
      PrintLatency(absl::StrCat("[", name, "] ", verb, ", ", names.size(), " names").c_str(), ours, base,
                   bodies.front().size(), reply, "p99 <= 2x floor");
    }
    SustainedRun((*server)->port(), names, absl::GetFlag(FLAGS_compare_sustain_pods),
                 absl::GetFlag(FLAGS_clients), spec,
                 absl::StrCat("[", name, "] sustained, ", names.size(), " candidates").c_str(),
                 ">= 500 pods/s", run_id++);
    (*server)->Stop();
    (*server)->Wait(absl::Seconds(10));
  }
  return 0;
}

int Main() {
  SyntheticClusterSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.bound_pods = absl::GetFlag(FLAGS_pods);
  const int iterations = absl::GetFlag(FLAGS_iterations);

  std::printf("extender_bench: %d nodes x %d GPUs, %d bound pods requested, %u hardware threads\n",
              spec.nodes, spec.gpus_per_node, spec.bound_pods, std::thread::hardware_concurrency());

  // --- mirror at size, and its memory.
  malloc_trim(0);
  const double rss_before = RssMiB();
  auto mirror = std::make_unique<Mirror>(std::shared_ptr<const Catalog>(&Catalog::BuiltIn(), [](const Catalog*) {}),
                                         MirrorOptions{});
  auto t_build = Clock::now();
  size_t json_bytes = 0;
  {
    std::string json = SyntheticClusterJson(spec);
    json_bytes = json.size();
    auto batch = DecodeObjects(json);
    if (!batch.ok()) {
      std::fprintf(stderr, "synthetic cluster does not decode: %s\n", batch.status().ToString().c_str());
      return 1;
    }
    mirror->Write([&](ClusterState& s) { s.ApplyBatch(*batch); });
  }
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  malloc_trim(0);
  const double rss_after = RssMiB();
  size_t held_pods = mirror->Read([](const ClusterState& s) { return s.pods().size(); });
  AuditReport audit = mirror->Read([](const ClusterState& s) { return s.Audit(); });
  std::printf("%-44s %8.1f MiB resident for %zu pods holding units (%.1f MB of JSON decoded and applied in %.2f s) | target <= 200 MB\n",
              "mirror memory", rss_after - rss_before, held_pods, json_bytes / 1e6, build_s);
  if (!audit.problems.empty()) {
    std::fprintf(stderr, "audit of the synthetic cluster failed: %s\n", audit.problems[0].c_str());
    return 1;
  }

  // --- the service and the floor.
  std::shared_ptr<const Catalog> catalog(&Catalog::BuiltIn(), [](const Catalog*) {});
  auto policy = MakeServicePolicy(absl::GetFlag(FLAGS_policy), catalog);
  if (!policy.ok()) {
    std::fprintf(stderr, "%s\n", policy.status().ToString().c_str());
    return 2;
  }
  RecordOnlyBinder binder;
  // Thousands of binds: the per-bind decision log would only measure stderr.
  DecisionLog quiet(DecisionLogLevel::kOff, [](absl::string_view) {});
  ServiceOptions service_options;
  service_options.decision_log = &quiet;
  ExtenderService service(mirror.get(), std::move(*policy), &binder, service_options);
  TuneMallocForLargeBodies();  // as the binary does before serving
  HttpServerOptions options;
  options.port = 0;
  options.threads = std::max(8, absl::GetFlag(FLAGS_clients) * 2);
  auto server = HttpServer::Create(&service, nullptr, options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return 1;
  }
  (*server)->Start();
  EchoFloor floor;

  const std::vector<std::string> names = SyntheticNodeNames(spec);
  const std::string names_json = NamesArray(names);
  std::vector<std::string> bodies;
  for (int i = 0; i < iterations; ++i) {
    const std::string ns = ProjectNamespace(i % spec.projects);
    const std::string name = absl::StrCat("probe-", i);
    bodies.push_back(absl::StrCat("{\"Pod\":", PendingPodJson(ns, name, "uid-" + name, "nvidia.com/mig-1g.5gb.shared", 1),
                                  ",\"Nodes\":null,\"NodeNames\":", names_json, "}"));
  }
  auto client = NewClient((*server)->port());
  auto floor_client = NewClient(floor.port());
  for (const char* verb : {"filter", "prioritize"}) {
    size_t reply = 0;
    TimePosts(*client, absl::StrCat("/", verb), {bodies.begin(), bodies.begin() + std::min<size_t>(10, bodies.size())}, &reply);  // warm-up
    Percentiles ours = Summarise(TimePosts(*client, absl::StrCat("/", verb), bodies, &reply));
    floor.set_reply_size(reply);
    Percentiles base = Summarise(TimePosts(*floor_client, "/echo", bodies, nullptr));
    PrintLatency(absl::StrCat(verb, ", ", names.size(), " candidate names").c_str(), ours, base,
                 bodies.front().size(), reply, "p99 <= 2 ms and <= 2x floor");
  }

  // --- the same verbs without HTTP, in this thread's CPU time: what the extender itself
  // costs per call, steady even when other processes share the cores.
  // The floor's work is timed the same way, on answers of the verb's size.
  auto thread_us = [](const auto& call) {
    const double t0 = ThreadCpuMicros();
    call();
    return ThreadCpuMicros() - t0;
  };
  std::vector<double> plain_filter_us;  // for the agent gate's cost below
  for (const char* verb : {"filter", "prioritize"}) {
    std::vector<double> us, floor_us;
    size_t reply = 0;
    for (const std::string& body : bodies) {
      VerbResult r;
      us.push_back(thread_us([&] {
        r = std::string(verb) == "filter" ? service.Filter(body) : service.Prioritize(body);
      }));
      if (r.status != 200) {
        std::fprintf(stderr, "%s failed: %s\n", verb, r.body.substr(0, 200).c_str());
        return 1;
      }
      reply = r.body.size();
    }
    for (const std::string& body : bodies) {
      floor_us.push_back(thread_us([&] {
        if (!EchoFloor::Answer(body, reply)) std::abort();
      }));
    }
    if (std::string(verb) == "filter") plain_filter_us = us;
    const Percentiles p = Summarise(us);
    const Percentiles f = Summarise(floor_us);
    std::printf("%-44s p50 %8.0f us  p99 %8.0f us | floor p50 %7.0f us p99 %7.0f us | ratio p50 %.2fx | CPU time of the calls alone, no HTTP (min %.0f us, floor %.0f us)\n",
                absl::StrCat(verb, ", ", names.size(), " names, in-process").c_str(), p.p50_us,
                p.p99_us, f.p50_us, f.p99_us, f.p50_us > 0 ? p.p50_us / f.p50_us : 0.0, p.min_us,
                f.min_us);
  }

  // --- the node agent's per-node gate (state/agent_gate.cc): the same in-process filter once
  // every node carries gpu.themelio.io/inventory. First while every bound pod still awaits its
  // agent (no gpu.themelio.io/allocated: the synthetic pods have none), so every candidate is
  // gated and read the slow way (the worst case); then with every wait over (the steady
  // state: the agent confirmed the pods), where a candidate costs one flag more.
  {
    auto mark_nodes = [&](bool agent) {
      return mirror->Write([&](ClusterState& s) -> absl::Status {
        for (int i = 0; i < spec.nodes; ++i) {
          rapidjson::Document doc;
          doc.Parse(SyntheticNodeJson(spec, i).c_str());
          absl::StatusOr<NodeObject> node = DecodeNode(doc, "Node");
          if (!node.ok()) return node.status();
          if (agent) node->agent_inventory = R"({"version":1,"resources":{}})";
          s.ApplyNode(*node);
        }
        return absl::OkStatus();
      });
    };
    const absl::Status marked = mark_nodes(true);
    if (!marked.ok()) {
      std::fprintf(stderr, "marking the nodes agent-served failed: %s\n", marked.ToString().c_str());
      return 1;
    }
    {
      // The bound pods again, now that their nodes have agents: each awaits its agent.
      absl::StatusOr<ObjectBatch> batch = DecodeObjects(SyntheticClusterJson(spec));
      if (!batch.ok()) return 1;
      mirror->Write([&](ClusterState& s) {
        for (const PodObject& pod : batch->pods) s.ApplyPod(pod);
      });
    }
    const Percentiles plain = Summarise(plain_filter_us);
    auto gated_run = [&](const char* what) {
      std::vector<double> us;
      for (const std::string& body : bodies) {
        VerbResult r;
        us.push_back(thread_us([&] { r = service.Filter(body); }));
        if (r.status != 200) std::abort();
      }
      const Percentiles p = Summarise(us);
      std::printf("%-44s p50 %8.0f us  p99 %8.0f us | without agents p50 %7.0f us p99 %7.0f us | ratio p50 %.2fx | CPU time, no HTTP\n",
                  absl::StrCat("filter, ", names.size(), " names, ", what).c_str(), p.p50_us,
                  p.p99_us, plain.p50_us, plain.p99_us, plain.p50_us > 0 ? p.p50_us / plain.p50_us : 0.0);
    };
    const int waiting = mirror->Read([](const ClusterState& s) { return static_cast<int>(s.agent_waiting_pods().size()); });
    gated_run(absl::StrCat("agents, ", waiting, " waits").c_str());
    mirror->ExpireAgentWaits(absl::InfiniteFuture(), absl::ZeroDuration());
    gated_run("agents, all confirmed");
    if (!mark_nodes(false).ok()) return 1;  // the runs below measure the extender without agents
  }

  // --- filter with full Node objects (nodeCacheCapable: false): the synthetic nodes as they
  // are (about 700 bytes each: small strings, the densest work per byte), then with the bulk
  // that real Node objects carry (managedFields, annotations, conditions, nodeInfo: ~8 KB each,
  // from the Node objects kube-scheduler 1.26 sent in ../shared/protocol/captured-k8s-1.26/).
  auto full_node_run = [&](const char* what, const std::vector<std::string>& node_json) {
    const std::string items = absl::StrJoin(node_json, ",");
    std::vector<std::string> full;
    for (int i = 0; i < absl::GetFlag(FLAGS_full_node_iterations); ++i) {
      const std::string name = absl::StrCat("full-", i);
      full.push_back(absl::StrCat("{\"Pod\":", PendingPodJson(ProjectNamespace(i % spec.projects), name, "uid-" + name,
                                                             "nvidia.com/gpu", 1),
                                  ",\"Nodes\":{\"metadata\":{},\"items\":[", items, "]},\"NodeNames\":null}"));
    }
    size_t reply = 0;
    TimePosts(*client, "/filter", {full.front()}, &reply);  // warm-up: first refresh of all nodes
    Percentiles ours = Summarise(TimePosts(*client, "/filter", full, &reply));
    floor.set_reply_size(reply);
    Percentiles base = Summarise(TimePosts(*floor_client, "/echo", full, nullptr));
    const double mb = static_cast<double>(full.front().size()) / 1e6;
    std::printf("%-44s %8.0f MB/s (body %.1f MB, p50 %.1f ms) | floor %.0f MB/s | ratio %.2fx | target >= 300 MB/s\n",
                absl::StrCat("filter, ", spec.nodes, " full Node objects", what).c_str(), mb / (ours.p50_us / 1e6),
                mb, ours.p50_us / 1e3, mb / (base.p50_us / 1e6), ours.p50_us / base.p50_us);
  };
  {
    std::vector<std::string> synthetic;
    for (int i = 0; i < spec.nodes; ++i) synthetic.push_back(SyntheticNodeJson(spec, i));
    full_node_run("", synthetic);
    absl::StatusOr<std::string> captured = ReadCapturedNode();
    if (!captured.ok()) {
      std::printf("%-44s skipped: %s\n", "filter, full Node objects as captured",
                  captured.status().ToString().c_str());
    } else {
      for (std::string& node : synthetic) node = WithCapturedBulk(node, *captured);
      full_node_run(", real size", synthetic);
    }
  }

  // --- sustained scheduling.
  const int clients = absl::GetFlag(FLAGS_clients);
  const int sustain = absl::GetFlag(FLAGS_sustain_pods);
  SustainedRun((*server)->port(), names, sustain, clients, spec,
               absl::StrCat("sustained, ", names.size(), " candidates").c_str(), ">= 500 pods/s", 1);
  std::vector<std::string> small(names.begin(), names.begin() + std::min<size_t>(names.size(), static_cast<size_t>(absl::GetFlag(FLAGS_small_candidates))));
  SustainedRun((*server)->port(), small, sustain * 4, clients, spec,
               absl::StrCat("sustained, ", small.size(), " candidates").c_str(), ">= 5,000 pods/s", 2);

  // --- per policy, after the main run (whose figures stay comparable with earlier runs).
  if (const int rc = ComparePolicies(mirror.get(), spec, names, bodies, floor); rc != 0) return rc;

  AuditReport end = mirror->Read([](const ClusterState& s) { return s.Audit(); });
  std::printf("%-44s %lld oversubscribed, %lld multi-owner units after the run (must be 0)\n", "audit",
              static_cast<long long>(end.oversubscribed_units), static_cast<long long>(end.multi_owner_units));
  (*server)->Stop();
  (*server)->Wait(absl::Seconds(10));
  return end.problems.empty() ? 0 : 1;
}

}  // namespace
}  // namespace gse::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Benchmarks of the extender service against a same-run loopback floor.");
  absl::ParseCommandLine(argc, argv);
  return gse::perf::Main();
}
