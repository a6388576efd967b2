// extender_bench: issue 3's service benchmarks, printed as figures with the ratio to a floor
// measured in the same run (never a pass/fail in unit tests); then filter/prioritize latency
// and the sustained rate of each policy of --compare_policies (fgd included) side by side;
// then the same verbs on a cluster where --dra_share of the nodes are DRA-served (DraRun).
//
//   build/bin/extender_bench                 # 5,000 nodes x 8 GPUs, 150,000 bound pods
//   build/bin/extender_bench --nodes=200 --pods=4000 --iterations=20 --sustain_pods=200  # smoke
//   build/bin/extender_bench --dra_only      # the DRA rows alone: half the nodes DRA-served
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
#include <functional>
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
#include "absl/strings/str_replace.h"
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
#include "state/cluster_state.h"
#include "state/dra_objects.h"
#include "state/dra_state.h"
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
ABSL_FLAG(double, dra_share, 0.5,
          "DRA run: share of the --nodes served by the NVIDIA DRA driver (the fact sheet's MIG "
          "node), the others as in the main run; 0 skips the DRA run");
ABSL_FLAG(int32_t, dra_claims_per_node, 2,
          "DRA run: allocated extended-resource claims of bound pods per DRA node (of 7 devices)");
ABSL_FLAG(bool, dra_only, false, "run the DRA rows only (after the mirror memory row)");

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
  c->set_read_timeout(600, 0);  // a slow build (a DRA scan per node) still reports
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

std::string BindArgs(const std::string& ns, const std::string& name, const std::string& uid,
                     const std::string& node) {
  return absl::StrCat("{\"PodName\":\"", name, "\",\"PodNamespace\":\"", ns, "\",\"PodUID\":\"",
                      uid, "\",\"Node\":\"", node, "\"}");
}

// Filter and prioritize over HTTP on `bodies`, each next to the floor on the same bodies;
// "$verb" in `label` names the verb.
void HttpLatencyRows(httplib::Client& client, httplib::Client& floor_client, EchoFloor& floor,
                     const std::vector<std::string>& bodies, const std::string& label,
                     const char* target) {
  for (const char* verb : {"filter", "prioritize"}) {
    size_t reply = 0;
    const std::string path = absl::StrCat("/", verb);
    TimePosts(client, path, {bodies.begin(), bodies.begin() + std::min<size_t>(10, bodies.size())}, &reply);  // warm-up
    const Percentiles ours = Summarise(TimePosts(client, path, bodies, &reply));
    floor.set_reply_size(reply);
    const Percentiles base = Summarise(TimePosts(floor_client, "/echo", bodies, nullptr));
    PrintLatency(absl::StrReplaceAll(label, {{"$verb", verb}}).c_str(), ours, base,
                 bodies.front().size(), reply, target);
  }
}

// The CPU time this thread spends in `call`.
template <typename F>
double ThreadMicros(const F& call) {
  const double t0 = ThreadCpuMicros();
  call();
  return ThreadCpuMicros() - t0;
}

// The same verbs without HTTP, in this thread's CPU time: what the extender itself costs per
// call, steady even when other processes share the cores. The floor's work is timed the same
// way, on answers of the verb's size. Returns the filter timings, empty when a call failed.
std::vector<double> InProcessRows(ExtenderService& service, const std::vector<std::string>& bodies,
                                  const std::string& label) {
  std::vector<double> filter_us;
  for (const char* verb : {"filter", "prioritize"}) {
    std::vector<double> us, floor_us;
    size_t reply = 0;
    for (const std::string& body : bodies) {
      VerbResult r;
      us.push_back(ThreadMicros([&] {
        r = std::string(verb) == "filter" ? service.Filter(body) : service.Prioritize(body);
      }));
      if (r.status != 200) {
        std::fprintf(stderr, "%s failed: %s\n", verb, r.body.substr(0, 200).c_str());
        return {};
      }
      reply = r.body.size();
    }
    for (const std::string& body : bodies) {
      floor_us.push_back(ThreadMicros([&] {
        if (!EchoFloor::Answer(body, reply)) std::abort();
      }));
    }
    if (std::string(verb) == "filter") filter_us = us;
    const Percentiles p = Summarise(us);
    const Percentiles f = Summarise(floor_us);
    std::printf("%-44s p50 %8.0f us  p99 %8.0f us | floor p50 %7.0f us p99 %7.0f us | ratio p50 %.2fx | CPU time of the calls alone, no HTTP (min %.0f us, floor %.0f us)\n",
                absl::StrReplaceAll(label, {{"$verb", verb}}).c_str(), p.p50_us, p.p99_us,
                f.p50_us, f.p99_us, f.p50_us > 0 ? p.p50_us / f.p50_us : 0.0, p.min_us, f.min_us);
  }
  return filter_us;
}

