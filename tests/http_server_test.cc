// HttpServer over real loopback HTTP: every body kube-scheduler 1.26 was seen sending gets a
// well-formed, correct answer; every error path answers as documented in http_server.h and
// leaves the mirror unchanged; the server keeps serving after each error and drains the
// requests in flight when stopped.
#include "extender/http_server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "kube/binder.h"
#include "scoring/fragmentation_policy.h"
#include "state/mirror.h"
#include "tests/testing/eventually.h"
#include "tests/testing/http_fixture.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::gse::testing::HttpFixture;
using ::gse::testing::HttpFixtureOptions;
using ::gse::testing::PostJson;
using ::gse::testing::RawExchange;
using ::gse::testing::RawStatus;
using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kPrefix[] = "/gpu-extender";  // the captures' urlPrefix path

std::string Captured(const std::string& name) {
  return ReadFileOrDie(SharedPath("protocol/captured-k8s-1.26/k8s1.26-" + name));
}

rapidjson::Document Parse(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str(), json.size());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << json.substr(0, 300);
  return doc;
}

std::string ToJson(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

// The two captured nodes as a `kubectl get -o json` List (the NodeList as sent in requests
// carries no kind), plus the objects given.
std::string ClusterWithCapturedNodes(const std::vector<std::string>& extra_items = {}) {
  rapidjson::Document nodes =
      Parse(ReadFileOrDie(SharedPath("protocol/nodelist-2-gpu-nodes.json")));
  std::vector<std::string> items;
  for (rapidjson::Value& node : nodes["items"].GetArray()) {
    node.AddMember("kind", "Node", nodes.GetAllocator());
    node.AddMember("apiVersion", "v1", nodes.GetAllocator());
    items.push_back(ToJson(node));
  }
  items.push_back(R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"ml-team"}})");
  items.insert(items.end(), extra_items.begin(), extra_items.end());
  return absl::StrCat(R"({"apiVersion":"v1","kind":"List","items":[)", absl::StrJoin(items, ","),
                      "]}");
}

// A running pod of ml-team holding unit `unit` of nvidia.com/mig-1g.5gb on gpu-node-a.
std::string BoundPod(const std::string& name, const std::string& uid, int unit) {
  return absl::StrCat(
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")", name,
      R"(","namespace":"ml-team","uid":")", uid,
      R"(","annotations":{"gpu.themelio.io/unit":"gpu-node-a/nvidia.com/mig-1g.5gb/)", unit,
      R"(","gpu.themelio.io/amount":"1"}},"spec":{"nodeName":"gpu-node-a","containers":[)"
      R"({"name":"c","resources":{"requests":{"nvidia.com/mig-1g.5gb":"1"},)"
      R"("limits":{"nvidia.com/mig-1g.5gb":"1"}}}]},"status":{"phase":"Running"}})");
}

std::unique_ptr<HttpFixture> StartOrDie(HttpFixtureOptions options) {
  absl::StatusOr<std::unique_ptr<HttpFixture>> f = HttpFixture::Start(std::move(options));
  if (!f.ok()) throw std::runtime_error(std::string(f.status().message()));
  return std::move(*f);
}

std::unique_ptr<HttpFixture> CapturedCluster(std::vector<std::string> extra = {},
                                             HttpServerOptions http = {}) {
  HttpFixtureOptions options;
  options.snapshot_json = ClusterWithCapturedNodes(extra);
  options.http = std::move(http);
  options.http.prefix = kPrefix;
  return StartOrDie(std::move(options));
}

std::string DebugState(httplib::Client& client) {
  httplib::Result r = client.Get("/debug/state");
  EXPECT_TRUE(r) << httplib::to_string(r.error());
  if (!r) return "";
  EXPECT_EQ(r->status, 200);
  return r->body;
}

// Input node names of an ExtenderArgs body (NodeNames, or the names of Nodes.items).
std::vector<std::string> InputNodes(const rapidjson::Document& args) {
  std::vector<std::string> names;
  if (args["NodeNames"].IsArray()) {
    for (const auto& n : args["NodeNames"].GetArray()) names.push_back(n.GetString());
  } else {
    for (const auto& n : args["Nodes"]["items"].GetArray()) {
      names.push_back(n["metadata"]["name"].GetString());
    }
  }
  return names;
}

void ExpectJsonAnswer(const httplib::Result& r, int status) {
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, status) << r->body;
  EXPECT_THAT(r->get_header_value("Content-Type"), StartsWith("application/json"));
  // kube-scheduler asks for gzip; verb answers are sent plain (latency over bytes).
  EXPECT_FALSE(r->has_header("Content-Encoding")) << r->get_header_value("Content-Encoding");
}

// A filter answer is well-formed, NodeNames/Nodes per mode, and accounts for every input node
// exactly once (passed, failed or unresolvable). Returns the names that passed.
std::set<std::string> CheckFilterAnswer(const std::string& request, const std::string& answer) {
  rapidjson::Document args = Parse(request);
  rapidjson::Document res = Parse(answer);
  const bool node_cache = args["NodeNames"].IsArray();
  std::set<std::string> passed;
  EXPECT_TRUE(res.IsObject());
  for (const char* key :
       {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}) {
    EXPECT_TRUE(res.HasMember(key)) << key << " missing in " << answer;
  }
  EXPECT_TRUE(res["Error"].IsString());
  EXPECT_STREQ(res["Error"].GetString(), "");
  if (node_cache) {
    EXPECT_TRUE(res["Nodes"].IsNull());
    EXPECT_TRUE(res["NodeNames"].IsArray());
    for (const auto& n : res["NodeNames"].GetArray()) passed.insert(n.GetString());
  } else {
    // nodeCacheCapable=false: kube-scheduler reads only Nodes (PROTOCOL §0.7).
    EXPECT_TRUE(res["Nodes"].IsObject());
    for (const auto& n : res["Nodes"]["items"].GetArray()) {
      passed.insert(n["metadata"]["name"].GetString());
    }
  }
  std::map<std::string, int> seen;
  for (const std::string& n : passed) ++seen[n];
  for (const char* key : {"FailedNodes", "FailedAndUnresolvableNodes"}) {
    if (res[key].IsNull()) continue;
    EXPECT_TRUE(res[key].IsObject());
    for (const auto& m : res[key].GetObject()) {
      ++seen[m.name.GetString()];
      EXPECT_TRUE(m.value.IsString() && m.value.GetStringLength() > 0)
          << key << "[" << m.name.GetString() << "] needs a reason";
    }
  }
  const std::vector<std::string> input = InputNodes(args);
  EXPECT_EQ(seen.size(), input.size()) << answer;
  for (const std::string& n : input) EXPECT_EQ(seen[n], 1) << n << " in " << answer;
  return passed;
}

// Prioritize answers a bare array with one 0..10 score per input node.
std::map<std::string, int64_t> CheckPrioritizeAnswer(const std::string& request,
                                                     const std::string& answer) {
  rapidjson::Document args = Parse(request);
  rapidjson::Document res = Parse(answer);
  std::map<std::string, int64_t> scores;
  EXPECT_TRUE(res.IsArray()) << answer;
  if (!res.IsArray()) return scores;
  for (const auto& hp : res.GetArray()) {
    EXPECT_TRUE(hp.IsObject() && hp.HasMember("Host") && hp["Host"].IsString() &&
                hp.HasMember("Score") && hp["Score"].IsInt64())
        << answer;
    const int64_t score = hp["Score"].GetInt64();
    EXPECT_GE(score, 0);
    EXPECT_LE(score, 10);
    EXPECT_TRUE(scores.emplace(hp["Host"].GetString(), score).second) << "duplicate host";
  }
  std::set<std::string> input;
  for (const std::string& n : InputNodes(args)) input.insert(n);
  std::set<std::string> hosts;
  for (const auto& [h, s] : scores) hosts.insert(h);
  EXPECT_EQ(hosts, input);
  return scores;
}

// ----------------------------------------------------------------------- captured bodies

TEST(HttpServerCapturedTest, FilterPrioritizeBindAsKubeSchedulerSentThem) {
  auto f = CapturedCluster();
  auto client = f->NewClient();
  const std::string state_before = DebugState(*client);

  // gpu-node-a has 7 free exclusive 1g.5gb slices; gpu-node-b time-slices the same name,
  // which the catalog offers exclusive only, so it can never host the pod.
  for (const char* mode : {"nodecache-true", "nodecache-false"}) {
    SCOPED_TRACE(mode);
    const std::string filter = Captured(absl::StrCat("filter-request-", mode, ".json"));
    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/filter"), filter);
    ExpectJsonAnswer(r, 200);
    ASSERT_TRUE(r);
    EXPECT_EQ(CheckFilterAnswer(filter, r->body), std::set<std::string>{"gpu-node-a"});

    const std::string prioritize = Captured(absl::StrCat("prioritize-request-", mode, ".json"));
    r = PostJson(*client, absl::StrCat(kPrefix, "/prioritize"), prioritize);
    ExpectJsonAnswer(r, 200);
    ASSERT_TRUE(r);
    std::map<std::string, int64_t> scores = CheckPrioritizeAnswer(prioritize, r->body);
    EXPECT_EQ(scores["gpu-node-b"], 0) << "an infeasible node scores 0";
    EXPECT_GE(scores["gpu-node-a"], scores["gpu-node-b"]);
  }
  // Filter and prioritize decide; they reserve nothing.
  EXPECT_EQ(DebugState(*client), state_before);

  // The captured bind is for cuda-infer-3, the pod of the nodecache-true filter above.
  httplib::Result r =
      PostJson(*client, absl::StrCat(kPrefix, "/bind"), Captured("bind-request.json"));
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  rapidjson::Document bind = Parse(r->body);
  ASSERT_TRUE(bind.IsObject() && bind.HasMember("Error") && bind["Error"].IsString());
  EXPECT_STREQ(bind["Error"].GetString(), "");

  rapidjson::Document state = Parse(DebugState(*client));
  int held = 0;
  for (const auto& unit : state["units"].GetArray()) {
    for (const auto& h : unit["holders"].GetArray()) {
      EXPECT_STREQ(h.GetString(), "ml-team/cuda-infer-3");
      EXPECT_STREQ(unit["node"].GetString(), "gpu-node-a");
      EXPECT_STREQ(unit["resource"].GetString(), "nvidia.com/mig-1g.5gb");
      ++held;
    }
  }
  EXPECT_EQ(held, 1);

  // kube-scheduler retries a bind whose answer it lost: same pod, same node, still one unit.
  r = PostJson(*client, absl::StrCat(kPrefix, "/bind"), Captured("bind-request.json"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  state = Parse(DebugState(*client));
  held = 0;
  for (const auto& unit : state["units"].GetArray()) held += unit["holders"].Size();
  EXPECT_EQ(held, 1);
}

// --score-all-pods (ServiceOptions::score_pods_without_offering): kube-scheduler sends every
// pod when the extender entry has no managedResources (scheduler-config/all-pods.yaml).

// A node without GPUs, as `kubectl get -o json` lists it: as much cpu and memory as the
// captured GPU nodes.
constexpr char kCpuNode[] =
    R"({"apiVersion":"v1","kind":"Node","metadata":{"name":"cpu-node","labels":)"
    R"({"kubernetes.io/hostname":"cpu-node"}},"status":{"allocatable":{"cpu":"127500m",)"
    R"("memory":"1055311780Ki","pods":"110"},"capacity":{"cpu":"128","memory":"1055311780Ki",)"
    R"("pods":"110"}}})";

// The captured prioritize body (nodecache-true) with its pod turned into `name`, a CPU-only
// pod asking for `cpu` (no GPU resource left), offered cpu-node and gpu-node-a.
std::string CpuOnlyArgs(const std::string& name, const std::string& cpu) {
  rapidjson::Document args = Parse(Captured("prioritize-request-nodecache-true.json"));
  auto& a = args.GetAllocator();
  rapidjson::Value& meta = args["Pod"]["metadata"];
  meta["name"].SetString(name.c_str(), a);
  meta["uid"].SetString(absl::StrCat("uid-", name).c_str(), a);
  meta.RemoveMember("annotations");
  rapidjson::Value& resources = args["Pod"]["spec"]["containers"][0]["resources"];
  for (const char* kind : {"requests", "limits"}) {
    resources[kind].RemoveMember("nvidia.com/mig-1g.5gb");
    resources[kind]["cpu"].SetString(cpu.c_str(), a);
  }
  rapidjson::Value names(rapidjson::kArrayType);
  names.PushBack("cpu-node", a).PushBack("gpu-node-a", a);
  args["NodeNames"] = names;
  return ToJson(args);
}

// Records what each bind asked the API server for.
class AnnotationBinder : public Binder {
 public:
  BindResult Bind(const BindTarget& target,
                  const std::map<std::string, std::string>& annotations) override {
    absl::MutexLock lock(&mu_);
    bound_[target.pod_uid] = {target.node, annotations};
    return BindResult::Bound();
  }
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>> bound() {
    absl::MutexLock lock(&mu_);
    return bound_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>> bound_
      ABSL_GUARDED_BY(mu_);
};

// fgd with an expected mix of 1g.5gb pods needing 4 cpus each (the captured pod's slice).
std::unique_ptr<HttpFixture> FgdCluster(bool score_all_pods, Binder* binder = nullptr) {
  HttpFixtureOptions options;
  options.snapshot_json = ClusterWithCapturedNodes({kCpuNode});
  options.http.prefix = kPrefix;
  options.policy = "fgd";
  TaskClass task;
  task.resource = "nvidia.com/mig-1g.5gb";
  task.cpu_milli = 4000;
  options.policy_options.fgd_seed = {task};
  options.score_all_pods = score_all_pods;
  options.binder = binder;
  return StartOrDie(std::move(options));
}

std::map<std::string, int64_t> Prioritized(HttpFixture& f, const std::string& body) {
  auto client = f.NewClient();
  httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/prioritize"), body);
  ExpectJsonAnswer(r, 200);
  if (!r) return {};
  return CheckPrioritizeAnswer(body, r->body);
}

TEST(HttpServerScoreAllPodsTest, OffACpuOnlyPodScoresZeroEverywhereAsBefore) {
  auto f = FgdCluster(/*score_all_pods=*/false);
  const std::map<std::string, int64_t> zero = {{"cpu-node", 0}, {"gpu-node-a", 0}};
  EXPECT_EQ(Prioritized(*f, CpuOnlyArgs("web-big", "126")), zero);
  EXPECT_EQ(Prioritized(*f, CpuOnlyArgs("web-small", "1")), zero);
}

TEST(HttpServerScoreAllPodsTest, OnFgdScoresACpuOnlyPodByTheGpusItsCpuWouldStrand) {
  AnnotationBinder binder;
  auto f = FgdCluster(/*score_all_pods=*/true, &binder);
  auto client = f->NewClient();
  // 126 of gpu-node-a's 127.5 cpus leave 1.5: none of its 7 idle slices could then take a pod
  // of the mix (4 cpus each), so fgd scores it below the no-change score 5; cpu-node has no
  // GPU to strand (5). Sent every pod, fgd names its best node outright (10) and halves the
  // other scores (DecisionCore::Prioritize).
  const std::string big = CpuOnlyArgs("web-big", "126");
  httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/filter"), big);
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  EXPECT_EQ(CheckFilterAnswer(big, r->body), (std::set<std::string>{"cpu-node", "gpu-node-a"}));
  const std::map<std::string, int64_t> scores = Prioritized(*f, big);
  EXPECT_EQ(scores.at("cpu-node"), 10) << "no idle GPU to strand: the best node";
  EXPECT_LT(scores.at("gpu-node-a"), 5 / 2) << "below the no-change score 5, halved";
  // One cpu strands nothing: 5 on both, and the tie goes to the lower name.
  EXPECT_EQ(Prioritized(*f, CpuOnlyArgs("web-small", "1")),
            (std::map<std::string, int64_t>{{"cpu-node", 10}, {"gpu-node-a", 5 / 2}}));

  // Bind binds it as the default binder would: no unit, no annotation.
  const std::string state_before = DebugState(*client);
  r = PostJson(*client, absl::StrCat(kPrefix, "/bind"),
               R"({"PodName":"web-big","PodNamespace":"ml-team","PodUID":"uid-web-big",)"
               R"("Node":"cpu-node"})");
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  EXPECT_STREQ(Parse(r->body)["Error"].GetString(), "");
  const auto bound = binder.bound();
  ASSERT_EQ(bound.size(), 1u);
  EXPECT_EQ(bound.at("uid-web-big").first, "cpu-node");
  EXPECT_TRUE(bound.at("uid-web-big").second.empty()) << "a CPU-only pod gets no unit annotation";
  EXPECT_EQ(DebugState(*client), state_before) << "nothing reserved";
}

// With the switch, a GPU pod's scores keep fgd's order, the best node is named outright (10)
// and every other score is halved, so kube-scheduler's in-tree scores cannot overturn it.
TEST(HttpServerScoreAllPodsTest, GpuPodsKeepFgdsChoiceNamedOutrightWithTheSwitch) {
  const std::string gpu = Captured("prioritize-request-nodecache-true.json");
  const std::map<std::string, int64_t> plain = Prioritized(*FgdCluster(false), gpu);
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_GT(plain.at("gpu-node-a"), plain.at("gpu-node-b"));
  const std::map<std::string, int64_t> named = Prioritized(*FgdCluster(true), gpu);
  EXPECT_EQ(named, (std::map<std::string, int64_t>{{"gpu-node-a", 10},
                                                   {"gpu-node-b", plain.at("gpu-node-b") / 2}}));
}

TEST(HttpServerCapturedTest, PreemptAsKubeSchedulerSentIt) {
  // gpu-node-a full: its 7 slices held by ml-team pods, among them the captured victims
  // cuda-infer-1 (nodecache-false body) and cuda-infer-2 (nodecache-true body).
  std::vector<std::string> pods = {
      BoundPod("cuda-infer-1", "2bdaced9-c4e8-4759-b87f-8e46c6a174cb", 0),
      BoundPod("cuda-infer-2", "a3774ec5-4cb5-4fa6-9af4-9cc72b5e2aad", 1)};
  for (int i = 2; i < 7; ++i) {
    pods.push_back(BoundPod(absl::StrCat("filler-", i), absl::StrCat("uid-filler-", i), i));
  }
  auto f = CapturedCluster(pods);
  auto client = f->NewClient();
  const std::string state_before = DebugState(*client);

  for (const char* mode : {"nodecache-true", "nodecache-false"}) {
    SCOPED_TRACE(mode);
    const std::string body = Captured(absl::StrCat("preempt-request-", mode, ".json"));
    rapidjson::Document args = Parse(body);
    std::set<std::string> input_uids;
    const char* key =
        args["NodeNameToMetaVictims"].IsObject() ? "NodeNameToMetaVictims" : "NodeNameToVictims";
    for (const auto& pod : args[key]["gpu-node-a"]["Pods"].GetArray()) {
      input_uids.insert(pod.HasMember("UID") ? pod["UID"].GetString()
                                             : pod["metadata"]["uid"].GetString());
    }

    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/preempt"), body);
    ExpectJsonAnswer(r, 200);
    ASSERT_TRUE(r);
    rapidjson::Document res = Parse(r->body);
    // Always NodeNameToMetaVictims; every node listed with at least one input victim.
    ASSERT_TRUE(res.IsObject() && res.HasMember("NodeNameToMetaVictims")) << r->body;
    ASSERT_TRUE(res["NodeNameToMetaVictims"].IsObject()) << r->body;
    for (const auto& node : res["NodeNameToMetaVictims"].GetObject()) {
      EXPECT_STREQ(node.name.GetString(), "gpu-node-a") << "only input nodes";
      ASSERT_TRUE(node.value["Pods"].IsArray());
      EXPECT_GE(node.value["Pods"].Size(), 1u);
      for (const auto& v : node.value["Pods"].GetArray()) {
        EXPECT_EQ(input_uids.count(v["UID"].GetString()), 1u) << v["UID"].GetString();
      }
      EXPECT_TRUE(node.value["NumPDBViolations"].IsInt64());
    }
    // Evicting the victim frees a slice on gpu-node-a, where the preemptor then fits.
    EXPECT_TRUE(res["NodeNameToMetaVictims"].HasMember("gpu-node-a")) << r->body;
  }
  // Preempt proposes; it evicts nothing itself.
  EXPECT_EQ(DebugState(*client), state_before);
}

// ----------------------------------------------------------------------- error paths

// The metric line count of gse_http_requests_total for one verb and code.
double RequestCount(httplib::Client& client, const std::string& verb, int code) {
  httplib::Result r = client.Get("/metrics");
  if (!r) return -1;
  double total = 0;
  for (absl::string_view line : absl::StrSplit(r->body, '\n')) {
    if (!absl::StartsWith(line, "gse_http_requests_total{")) continue;
    if (!absl::StrContains(line, absl::StrCat("verb=\"", verb, "\"")) ||
        !absl::StrContains(line, absl::StrCat("code=\"", code, "\""))) {
      continue;
    }
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) total += v;
  }
  return total;
}

class HttpServerErrorTest : public ::testing::Test {
 protected:
  static constexpr size_t kMaxBody = 8192;

  void SetUp() override {
    HttpServerOptions http;
    http.max_body_bytes = kMaxBody;
    f_ = CapturedCluster({}, http);
    client_ = f_->NewClient();
    before_ = DebugState(*client_);
  }
  void TearDown() override {
    // Whatever the error, the mirror is as it was and the server still serves.
    EXPECT_EQ(DebugState(*client_), before_);
    httplib::Result r = f_->NewClient()->Get("/healthz");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  std::string Path(const char* verb) const { return absl::StrCat(kPrefix, "/", verb); }
  std::string ErrorOf(const httplib::Result& r) {
    rapidjson::Document doc = Parse(r->body);
    if (!doc.IsObject() || !doc.HasMember("Error") || !doc["Error"].IsString()) return "";
    return doc["Error"].GetString();
  }

  std::unique_ptr<HttpFixture> f_;
  std::unique_ptr<httplib::Client> client_;
  std::string before_;
};

TEST_F(HttpServerErrorTest, BodyOverLimitWithContentLengthIs413) {
  const std::string body = Captured("filter-request-nodecache-false.json");  // 19,453 bytes
  ASSERT_GT(body.size(), kMaxBody);
  httplib::Result r = PostJson(*client_, Path("filter"), body);
  ExpectJsonAnswer(r, 413);
  ASSERT_TRUE(r);
  EXPECT_THAT(ErrorOf(r), HasSubstr("max-body-bytes"));
  EXPECT_GE(RequestCount(*client_, "filter", 413), 1);
}

TEST_F(HttpServerErrorTest, LimitIsExactOnTheDecodedBody) {
  // JSON allows trailing whitespace: the same request padded to the limit passes, one byte
  // more does not.
  std::string body = Captured("filter-request-nodecache-true.json");
  ASSERT_LT(body.size(), kMaxBody);
  body.resize(kMaxBody, ' ');
  httplib::Result r = PostJson(*client_, Path("filter"), body);
  ExpectJsonAnswer(r, 200);
  body.push_back(' ');
  r = PostJson(*client_, Path("filter"), body);
  ExpectJsonAnswer(r, 413);
}

TEST_F(HttpServerErrorTest, ChunkedBodyOverLimitIs413) {
  // cpp-httplib's own limit ignores chunked bodies; ours does not.
  const std::string body = Captured("filter-request-nodecache-false.json");
  httplib::Result r = client_->Post(
      Path("filter").c_str(), testing::SchedulerHeaders(),
      [&](size_t offset, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(1000, body.size() - offset);
        sink.write(body.data() + offset, n);
        if (offset + n == body.size()) sink.done();
        return true;
      },
      "application/json");
  ExpectJsonAnswer(r, 413);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Connection"), "close");

  // A chunked body within the limit is read whole and answered.
  const std::string small = Captured("filter-request-nodecache-true.json");
  r = client_->Post(
      Path("filter").c_str(), testing::SchedulerHeaders(),
      [&](size_t offset, httplib::DataSink& sink) {
        const size_t n = std::min<size_t>(500, small.size() - offset);
        sink.write(small.data() + offset, n);
        if (offset + n == small.size()) sink.done();
        return true;
      },
      "application/json");
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  CheckFilterAnswer(small, r->body);
}

TEST_F(HttpServerErrorTest, CompressedBodyIsLimitedByItsDecodedSize) {
  // 20 KB of JSON whitespace compresses to a few hundred bytes: a zip bomb in miniature.
  std::string body = Captured("filter-request-nodecache-true.json");
  body.append(20000, ' ');
  client_->set_compress(true);
  httplib::Result r = PostJson(*client_, Path("filter"), body);
  client_->set_compress(false);
  ExpectJsonAnswer(r, 413);
}

TEST_F(HttpServerErrorTest, ExpectContinueWithLargeLengthIs413BeforeTheBody) {
  const std::string response = RawExchange(
      f_->port(),
      absl::StrCat(
          "POST ", Path("filter"),
          " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
          "\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"),
      absl::Seconds(3));
  EXPECT_EQ(RawStatus(response), 413) << response;
}

TEST_F(HttpServerErrorTest, MalformedAndMistypedBodiesAre400) {
  for (const std::string& body : {std::string("not json"), std::string(R"({"Pod": 5})"),
                                  std::string(""), std::string(R"([1,2])")}) {
    SCOPED_TRACE(body);
    for (const char* verb : {"filter", "prioritize", "bind", "preempt"}) {
      SCOPED_TRACE(verb);
      httplib::Result r = PostJson(*client_, Path(verb), body);
      ExpectJsonAnswer(r, 400);
      ASSERT_TRUE(r);
      EXPECT_FALSE(ErrorOf(r).empty()) << r->body;
    }
  }
  EXPECT_GE(RequestCount(*client_, "bind", 400), 4);
  // A malformed HTTP request gets a JSON 400 as well.
  const std::string response = RawExchange(f_->port(), "GARBAGE\r\n\r\n", absl::Seconds(1));
  EXPECT_EQ(RawStatus(response), 400) << response;
  EXPECT_THAT(response, HasSubstr("\"Error\""));
}

TEST_F(HttpServerErrorTest, WrongMethodIs405WithAllow) {
  httplib::Result r = client_->Get(Path("filter").c_str());
  ExpectJsonAnswer(r, 405);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Allow"), "POST");
  EXPECT_THAT(ErrorOf(r), HasSubstr("POST"));

  r = client_->Post("/healthz", "{}", "application/json");
  ExpectJsonAnswer(r, 405);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD");
  // The body of a refused request is never read: the connection is not reused.
  EXPECT_EQ(r->get_header_value("Connection"), "close");

  r = client_->Delete("/metrics");
  ExpectJsonAnswer(r, 405);
  r = client_->Put(Path("bind").c_str(), Captured("bind-request.json"), "application/json");
  ExpectJsonAnswer(r, 405);
  EXPECT_GE(RequestCount(*client_, "bind", 405), 1);
}

TEST_F(HttpServerErrorTest, UnknownPathIs404) {
  for (const std::string& path :
       {std::string("/nope"), std::string("/filter"), Path("filter") + "/",
        std::string("/gpu-extender"), std::string("/metrics/x")}) {
    SCOPED_TRACE(path);
    httplib::Result r = client_->Get(path.c_str());
    ExpectJsonAnswer(r, 404);
    ASSERT_TRUE(r);
    EXPECT_THAT(ErrorOf(r), HasSubstr("no route"));
  }
  // Whatever bytes the path decodes to, the error body stays valid UTF-8 JSON.
  const std::string raw = RawExchange(
      f_->port(), "GET /%FF%FEx%01 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(RawStatus(raw), 404) << raw;
  rapidjson::Document doc;
  const std::string raw_body = raw.substr(raw.find("\r\n\r\n") + 4);
  doc.Parse<rapidjson::kParseValidateEncodingFlag>(raw_body.c_str());
  EXPECT_FALSE(doc.HasParseError()) << raw_body;
  EXPECT_THAT(raw_body, HasSubstr("/??x?"));
  // Without the prefix the verbs do not exist.
  httplib::Result r = PostJson(*client_, "/filter", Captured("filter-request-nodecache-true.json"));
  ExpectJsonAnswer(r, 404);
  EXPECT_GE(RequestCount(*client_, "other", 404), 6);
}

TEST_F(HttpServerErrorTest, PostWithoutLengthIs411WithoutWaitingForTheBody) {
  const auto start = std::chrono::steady_clock::now();
  const std::string response = RawExchange(
      f_->port(),
      absl::StrCat("POST ", Path("filter"), " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
      absl::Seconds(5));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(RawStatus(response), 411) << response;
  EXPECT_THAT(response, HasSubstr("Content-Length"));
  EXPECT_LT(seconds, 2.0) << "answered at once, not after the read timeout";
}

TEST(HttpServerExceptionTest, HandlerExceptionIs500AndServerKeepsServing) {
  HttpFixtureOptions options;
  options.snapshot_json = ClusterWithCapturedNodes();
  options.http.prefix = kPrefix;
  std::atomic<int> calls{0};
  options.verb_overrides["filter"] = [&](std::string) -> VerbResult {
    ++calls;
    throw std::runtime_error("injected failure");
  };
  options.verb_overrides["preempt"] = [&](std::string) -> VerbResult { throw 42; };
  auto f = StartOrDie(std::move(options));
  auto client = f->NewClient();
  const std::string before = DebugState(*client);

  httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/filter"),
                               Captured("filter-request-nodecache-true.json"));
  ExpectJsonAnswer(r, 500);
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("injected failure"));
  EXPECT_EQ(calls.load(), 1);
  r = PostJson(*client, absl::StrCat(kPrefix, "/preempt"),
               Captured("preempt-request-nodecache-true.json"));
  ExpectJsonAnswer(r, 500);
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("unknown exception"));

  // Still serving: the verbs that do not throw answer normally, many times over.
  for (int i = 0; i < 20; ++i) {
    r = PostJson(*client, absl::StrCat(kPrefix, "/prioritize"),
                 Captured("prioritize-request-nodecache-true.json"));
    ExpectJsonAnswer(r, 200);
    r = PostJson(*client, absl::StrCat(kPrefix, "/filter"),
                 Captured("filter-request-nodecache-true.json"));
    ExpectJsonAnswer(r, 500);
  }
  EXPECT_EQ(DebugState(*client), before);
  EXPECT_GE(RequestCount(*client, "filter", 500), 21);
  EXPECT_TRUE(f->WaitUntilIdle());
}

// ----------------------------------------------------------------------- endpoints

TEST(HttpServerEndpointTest, HealthReadinessMetricsAndState) {
  auto f = CapturedCluster();
  auto client = f->NewClient();

  httplib::Result r = client->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok");
  EXPECT_THAT(r->get_header_value("Content-Type"), StartsWith("text/plain"));
  r = client->Head("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "");

  r = client->Get("/readyz");
  ExpectJsonAnswer(r, 200);
  f->service().SetReady(false);
  r = client->Get("/readyz");
  ExpectJsonAnswer(r, 503);
  // Not ready: the verbs answer a protocol Error, health stays 200 (the process is fine).
  r = PostJson(*client, absl::StrCat(kPrefix, "/filter"),
               Captured("filter-request-nodecache-true.json"));
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  EXPECT_THAT(Parse(r->body)["Error"].GetString(), HasSubstr("not synced"));
  r = client->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  f->service().SetReady(true);
  ExpectJsonAnswer(client->Get("/readyz"), 200);

  r = client->Get("/debug/state");
  ExpectJsonAnswer(r, 200);
  ASSERT_TRUE(r);
  rapidjson::Document state = Parse(r->body);
  ASSERT_TRUE(state.IsObject() && state.HasMember("units") && state["units"].IsArray());
  EXPECT_EQ(state["nodes"].GetInt(), 2);

  const double healthz_before = RequestCount(*client, "healthz", 200);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client->Get("/healthz"));
  r = client->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), StartsWith("text/plain; version=0.0.4"));
  EXPECT_EQ(RequestCount(*client, "healthz", 200), healthz_before + 3);
  EXPECT_GE(RequestCount(*client, "readyz", 503), 1);
  EXPECT_THAT(r->body, HasSubstr("gse_http_request_duration_seconds"));
}