// A pod of the sustained runs.
struct BenchPod {
  std::string ns, name, uid, resource;
};
// What kube-scheduler's DRA allocator does for a pod before the bind (Reserve/PreBind: the
// claim allocated and written), false when it gives the pod up; and what Unreserve undoes
// after a failed bind.
using AllocateFn = std::function<bool(const BenchPod&, const std::string& node)>;
using ReleaseFn = std::function<void(const BenchPod&, const std::string& node)>;

// One scheduling cycle the way kube-scheduler runs it: filter -> prioritize (when more than
// one node passed) -> [allocate] -> bind the best. Returns false when the pod fit nowhere.
bool ScheduleOne(httplib::Client& client, const BenchPod& pod, const std::string& pod_json,
                 const std::string& names_json, const AllocateFn& allocate = nullptr,
                 const ReleaseFn& release = nullptr) {
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
  if (allocate && !allocate(pod, best)) return false;
  auto bres = client.Post("/bind", BindArgs(pod.ns, pod.name, pod.uid, best), "application/json");
  const bool bound = bres && bres->status == 200 && bres->body.find("\"Error\":\"\"") != std::string::npos;
  if (!bound && release) release(pod, best);
  return bound;
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

// Returns pods per second.
double SustainedRun(int port, const std::vector<std::string>& candidates, int pods, int clients,
                    const SyntheticClusterSpec& spec, const char* label, const char* target,
                    int run_id, const AllocateFn& allocate = nullptr,
                    const ReleaseFn& release = nullptr, const char* resource = nullptr) {
  const std::string names_json = NamesArray(candidates);
  std::atomic<int> next{0}, bound{0}, unschedulable{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = NewClient(port);
      std::mt19937_64 rng(static_cast<uint64_t>(c + 1000 * run_id));
      for (int i = next++; i < pods; i = next++) {
        BenchPod pod;
        pod.ns = ProjectNamespace(static_cast<int>(rng() % static_cast<uint64_t>(spec.projects)));
        pod.name = absl::StrCat("bench-", run_id, "-", i);
        pod.uid = absl::StrCat("uid-", pod.name);
        pod.resource = resource != nullptr ? resource : PickResource(rng);
        const std::string json = PendingPodJson(pod.ns, pod.name, pod.uid, pod.resource, 1);
        if (ScheduleOne(*client, pod, json, names_json, allocate, release)) {
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
  return pods / seconds;
}

// The service under test (a RecordOnlyBinder; the decision log off: thousands of binds, the
// per-bind log would only measure stderr) and its HTTP server, started; stopped on
// destruction.
struct ServedBench {
  RecordOnlyBinder binder;
  DecisionLog quiet{DecisionLogLevel::kOff, [](absl::string_view) {}};
  std::unique_ptr<ExtenderService> service;
  std::unique_ptr<HttpServer> server;
  ~ServedBench() {
    if (server == nullptr) return;
    server->Stop();
    server->Wait(absl::Seconds(10));
  }
};

// `policy` by name ("" for --policy) over `mirror`; null after printing why it cannot start.
std::unique_ptr<ServedBench> Serve(Mirror* mirror, absl::string_view policy_name) {
  std::shared_ptr<const Catalog> catalog(&Catalog::BuiltIn(), [](const Catalog*) {});
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakeServicePolicy(
      policy_name.empty() ? absl::GetFlag(FLAGS_policy) : std::string(policy_name), catalog);
  if (!policy.ok()) {
    std::fprintf(stderr, "policy: %s\n", policy.status().ToString().c_str());
    return nullptr;
  }
  auto b = std::make_unique<ServedBench>();
  ServiceOptions service_options;
  service_options.decision_log = &b->quiet;
  b->service = std::make_unique<ExtenderService>(mirror, *std::move(policy), &b->binder, service_options);
  HttpServerOptions options;
  options.port = 0;
  options.threads = std::max(8, absl::GetFlag(FLAGS_clients) * 2);
  absl::StatusOr<std::unique_ptr<HttpServer>> server = HttpServer::Create(b->service.get(), nullptr, options);
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
    return nullptr;
  }
  b->server = *std::move(server);
  b->server->Start();
  return b;
}

// Each policy of --compare_policies over the same mirror (its own service and HTTP server):
// filter and prioritize latency at every candidate name next to the floor, and the sustained
// rate at every candidate. The mirror fills as the runs bind, in policy order.
int ComparePolicies(Mirror* mirror, const SyntheticClusterSpec& spec,
                    const std::vector<std::string>& names, const std::vector<std::string>& bodies,
                    EchoFloor& floor) {
  const std::string list = absl::GetFlag(FLAGS_compare_policies);
  if (list.empty()) return 0;
  auto floor_client = NewClient(floor.port());
  int run_id = 10;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    std::unique_ptr<ServedBench> served = Serve(mirror, name);
    if (served == nullptr) return 2;
    auto client = NewClient(served->server->port());
    HttpLatencyRows(*client, *floor_client, floor, bodies,
                    absl::StrCat("[", name, "] $verb, ", names.size(), " names"), "p99 <= 2x floor");
    SustainedRun(served->server->port(), names, absl::GetFlag(FLAGS_compare_sustain_pods),
                 absl::GetFlag(FLAGS_clients), spec,
                 absl::StrCat("[", name, "] sustained, ", names.size(), " candidates").c_str(),
                 ">= 500 pods/s", run_id++);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------
// DRA mode (docs/dra.md): a cluster where --dra_share of the nodes are served by the NVIDIA DRA
// driver. Each DRA node publishes the fact sheet's ResourceSlice (shared/protocol/dra/: one
// A100 with seven 1g.5gb MIG devices), renamed for the node, every device shareable; the
// fact sheet's DeviceClass maps nvidia.com/mig-1g.5gb, and a copy of it the shared offering
// nvidia.com/mig-1g.5gb.shared, so that filter predicts the allocator's pick on every DRA
// candidate. --dra_claims_per_node devices of each are held by the fact sheet's
// extended-resource claim, renamed for a bound (charged) pod. Everything is decoded by the
// service's decoders and applied as a relist (ClusterState::ApplyBatch).

constexpr char kDraSharedClass[] = "mig-1g-5gb-shared.nvidia.com";

std::string Serialise(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

absl::StatusOr<std::string> ReadDraFixture(const std::string& name) {
  const std::string path = absl::StrCat(GSE_SHARED_DIR, "/protocol/dra/", name);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct DraFixtures {
  std::string mig_class;        // as the fact sheet has it
  std::string shared_class;     // the same selectors, mapping the shared offering
  std::string slice;            // the fact sheet's node gpu-node-a
  rapidjson::Document claim;    // the fact sheet's allocated extended-resource claim
};

absl::StatusOr<DraFixtures> LoadDraFixtures() {
  DraFixtures f;
  absl::StatusOr<std::string> cls = ReadDraFixture("deviceclass-mig-1g-extended.json");
  absl::StatusOr<std::string> slice = ReadDraFixture("resourceslice-a100-mig-node.json");
  absl::StatusOr<std::string> claim = ReadDraFixture("resourceclaim-extended-allocated.json");
  for (const auto* s : {&cls, &slice, &claim}) {
    if (!s->ok()) return s->status();
  }
  f.mig_class = *cls;
  rapidjson::Document shared, node;
  shared.Parse(cls->data(), cls->size());
  node.Parse(slice->data(), slice->size());
  f.claim.Parse(claim->data(), claim->size());
  if (shared.HasParseError() || node.HasParseError() || f.claim.HasParseError()) {
    return absl::InvalidArgumentError("DRA fact sheet objects do not parse");
  }
  // Every device takes shares as the fact sheet's first one does (allowMultipleAllocations,
  // its `shares` capacity): else the shared offering is not DRA-backed there ("the DRA device
  // allows one allocation") and filter never predicts. Its capacities without a policy still
  // make each share take a whole device.
  rapidjson::Value& devices = node["spec"]["devices"];
  const rapidjson::Value& first = devices[0];
  for (rapidjson::SizeType i = 1; i < devices.Size(); ++i) {
    rapidjson::Value& d = devices[i];
    d.AddMember("allowMultipleAllocations", true, node.GetAllocator());
    d["capacity"].AddMember("shares", rapidjson::Value(first["capacity"]["shares"], node.GetAllocator()),
                            node.GetAllocator());
  }
  f.slice = Serialise(node);
  shared["metadata"]["name"].SetString(kDraSharedClass, shared.GetAllocator());
  shared["metadata"]["uid"].SetString("uid-mig-1g-5gb-shared", shared.GetAllocator());
  shared["spec"]["extendedResourceName"].SetString("nvidia.com/mig-1g.5gb.shared",
                                                   shared.GetAllocator());
  f.shared_class = Serialise(shared);
  return f;
}

std::string DraNodeName(int i) {
  char name[32];
  std::snprintf(name, sizeof name, "dra-%05d", i);
  return name;
}

// The fact sheet's slice as `node` publishes it (its own pool, slice name and UUIDs).
std::string DraSliceJson(const DraFixtures& f, const std::string& node) {
  return absl::StrReplaceAll(f.slice, {{"gpu-node-a", node},
                                       {"\"MIG-", absl::StrCat("\"MIG-", node, "-")},
                                       {"\"GPU-", absl::StrCat("\"GPU-", node, "-")}});
}

// The fact sheet's claim, allocated for `pod` on `device` of `node`'s pool.
std::string DraClaimJson(const DraFixtures& f, const BenchPod& pod, const std::string& node,
                         const std::string& device) {
  rapidjson::Document d;
  auto& a = d.GetAllocator();
  d.CopyFrom(f.claim, a);
  const std::string name = absl::StrCat(pod.name, "-extended-resources-x");
  auto set = [&](rapidjson::Value& v, const std::string& text) { v.SetString(text.c_str(), a); };
  rapidjson::Value& meta = d["metadata"];
  set(meta["name"], name);
  set(meta["namespace"], pod.ns);
  set(meta["uid"], absl::StrCat("uid-", name));
  set(meta["ownerReferences"][0]["name"], pod.name);
  set(meta["ownerReferences"][0]["uid"], pod.uid);
  set(d["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"], kDraSharedClass);
  rapidjson::Value& alloc = d["status"]["allocation"];
  rapidjson::Value& result = alloc["devices"]["results"][0];
  set(result["pool"], node);
  set(result["device"], device);
  set(result["shareID"], absl::StrCat("share-", name));
  set(alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0], node);
  set(d["status"]["reservedFor"][0]["name"], pod.name);
  set(d["status"]["reservedFor"][0]["uid"], pod.uid);
  return Serialise(d);
}

// A pod bound on `node` (no assignment annotation: the mirror charges it the devices its
// claims hold).
PodObject BoundDraPod(const BenchPod& pod, const std::string& node) {
  PodObject p;
  p.namespace_name = pod.ns;
  p.name = pod.name;
  p.uid = pod.uid;
  p.node_name = node;
  p.phase = "Running";
  ContainerResources c;
  c.name = "main";
  c.requests_milli[pod.resource] = 1000;
  c.limits_milli[pod.resource] = 1000;
  p.containers.push_back(std::move(c));
  return p;
}

// Appends `json`'s DRA objects to `batch`.
absl::Status AddDra(const std::string& json, DraObjectBatch& batch) {
  absl::StatusOr<DraObjectBatch> b = DecodeDraObjects(json);
  if (!b.ok()) return b.status();
  for (auto& c : b->device_classes) batch.device_classes.push_back(std::move(c));
  for (auto& s : b->resource_slices) batch.resource_slices.push_back(std::move(s));
  for (auto& c : b->resource_claims) batch.resource_claims.push_back(std::move(c));
  return absl::OkStatus();
}

// The echo floor of one scheduling cycle per pod (filter, prioritize and bind bodies of the
// same sizes), with the same clients: pods per second.
double EchoCycleRate(EchoFloor& floor, const std::string& filter_body, const std::string& bind_body,
                     int pods, int clients) {
  std::atomic<int> next{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto client = NewClient(floor.port());
      for (int i = next++; i < pods; i = next++) {
        for (const std::string* body : {&filter_body, &filter_body, &bind_body}) {
          if (!client->Post("/echo", *body, "application/json")) std::abort();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return pods / std::chrono::duration<double>(Clock::now() - t0).count();
}

int DraRun(const SyntheticClusterSpec& base, EchoFloor& floor) {
  const double share = absl::GetFlag(FLAGS_dra_share);
  if (share <= 0) return 0;
  const int dra_nodes = std::clamp(static_cast<int>(base.nodes * share + 0.5), 1, base.nodes);
  const int claims_per_node = std::clamp(absl::GetFlag(FLAGS_dra_claims_per_node), 0, 7);
  SyntheticClusterSpec plugin = base;
  plugin.nodes = base.nodes - dra_nodes;
  plugin.bound_pods = static_cast<int>(static_cast<int64_t>(base.bound_pods) * plugin.nodes / base.nodes);

  absl::StatusOr<DraFixtures> fixtures = LoadDraFixtures();
  if (!fixtures.ok()) {
    std::fprintf(stderr, "DRA run: %s\n", fixtures.status().ToString().c_str());
    return 1;
  }
  const DraFixtures& f = *fixtures;
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(SyntheticClusterJson(plugin));
  if (!batch.ok()) {
    std::fprintf(stderr, "DRA run: synthetic cluster: %s\n", batch.status().ToString().c_str());
    return 1;
  }
  DraObjectBatch dra;
  for (const std::string* json : {&f.mig_class, &f.shared_class}) {
    if (absl::Status s = AddDra(*json, dra); !s.ok()) {
      std::fprintf(stderr, "DRA run: class: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::string> dra_names;
  for (int i = 0; i < dra_nodes; ++i) {
    const std::string node = DraNodeName(i);
    dra_names.push_back(node);
    NodeObject n;  // a node of the DRA driver advertises no GPU name
    n.name = node;
    n.uid = node + "-uid";
    n.allocatable_milli["cpu"] = 64000;
    n.allocatable_milli["pods"] = 110000;
    batch->nodes.push_back(std::move(n));
    const size_t first_slice = dra.resource_slices.size();
    if (absl::Status s = AddDra(DraSliceJson(f, node), dra); !s.ok()) {
      std::fprintf(stderr, "DRA run: slice of %s: %s\n", node.c_str(), s.ToString().c_str());
      return 1;
    }
    const std::vector<DraDevice>& devices = dra.resource_slices[first_slice].devices;
    for (int c = 0; c < claims_per_node && c < static_cast<int>(devices.size()); ++c) {
      BenchPod pod;
      pod.ns = ProjectNamespace((i * 7 + c) % base.projects);
      pod.name = absl::StrCat("dra-pod-", i, "-", c);
      pod.uid = absl::StrCat("uid-", pod.name);
      pod.resource = "nvidia.com/mig-1g.5gb.shared";
      if (absl::Status s = AddDra(DraClaimJson(f, pod, node, devices[c].name), dra); !s.ok()) {
        std::fprintf(stderr, "DRA run: claim: %s\n", s.ToString().c_str());
        return 1;
      }
      batch->pods.push_back(BoundDraPod(pod, node));
    }
  }
  MirrorOptions mirror_options;
  mirror_options.dra = true;
  auto mirror = std::make_unique<Mirror>(
      std::shared_ptr<const Catalog>(&Catalog::BuiltIn(), [](const Catalog*) {}), mirror_options);
  auto t_build = Clock::now();
  mirror->Write([&](ClusterState& s) { s.ApplyBatch(*batch, &dra); });
  const double build_s = std::chrono::duration<double>(Clock::now() - t_build).count();
  struct Census {
    int dra_units = 0, held = 0;
  };
  const Census census = mirror->Read([&](const ClusterState& s) {
    Census c;
    const OfferingId shared = s.catalog().Find("nvidia.com/mig-1g.5gb.shared")->id;
    for (const std::string& name : dra_names) {
      const NodeState* n = s.FindNode(name);
      const NodeOffering* no = n != nullptr ? n->Find(shared) : nullptr;
      if (no == nullptr || !no->dra) continue;
      c.dra_units += static_cast<int>(no->units.size());
      for (const Unit& u : no->units) c.held += u.Empty() ? 0 : 1;
    }
    return c;
  });
  std::printf("%-44s %d DRA nodes (%zu slices, %zu claims, %d DRA units, %d held) + %d plugin nodes, applied in %.2f s\n",
              "[dra] mirror", dra_nodes, dra.resource_slices.size(), dra.resource_claims.size(),
              census.dra_units, census.held, plugin.nodes, build_s);
  if (census.dra_units != dra_nodes * 7 || census.held != dra_nodes * claims_per_node) {
    std::fprintf(stderr, "DRA run: the mirror does not hold the DRA nodes as built\n");
    return 1;
  }

  // A DeviceClass change re-derives every node (state/dra_nodes.cc).
  {
    std::vector<double> us;
    for (int i = 0; i < 3; ++i) {
      DraDeviceClass c = dra.device_classes[1];
      c.resource_version = absl::StrCat("bench-", i);
      const auto t0 = Clock::now();
      mirror->Write([&](ClusterState& s) { s.ApplyDeviceClass(std::move(c)); });
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    const Percentiles p = Summarise(us);
    std::printf("%-44s p50 %8.0f us (%d nodes re-derived)\n", "[dra] DeviceClass update", p.p50_us,
                base.nodes);
  }

  std::unique_ptr<ServedBench> served = Serve(mirror.get(), "");
  if (served == nullptr) return 2;
  ExtenderService& service = *served->service;

  // Every node a candidate, plugin and DRA ones interleaved.
  std::vector<std::string> names = SyntheticNodeNames(plugin);
  for (size_t i = 0; i < dra_names.size(); ++i) {
    names.insert(names.begin() + static_cast<std::ptrdiff_t>(std::min(names.size(), 2 * i + 1)), dra_names[i]);
  }
  const std::string names_json = NamesArray(names);
  std::vector<std::string> bodies;
  for (int i = 0; i < absl::GetFlag(FLAGS_iterations); ++i) {
    const std::string ns = ProjectNamespace(i % base.projects);
    const std::string name = absl::StrCat("dra-probe-", i);
    bodies.push_back(absl::StrCat("{\"Pod\":", PendingPodJson(ns, name, "uid-" + name, "nvidia.com/mig-1g.5gb.shared", 1),
                                  ",\"Nodes\":null,\"NodeNames\":", names_json, "}"));
  }
  auto client = NewClient(served->server->port());
  auto floor_client = NewClient(floor.port());
  HttpLatencyRows(*client, *floor_client, floor, bodies,
                  absl::StrCat("[dra] $verb, ", names.size(), " candidates"),
                  "p99 <= 2 ms and <= 2x floor");
  if (InProcessRows(service, bodies, absl::StrCat("[dra] $verb, ", names.size(), " in-process")).empty()) {
    return 1;
  }

  // Sustained: kube-scheduler's cycle, with its allocator's Reserve/PreBind played in between
  // for a DRA node: the claim allocated on the device the model predicts (the fact sheet's
  // first fit) and delivered to the mirror as the claim watch would, then the bind (which
  // verifies that claim). A failed bind deletes the claim (Unreserve).
  std::atomic<int> dra_binds{0};
  auto claim_key = [](const BenchPod& pod) {
    return absl::StrCat(pod.ns, "/", pod.name, "-extended-resources-x");
  };
  AllocateFn allocate = [&](const BenchPod& pod, const std::string& node) {
    if (node.rfind("dra-", 0) != 0) return true;
    const DraPrediction p = mirror->Read([&](const ClusterState& s) {
      return s.dra().PredictExtendedResourcePick(kDraSharedClass, node, 1, DraPredictOptions{});
    });
    if (p.kind != DraPrediction::kDevices) return false;
    absl::StatusOr<DraObjectBatch> claim = DecodeDraObjects(DraClaimJson(f, pod, node, p.devices[0].device));
    if (!claim.ok() || claim->resource_claims.size() != 1) std::abort();
    mirror->Write([&](ClusterState& s) { s.ApplyResourceClaim(std::move(claim->resource_claims[0])); });
    ++dra_binds;
    return true;
  };
  ReleaseFn release = [&](const BenchPod& pod, const std::string& node) {
    if (node.rfind("dra-", 0) != 0) return;
    --dra_binds;
    mirror->Write([&](ClusterState& s) { s.RemoveResourceClaim(claim_key(pod)); });
  };
  const int clients = absl::GetFlag(FLAGS_clients);
  const int pods = absl::GetFlag(FLAGS_sustain_pods);
  const double rate = SustainedRun(served->server->port(), names, pods, clients, base,
                                   absl::StrCat("[dra] sustained, ", names.size(), " candidates").c_str(),
                                   ">= 500 pods/s", 3, allocate, release);
  const double floor_rate = EchoCycleRate(floor, bodies.front(), BindArgs("proj-000", "dra-floor", "uid-dra-floor", names.back()),
                                          pods, clients);
  std::printf("%-44s %8.0f pods/s (%d bound on DRA nodes) | floor %.0f cycles/s | ratio %.2fx\n",
              "[dra] sustained vs floor", rate, dra_binds.load(), floor_rate,
              rate > 0 ? floor_rate / rate : 0.0);
  // Above, a project's pods join its own slices, mostly on the device-plugin half (I3): a DRA
  // node counts as joining one only where the allocator's predicted pick is that slice. Here
  // the candidates are the DRA nodes alone (what kube-scheduler's DRA filter leaves once the
  // device-plugin nodes are full), so every bind verifies the claim the allocator made.
  const int dra_before = dra_binds.load();
  const double dra_rate = SustainedRun(
      served->server->port(), dra_names, pods, clients, base,
      absl::StrCat("[dra] sustained, ", dra_names.size(), " DRA nodes only").c_str(),
      ">= 500 pods/s", 4, allocate, release, "nvidia.com/mig-1g.5gb.shared");
  std::printf("%-44s %8.0f pods/s (%d bound on DRA nodes)\n", "[dra] sustained, DRA binds",
              dra_rate, dra_binds.load() - dra_before);
  const AuditReport end = mirror->Read([](const ClusterState& s) { return s.Audit(); });
  std::printf("%-44s %lld oversubscribed, %lld multi-owner units after the run (must be 0)\n",
              "[dra] audit", static_cast<long long>(end.oversubscribed_units),
              static_cast<long long>(end.multi_owner_units));
  return end.problems.empty() ? 0 : 1;
}

int Main() {
  SyntheticClusterSpec spec;
  spec.nodes = absl::GetFlag(FLAGS_nodes);
  spec.bound_pods = absl::GetFlag(FLAGS_pods);
  const int iterations = absl::GetFlag(FLAGS_iterations);

  std::printf("extender_bench: %d nodes x %d GPUs, %d bound pods requested, %u hardware threads\n",
              spec.nodes, spec.gpus_per_node, spec.bound_pods, std::thread::hardware_concurrency());
  if (absl::GetFlag(FLAGS_dra_only)) {
    EchoFloor floor;
    return DraRun(spec, floor);
  }

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
  TuneMallocForLargeBodies();  // as the binary does before serving
  std::unique_ptr<ServedBench> served = Serve(mirror.get(), "");
  if (served == nullptr) return 2;
  ExtenderService& service = *served->service;
  const std::unique_ptr<HttpServer>& server = served->server;
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
  auto client = NewClient(server->port());
  auto floor_client = NewClient(floor.port());
  HttpLatencyRows(*client, *floor_client, floor, bodies,
                  absl::StrCat("$verb, ", names.size(), " candidate names"),
                  "p99 <= 2 ms and <= 2x floor");

  // --- the same verbs without HTTP (InProcessRows).
  const std::vector<double> plain_filter_us =
      InProcessRows(service, bodies, absl::StrCat("$verb, ", names.size(), " names, in-process"));
  if (plain_filter_us.empty()) return 1;

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
        us.push_back(ThreadMicros([&] { r = service.Filter(body); }));
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
  SustainedRun(server->port(), names, sustain, clients, spec,
               absl::StrCat("sustained, ", names.size(), " candidates").c_str(), ">= 500 pods/s", 1);
  std::vector<std::string> small(names.begin(), names.begin() + std::min<size_t>(names.size(), static_cast<size_t>(absl::GetFlag(FLAGS_small_candidates))));
  SustainedRun(server->port(), small, sustain * 4, clients, spec,
               absl::StrCat("sustained, ", small.size(), " candidates").c_str(), ">= 5,000 pods/s", 2);

  // --- per policy, after the main run (whose figures stay comparable with earlier runs).
  if (const int rc = ComparePolicies(mirror.get(), spec, names, bodies, floor); rc != 0) return rc;
  // --- DRA mode, on a mirror of its own.
  if (const int rc = DraRun(spec, floor); rc != 0) return rc;

  AuditReport end = mirror->Read([](const ClusterState& s) { return s.Audit(); });
  std::printf("%-44s %lld oversubscribed, %lld multi-owner units after the run (must be 0)\n", "audit",
              static_cast<long long>(end.oversubscribed_units), static_cast<long long>(end.multi_owner_units));
  return end.problems.empty() ? 0 : 1;
}

}  // namespace
}  // namespace gse::perf

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Benchmarks of the extender service against a same-run loopback floor.");
  absl::ParseCommandLine(argc, argv);
  return gse::perf::Main();
}