TEST(HttpServerEndpointTest, KeepAliveConnectionAnswersQuickly) {
  // Without TCP_NODELAY every answer waits ~40 ms for a delayed ACK (BUILD-NOTES).
  auto f = CapturedCluster();
  auto client = f->NewClient();
  const std::string body = Captured("filter-request-nodecache-true.json");
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    const auto start = std::chrono::steady_clock::now();
    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/filter"), body);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 25.0) << "median round trip in ms";
}

// ----------------------------------------------------------------------- binds and the rest

// issue 14: binds that hold every bind place (waiting on the API server, here a handler that
// blocks until released) never delay filter, prioritize or preempt, which kube-scheduler
// sends on new connections while its pooled ones are busy with binds; a bind beyond the
// places is answered at once. Asserted on order of events, with generous timeouts.
TEST(HttpServerExecutionTest, BindsHoldingEveryPlaceDoNotDelayTheSynchronousVerbs) {
  std::atomic<int> entered{0};
  std::atomic<bool> release{false};
  HttpFixtureOptions options;
  options.snapshot_json = ClusterWithCapturedNodes();
  options.http.prefix = kPrefix;
  options.http.threads = 2;  // fewer ready workers than binds: the pool must grow
  options.http.max_concurrent_binds = 4;
  options.verb_overrides["bind"] = [&](std::string) {
    ++entered;
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return VerbResult{200, R"({"Error":""})", "ok"};
  };
  auto f = StartOrDie(std::move(options));
  struct Release {
    std::atomic<bool>* flag;
    ~Release() { flag->store(true); }
  } release_at_exit{&release};

  const std::string bind = Captured("bind-request.json");
  std::atomic<int> binds_answered{0};
  std::vector<std::thread> binders;
  for (int i = 0; i < 4; ++i) {
    binders.emplace_back([&] {
      auto client = f->NewClient();  // each of kube-scheduler's binding goroutines
      httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/bind"), bind);
      EXPECT_TRUE(r && r->status == 200);
      ++binds_answered;
    });
  }
  ASSERT_TRUE(::gse::testing::Eventually(
      [&] { return entered.load() == 4 && f->server().BindsInFlight() == 4; }, absl::Seconds(30)));
  EXPECT_THAT(f->metrics().Serialize(), HasSubstr("gse_http_requests_in_flight{verb=\"bind\"} 4"));

  // Every bind place is held: filter, prioritize and preempt, each on a new connection, are
  // answered while the binds still wait.
  const std::string filter = Captured("filter-request-nodecache-true.json");
  const std::string prioritize = Captured("prioritize-request-nodecache-true.json");
  const std::string preempt = Captured("preempt-request-nodecache-true.json");
  for (int round = 0; round < 3; ++round) {
    auto client = f->NewClient();
    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/filter"), filter);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(CheckFilterAnswer(filter, r->body), std::set<std::string>{"gpu-node-a"});
    r = PostJson(*client, absl::StrCat(kPrefix, "/prioritize"), prioritize);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_TRUE(Parse(r->body).IsArray());
    r = PostJson(*client, absl::StrCat(kPrefix, "/preempt"), preempt);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_THAT(r->body, HasSubstr("NodeNameToMetaVictims"));
    EXPECT_EQ(binds_answered.load(), 0) << "the verbs were answered only after a bind";
  }
  // A fifth bind finds no place: answered at once, not attempted, the handler never entered.
  {
    auto client = f->NewClient();
    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/bind"), bind);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_THAT(r->body, HasSubstr("bind not attempted"));
    EXPECT_THAT(r->body, HasSubstr("--max-concurrent-binds"));
    EXPECT_EQ(entered.load(), 4);
    EXPECT_EQ(binds_answered.load(), 0);
  }
  EXPECT_THAT(f->metrics().Serialize(),
              HasSubstr("gse_bind_total{offering=\"none\",outcome=\"overloaded\"} 1"));
  const HttpServer::WorkerStats workers = f->server().Workers();
  EXPECT_GT(workers.threads, 4u) << "4 binds and the verbs' connection on 2 ready workers";
  EXPECT_EQ(workers.waited_at_max, 0);

  release.store(true);
  for (std::thread& t : binders) t.join();
  EXPECT_EQ(binds_answered.load(), 4);
  EXPECT_EQ(f->server().BindsInFlight(), 0);
}

// The calling thread's nice value as the kernel reports it (/proc/self/task/<tid>/stat,
// field 19), i.e. what the scheduler weighs the thread by.
int ThisThreadsNice() {
  const long tid = syscall(SYS_gettid);
  std::ifstream in(absl::StrCat("/proc/self/task/", tid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return -100;
  // After ")": field 3 (state) onwards; the nice value is field 19.
  std::vector<std::string> fields = absl::StrSplit(stat.substr(paren + 2), ' ');
  int nice = -100;
  if (fields.size() < 17 || !absl::SimpleAtoi(fields[16], &nice)) return -100;
  return nice;
}

// --bind-nice: bind handlers run at a lower CPU priority than the verbs kube-scheduler waits
// for, and the connection that carried a bind serves the next filter at full priority again.
TEST(HttpServerExecutionTest, BindsRunAtBindNiceAndTheOtherVerbsAtTheProcessPriority) {
  const int base = ThisThreadsNice();  // the test may itself run under `nice`
  ASSERT_NE(base, -100);
  for (const int bind_nice : {10, 3, 0}) {
    SCOPED_TRACE(absl::StrCat("bind_nice=", bind_nice));
    std::atomic<int> bind_seen{-100}, filter_seen{-100}, prioritize_seen{-100};
    std::atomic<bool> bind_yields{false}, filter_yields{true};
    HttpFixtureOptions options;
    options.snapshot_json = ClusterWithCapturedNodes();
    options.http.prefix = kPrefix;
    options.http.threads = 1;  // one ready worker: the same one serves every request below
    options.http.bind_nice = bind_nice;
    options.verb_overrides["bind"] = [&](std::string) {
      bind_seen.store(ThisThreadsNice());
      bind_yields.store(Mirror::ThisThreadYieldsToReaders());
      return VerbResult{200, R"({"Error":""})", "ok"};
    };
    options.verb_overrides["filter"] = [&](std::string) {
      filter_seen.store(ThisThreadsNice());
      filter_yields.store(Mirror::ThisThreadYieldsToReaders());
      return VerbResult{200, R"({"NodeNames":[],"FailedNodes":{},"Error":""})", "ok"};
    };
    options.verb_overrides["prioritize"] = [&](std::string) {
      prioritize_seen.store(ThisThreadsNice());
      return VerbResult{200, "[]", "ok"};
    };
    auto f = StartOrDie(std::move(options));
    EXPECT_EQ(f->server().bind_nice(), bind_nice);
    auto client = f->NewClient();  // one keep-alive connection for everything
    for (int round = 0; round < 3; ++round) {
      httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/bind"), Captured("bind-request.json"));
      ASSERT_TRUE(r && r->status == 200);
      EXPECT_EQ(bind_seen.load(), std::min(19, base + bind_nice));
      r = PostJson(*client, absl::StrCat(kPrefix, "/filter"), Captured("filter-request-nodecache-true.json"));
      ASSERT_TRUE(r && r->status == 200);
      EXPECT_EQ(filter_seen.load(), base) << "a bind lowered its connection worker's priority";
      // A deprioritised bind never queues on the mirror's lock ahead of the verbs' readers.
      EXPECT_EQ(bind_yields.load(), bind_nice > 0);
      EXPECT_FALSE(filter_yields.load());
      r = PostJson(*client, absl::StrCat(kPrefix, "/prioritize"),
                   Captured("prioritize-request-nodecache-true.json"));
      ASSERT_TRUE(r && r->status == 200);
      EXPECT_EQ(prioritize_seen.load(), base);
    }
    EXPECT_EQ(f->server().BindsInFlight(), 0);
  }
}

// A bind handler that throws on its bind worker is answered 500 on the connection, as any verb.
TEST(HttpServerExecutionTest, BindHandlerExceptionOnABindWorkerIs500) {
  HttpFixtureOptions options;
  options.snapshot_json = ClusterWithCapturedNodes();
  options.http.prefix = kPrefix;
  options.http.bind_nice = 10;
  options.verb_overrides["bind"] = [&](std::string) -> VerbResult {
    throw std::runtime_error("injected bind failure");
  };
  auto f = StartOrDie(std::move(options));
  auto client = f->NewClient();
  for (int i = 0; i < 3; ++i) {
    httplib::Result r = PostJson(*client, absl::StrCat(kPrefix, "/bind"), Captured("bind-request.json"));
    ExpectJsonAnswer(r, 500);
    ASSERT_TRUE(r);
    EXPECT_THAT(r->body, HasSubstr("injected bind failure"));
  }
  EXPECT_EQ(f->server().BindsInFlight(), 0);
  EXPECT_TRUE(f->WaitUntilIdle());
}

// ----------------------------------------------------------------------- options, lifecycle

TEST(HttpServerOptionsTest, NormalizePrefix) {
  EXPECT_EQ(*NormalizePrefix(""), "");
  EXPECT_EQ(*NormalizePrefix("/"), "");
  EXPECT_EQ(*NormalizePrefix("///"), "");
  EXPECT_EQ(*NormalizePrefix("gpu-extender"), "/gpu-extender");
  EXPECT_EQ(*NormalizePrefix("/gpu-extender/"), "/gpu-extender");
  EXPECT_EQ(*NormalizePrefix("a/b.c_d~e"), "/a/b.c_d~e");
  for (const char* bad : {"/a b", "/a?x", "/a#x", "/a%20", "/a//b", "/\x01"}) {
    absl::StatusOr<std::string> p = NormalizePrefix(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_THAT(std::string(p.status().message()), HasSubstr("--prefix"));
  }
}

TEST(HttpServerOptionsTest, ParseListenAddress) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.1:8888");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8888);
  EXPECT_FALSE(a->ipv6);
  a = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(a->ipv6);
  a = ParseListenAddress("localhost:65535");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->port, 65535);
  const std::pair<const char*, const char*> bad[] = {{"127.0.0.1", "missing port"},
                                                     {":8888", "missing host"},
                                                     {"127.0.0.1:65536", "out of range"},
                                                     {"127.0.0.1:-1", "not a number"},
                                                     {"127.0.0.1:http", "not a number"},
                                                     {"::1:8888", "brackets"},
                                                     {"[::1]8888", "HOST:PORT"},
                                                     {"[nope]:1", "not an IPv6 address"},
                                                     {"a b:1", "not an IPv4 address or host name"},
                                                     {"127.0.0.1:99999999999", "out of range"}};
  for (const auto& [text, why] : bad) {
    a = ParseListenAddress(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("--listen"));
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(why)) << text;
  }
}

TEST(HttpServerOptionsTest, CreateRejectsBadOptionsNamingTheFlag) {
  auto f = CapturedCluster();
  const std::pair<std::function<void(HttpServerOptions&)>, const char*> cases[] = {
      {[](HttpServerOptions& o) { o.threads = -1; }, "--threads"},
      {[](HttpServerOptions& o) { o.max_concurrent_binds = 0; }, "--max-concurrent-binds"},
      {[](HttpServerOptions& o) { o.max_concurrent_binds = 70000; }, "--max-concurrent-binds"},
      {[](HttpServerOptions& o) { o.bind_nice = -1; }, "--bind-nice"},
      {[](HttpServerOptions& o) { o.bind_nice = 20; }, "--bind-nice"},
      {[](HttpServerOptions& o) { o.port = 70000; }, "--listen"},
      {[](HttpServerOptions& o) { o.prefix = "a b"; }, "--prefix"},
      {[](HttpServerOptions& o) { o.max_body_bytes = 0; }, "--max-body-bytes"},
      {[](HttpServerOptions& o) { o.read_timeout = absl::ZeroDuration(); }, "--read-timeout"},
      {[](HttpServerOptions& o) { o.tls.client_ca_file = "/x"; }, "--client-ca"},
      {[](HttpServerOptions& o) { o.tls.cert_file = "/nonexistent.crt"; }, "--tls-key"},
  };
  for (const auto& [mutate, flag] : cases) {
    HttpServerOptions o;
    o.port = 0;
    mutate(o);
    absl::StatusOr<std::unique_ptr<HttpServer>> s =
        HttpServer::Create(&f->service(), &f->metrics(), o);
    ASSERT_FALSE(s.ok()) << flag;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(flag));
  }
}

TEST(HttpServerLifecycleTest, PortZeroPicksAFreePortThatNoOneElseCanTake) {
  auto f = CapturedCluster();
  ASSERT_GT(f->port(), 0);
  httplib::Result r = f->NewClient()->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // cpp-httplib's default SO_REUSEPORT would let a second server share the port and take
  // half of kube-scheduler's calls; binding it must fail instead.
  HttpServerOptions o;
  o.host = "127.0.0.1";
  o.port = f->port();
  absl::StatusOr<std::unique_ptr<HttpServer>> second =
      HttpServer::Create(&f->service(), &f->metrics(), o);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("--listen"));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr(absl::StrCat("127.0.0.1:", f->port())));
}

TEST(HttpServerLifecycleTest, ServesIpv6Loopback) {
  auto f = CapturedCluster();
  HttpServerOptions o;
  o.host = "::1";
  o.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> s =
      HttpServer::Create(&f->service(), &f->metrics(), o);
  if (!s.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << s.status().message();
  (*s)->Start();
  EXPECT_THAT((*s)->BaseUrl(), StartsWith("http://[::1]:"));
  httplib::Client client("::1", (*s)->port());
  httplib::Result r = client.Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
}

TEST(HttpServerLifecycleTest, StopAnswersTheRequestInFlightAndRefusesNewConnections) {
  auto f = CapturedCluster();
  const std::string body = Captured("filter-request-nodecache-true.json");
  const std::string head = absl::StrCat("POST ", kPrefix,
                                        "/filter HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                        "application/json\r\nContent-Length: ",
                                        body.size(), "\r\n\r\n");

  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(f->port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string first = head + body.substr(0, body.size() / 2);
  ASSERT_EQ(send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  // The request is in flight once its headers are read.
  for (int i = 0; i < 500 && f->server().InFlight() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(f->server().InFlight(), 1);

  f->server().Stop();
  // No new connections once stopped.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  httplib::Client late("127.0.0.1", f->port());
  late.set_connection_timeout(1, 0);
  EXPECT_FALSE(late.Get("/healthz")) << "a stopped server must not accept";

  const std::string rest = body.substr(body.size() / 2);
  ASSERT_EQ(send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  std::string response;
  char buf[4096];
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  EXPECT_EQ(RawStatus(response), 200) << response;
  const size_t at = response.find("\r\n\r\n");
  ASSERT_NE(at, std::string::npos);
  CheckFilterAnswer(body, response.substr(at + 4));
  EXPECT_TRUE(f->server().Wait(absl::Seconds(10)));
  EXPECT_TRUE(f->WaitUntilIdle());
}

}  // namespace
}  // namespace gse
