// ExtenderService: every verb driven with the bodies a real kube-scheduler 1.26 sent
// (shared/protocol/captured-k8s-1.26) and the protocol examples, over a mirror holding the two
// example nodes (gpu-node-a: 7 exclusive mig-1g.5gb slices; gpu-node-b: mig-1g.5gb
// time-sliced by the device plugin, which the built-in catalog defines as exclusive, so node b
// is unusable for it). Answers are parsed with RapidJSON and checked key by key.
#include "extender/extender_service.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "extender/pending_pods.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "scoring/feasibility.h"
#include "scoring/policies.h"
#include "scoring/pod_request.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;

constexpr char kMig[] = "nvidia.com/mig-1g.5gb";
constexpr char kMigShared[] = "nvidia.com/mig-1g.5gb.shared";
constexpr char kMig3g[] = "nvidia.com/mig-3g.20gb";
constexpr char kNotSynced[] = "extender cache not synced yet";

std::string Protocol(const std::string& rel) {
  return ReadFileOrDie(SharedPath("protocol/" + rel));
}

rapidjson::Document Json(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << text;
  return doc;
}

std::string ToJson(const rapidjson::Value& v) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  v.Accept(w);
  return std::string(buf.GetString(), buf.GetSize());
}

std::set<std::string> Keys(const rapidjson::Value& obj) {
  std::set<std::string> keys;
  for (auto m = obj.MemberBegin(); m != obj.MemberEnd(); ++m) keys.insert(m->name.GetString());
  return keys;
}

std::map<std::string, std::string> StringMapOf(const rapidjson::Value& obj) {
  std::map<std::string, std::string> out;
  EXPECT_TRUE(obj.IsObject());
  if (!obj.IsObject()) return out;
  for (auto m = obj.MemberBegin(); m != obj.MemberEnd(); ++m) {
    out[m->name.GetString()] = m->value.GetString();
  }
  return out;
}

// A minimal pending Pod as kube-scheduler embeds it (no kind/apiVersion).
std::string PodJson(const std::string& name, const std::string& uid,
                    const std::map<std::string, std::string>& requests,
                    const std::string& ns = "ml-team") {
  std::string res;
  for (const auto& [k, v] : requests) {
    absl::StrAppend(&res, res.empty() ? "" : ",", "\"", k, "\":\"", v, "\"");
  }
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns,
                      R"(","uid":")", uid,
                      R"("},"spec":{"containers":[{"name":"c","resources":{"requests":{)", res,
                      "},\"limits\":{", res,
                      R"(}}}],"schedulerName":"default-scheduler"},"status":{"phase":"Pending"}})");
}

std::string NamesBody(const std::string& pod, const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) absl::StrAppend(&list, list.empty() ? "" : ",", "\"", n, "\"");
  return absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":[)", list, "]}");
}

std::string BindBody(const std::string& name, const std::string& uid, const std::string& node,
                     const std::string& ns = "ml-team") {
  return absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":")", ns, R"(","PodUID":")",
                      uid, R"(","Node":")", node, R"("})");
}

std::vector<NodeObject> NodesOf(const std::string& node_list_json) {
  rapidjson::Document doc;
  EXPECT_TRUE(ParseJsonLimited(node_list_json, doc).ok());
  std::vector<NodeObject> nodes;
  const rapidjson::Value& items = doc["items"];
  for (rapidjson::SizeType i = 0; i < items.Size(); ++i) {
    absl::StatusOr<NodeObject> node = DecodeNode(items[i], "items[i]");
    EXPECT_TRUE(node.ok()) << node.status();
    if (node.ok()) nodes.push_back(*node);
  }
  return nodes;
}

// A node built in code: `offerings` maps an advertised resource to (physical count, replicas).
NodeObject MakeNode(const std::string& name,
                    const std::map<std::string, std::pair<int, int>>& offerings) {
  NodeObject node;
  node.name = name;
  node.labels["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-40GB";
  for (const auto& [resource, count_replicas] : offerings) {
    absl::string_view base = resource;
    absl::ConsumeSuffix(&base, ".shared");
    const auto [count, replicas] = count_replicas;
    node.labels[absl::StrCat(base, ".count")] = absl::StrCat(count);
    node.labels[absl::StrCat(base, ".replicas")] = absl::StrCat(replicas);
    node.allocatable_milli[resource] = int64_t{1000} * count * replicas;
  }
  return node;
}

class FakeBinder : public Binder {
 public:
  struct Call {
    BindTarget target;
    std::map<std::string, std::string> annotations;
  };
  BindResult Bind(const BindTarget& target,
                  const std::map<std::string, std::string>& annotations) override {
    std::function<void(const Call&)> during;
    BindResult result;
    {
      absl::MutexLock lock(&mu_);
      const size_t index = calls_.size();
      calls_.push_back(Call{target, annotations});
      // While held, wait (an API call in flight). A CondVar, not Mutex::Await: absl evaluates
      // an Await condition inside its own (uninstrumented) code, where ThreadSanitizer cannot
      // see that mu_ is held.
      while (held_ || (hold_each_ && answers_.count(index) == 0)) released_.Wait(&mu_);
      during = during_;
      auto answer = answers_.find(index);
      result = answer != answers_.end() ? answer->second : result_;
    }
    if (during) during(Call{target, annotations});  // what happens while the POST is out
    return result;
  }
  // OK: bound; an error: definitely not bound.
  void SetResult(absl::Status s) {
    SetResult(s.ok() ? BindResult::Bound() : BindResult::NotBound(std::move(s)));
  }
  void SetResult(BindResult r) {
    absl::MutexLock lock(&mu_);
    result_ = std::move(r);
  }
  void SetDuring(std::function<void(const Call&)> during) {
    absl::MutexLock lock(&mu_);
    during_ = std::move(during);
  }
  // While held, Bind records its call and then waits (an API call in flight).
  void Hold(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
    released_.SignalAll();
  }
  // While holding each, every Bind records its call and waits until Answer() gives that call
  // (its index in calls()) a result of its own: concurrent binds answered in a chosen order.
  void HoldEach(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_each_ = hold;
    released_.SignalAll();
  }
  void Answer(size_t call, BindResult r) {
    absl::MutexLock lock(&mu_);
    answers_.insert_or_assign(call, std::move(r));
    released_.SignalAll();
  }
  std::vector<Call> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  // Blocks until `n` calls were made (false after 10 s).
  bool WaitForCalls(size_t n) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (calls().size() < n) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return true;
  }

 private:
  absl::Mutex mu_;
  BindResult result_ ABSL_GUARDED_BY(mu_) = BindResult::Bound();
  std::function<void(const Call&)> during_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool hold_each_ ABSL_GUARDED_BY(mu_) = false;
  std::map<size_t, BindResult> answers_ ABSL_GUARDED_BY(mu_);  // by call index
  absl::CondVar released_;
};

// What a filter answer says, after checking its shape (every key present, right types).
struct FilterAnswer {
  int status = 0;
  bool nodes_null = true;
  bool names_null = true;
  std::vector<std::string> passed;  // from whichever of Nodes / NodeNames is set
  std::vector<std::string> passed_items_json;  // Nodes mode: the returned objects
  std::map<std::string, std::string> failed;
  std::map<std::string, std::string> unresolvable;
  std::string error;
};

FilterAnswer ReadFilterAnswer(const VerbResult& r) {
  FilterAnswer a;
  a.status = r.status;
  rapidjson::Document doc = Json(r.body);
  EXPECT_TRUE(doc.IsObject());
  if (!doc.IsObject()) return a;
  EXPECT_EQ(Keys(doc), (std::set<std::string>{"Nodes", "NodeNames", "FailedNodes",
                                              "FailedAndUnresolvableNodes", "Error"}));
  a.error = doc["Error"].GetString();
  a.nodes_null = doc["Nodes"].IsNull();
  a.names_null = doc["NodeNames"].IsNull();
  if (!a.nodes_null) {
    const rapidjson::Value& nodes = doc["Nodes"];
    EXPECT_EQ(Keys(nodes), (std::set<std::string>{"metadata", "items"}));
    EXPECT_TRUE(nodes["metadata"].IsObject() && nodes["metadata"].ObjectEmpty());
    for (const auto& item : nodes["items"].GetArray()) {
      a.passed.push_back(item["metadata"]["name"].GetString());
      a.passed_items_json.push_back(ToJson(item));
    }
  }
  if (!a.names_null) {
    for (const auto& n : doc["NodeNames"].GetArray()) a.passed.push_back(n.GetString());
  }
  if (!doc["FailedNodes"].IsNull()) a.failed = StringMapOf(doc["FailedNodes"]);
  if (!doc["FailedAndUnresolvableNodes"].IsNull()) {
    a.unresolvable = StringMapOf(doc["FailedAndUnresolvableNodes"]);
  }
  if (a.error.empty()) {
    // A decided answer has both maps as objects (possibly {}), never null.
    EXPECT_TRUE(doc["FailedNodes"].IsObject());
    EXPECT_TRUE(doc["FailedAndUnresolvableNodes"].IsObject());
  }
  return a;
}

std::string Message(FitReason reason) {
  return NodeFit{reason}.Message(PodRequest{});
}

class ExtenderServiceTest : public ::testing::Test {
 protected:
  ExtenderServiceTest()
      : mirror_(std::make_shared<Catalog>(Catalog::BuiltIn()), MirrorOptions{}) {
    absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy("affinity-pack");
    EXPECT_TRUE(policy.ok()) << policy.status();
    ServiceOptions options;
    options.metrics = &metrics_;
    options.max_pending_pods = 1000;
    service_ = std::make_unique<ExtenderService>(&mirror_, *std::move(policy), &binder_, options);
  }

  void LoadExampleNodes() {
    for (const NodeObject& node : NodesOf(Protocol("nodelist-2-gpu-nodes.json"))) {
      mirror_.Write([&](ClusterState& s) { return s.ApplyNode(node); });
    }
  }
  void AddNode(const NodeObject& node) {
    mirror_.Write([&](ClusterState& s) { return s.ApplyNode(node); });
  }

  // Filter (NodeNames mode) then bind onto `node`; returns bind's Error.
  std::string Place(const std::string& name, const std::string& uid,
                    const std::map<std::string, std::string>& requests, const std::string& node,
                    const std::string& ns = "ml-team") {
    VerbResult f = service_->Filter(NamesBody(PodJson(name, uid, requests, ns), {node}));
    EXPECT_EQ(f.status, 200) << f.body;
    VerbResult b = service_->Bind(BindBody(name, uid, node, ns));
    EXPECT_EQ(b.status, 200) << b.body;
    rapidjson::Document doc = Json(b.body);
    EXPECT_EQ(Keys(doc), std::set<std::string>{"Error"});
    return doc["Error"].GetString();
  }

  int64_t Usage(const std::string& project, const std::string& resource) {
    return mirror_.Read([&](const ClusterState& s) {
      const ProjectId p = s.FindProject(project);
      return p == kNoProject ? int64_t{0} : s.Usage(p, s.catalog().Find(resource)->id);
    });
  }
  AuditReport Audit() {
    return mirror_.Read([](const ClusterState& s) { return s.Audit(); });
  }
  const PodRecord* FindPodCopy(const std::string& key, PodRecord* out) {
    return mirror_.Read([&](const ClusterState& s) -> const PodRecord* {
      const PodRecord* rec = s.FindPod(key);
      if (rec != nullptr) *out = *rec;
      return rec;
    });
  }
  size_t NodeCount() {
    return mirror_.Read([](const ClusterState& s) { return s.nodes().size(); });
  }

  ExtenderMetrics metrics_;
  Mirror mirror_;
  FakeBinder binder_;
  std::unique_ptr<ExtenderService> service_;
};

// ------------------------------------------------------------------------------- filter

TEST_F(ExtenderServiceTest, FilterCapturedNodesModeRefreshesMirrorAndEchoesNodeObjects) {
  // The mirror starts empty: Nodes mode must learn the nodes from the request itself.
  ASSERT_EQ(NodeCount(), 0u);
  const std::string body = Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-false.json");
  VerbResult r = service_->Filter(body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.outcome, "ok");
  FilterAnswer a = ReadFilterAnswer(r);
  EXPECT_EQ(a.error, "");
  EXPECT_FALSE(a.nodes_null);
  EXPECT_TRUE(a.names_null);
  EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_TRUE(a.failed.empty());
  EXPECT_EQ(a.unresolvable,
            (std::map<std::string, std::string>{
                {"gpu-node-b", Message(FitReason::kOfferingUnusable)}}));
  EXPECT_EQ(NodeCount(), 2u);

  // The passing Node object comes back exactly as it was sent.
  rapidjson::Document in = Json(body);
  std::string node_a_in;
  for (const auto& item : in["Nodes"]["items"].GetArray()) {
    if (std::string(item["metadata"]["name"].GetString()) == "gpu-node-a") node_a_in = ToJson(item);
  }
  ASSERT_EQ(a.passed_items_json.size(), 1u);
  EXPECT_EQ(a.passed_items_json[0], node_a_in);
}

// kube-scheduler gets its own Node objects back byte for byte, whatever their formatting,
// escapes or position in the list (the service echoes the request's text, not a re-encoding).
TEST_F(ExtenderServiceTest, NodesModeEchoesTheRequestTextOfPassingNodes) {
  const rapidjson::Document in = Json(Protocol("filter-request.json"));
  std::map<std::string, std::string> text;  // node name -> its item, pretty-printed
  for (const auto& item : in["Nodes"]["items"].GetArray()) {
    rapidjson::Document copy;
    copy.CopyFrom(item, copy.GetAllocator());
    // A label value full of escapes and non-ASCII text.
    copy["metadata"]["labels"].AddMember("example.com/note",
                                         rapidjson::Value("say \"hi\" \\ tab\t caf\xc3\xa9 }{][",
                                                          copy.GetAllocator()),
                                         copy.GetAllocator());
    rapidjson::StringBuffer buf;
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
    copy.Accept(w);
    text[item["metadata"]["name"].GetString()] = buf.GetString();
  }
  ASSERT_EQ(text.size(), 2u);
  const std::string pod = ToJson(in["Pod"]);
  // gpu-node-a passes, gpu-node-b does not: first and last position both.
  for (const auto& order : {std::vector<std::string>{"gpu-node-a", "gpu-node-b"},
                            std::vector<std::string>{"gpu-node-b", "gpu-node-a"}}) {
    std::string body = absl::StrCat("{ \"Pod\" : ", pod, ",\n  \"Nodes\"\t: { \"metadata\" : {},",
                                    " \"items\" :\n [ ", text[order[0]], " ,\n\t",
                                    text[order[1]], "\n ] } , \"NodeNames\" : null }\n");
    VerbResult r = service_->Filter(body);
    ASSERT_EQ(r.status, 200) << r.body;
    const FilterAnswer a = ReadFilterAnswer(r);
    EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"}) << order[0];
    EXPECT_NE(r.body.find(text["gpu-node-a"]), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find(text["gpu-node-b"]), std::string::npos) << r.body;
    ASSERT_EQ(a.passed_items_json.size(), 1u);
    EXPECT_EQ(a.passed_items_json[0], ToJson(Json(text["gpu-node-a"])));
  }
}

TEST_F(ExtenderServiceTest, NodesModeReappliesChangedOrLostNodes) {
  const std::string body = Protocol("filter-request.json");
  ASSERT_EQ(ReadFilterAnswer(service_->Filter(body)).passed, std::vector<std::string>{"gpu-node-a"});
  // The same Node objects again, but the mirror lost node a meanwhile (a relist, a
  // deletion): an unchanged resourceVersion must not hide that.
  mirror_.Write([](ClusterState& s) {
    s.RemoveNode("gpu-node-a");
    return true;
  });
  ASSERT_EQ(NodeCount(), 1u);
  EXPECT_EQ(ReadFilterAnswer(service_->Filter(body)).passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_EQ(NodeCount(), 2u);

  // A new resourceVersion with no mig-1g.5gb left (MIG reconfigured) is applied.
  rapidjson::Document doc = Json(body);
  for (auto& item : doc["Nodes"]["items"].GetArray()) {
    if (std::string(item["metadata"]["name"].GetString()) != "gpu-node-a") continue;
    item["metadata"]["resourceVersion"].SetString("999999", doc.GetAllocator());
    item["status"]["allocatable"].RemoveMember(kMig);
    item["metadata"]["labels"].RemoveMember("nvidia.com/mig-1g.5gb.count");
  }
  FilterAnswer a = ReadFilterAnswer(service_->Filter(ToJson(doc)));
  EXPECT_TRUE(a.passed.empty());
  EXPECT_EQ(a.unresolvable.count("gpu-node-a"), 1u);
}

TEST_F(ExtenderServiceTest, FilterCapturedNodeNamesMode) {
  LoadExampleNodes();
  VerbResult r =
      service_->Filter(Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-true.json"));
  ASSERT_EQ(r.status, 200) << r.body;
  FilterAnswer a = ReadFilterAnswer(r);
  EXPECT_TRUE(a.nodes_null);
  EXPECT_FALSE(a.names_null);
  EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_TRUE(a.failed.empty());
  EXPECT_EQ(a.unresolvable.count("gpu-node-b"), 1u);
  EXPECT_EQ(a.error, "");
}

TEST_F(ExtenderServiceTest, FilterExampleBodiesBothModes) {
  LoadExampleNodes();
  FilterAnswer nodes = ReadFilterAnswer(service_->Filter(Protocol("filter-request.json")));
  EXPECT_EQ(nodes.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_FALSE(nodes.nodes_null);
  EXPECT_TRUE(nodes.names_null);
  FilterAnswer names = ReadFilterAnswer(service_->Filter(Protocol("filter-request-nodecache.json")));
  EXPECT_EQ(names.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_TRUE(names.nodes_null);
  EXPECT_EQ(names.unresolvable, nodes.unresolvable);
}

TEST_F(ExtenderServiceTest, FilterUnknownNodeIsUnresolvableWithReason) {
  LoadExampleNodes();
  FilterAnswer a = ReadFilterAnswer(service_->Filter(
      NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"gpu-node-a", "gpu-node-zzz"})));
  EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_EQ(a.unresolvable, (std::map<std::string, std::string>{
                                {"gpu-node-zzz", Message(FitReason::kNodeUnknown)}}));
  EXPECT_TRUE(a.failed.empty());
}

// Answers are written by hand for speed; a node name that JSON must escape (never a valid
// Kubernetes name, but a client may send anything) still comes back as valid JSON, unchanged.
TEST_F(ExtenderServiceTest, NamesThatNeedEscapingComeBackIntactInEveryAnswer) {
  LoadExampleNodes();
  const std::string odd = "odd \"node\" \\ name";
  const std::string body = absl::StrCat(
      R"({"Pod":)", PodJson("p", "uid-p", {{kMig, "1"}}),
      R"(,"Nodes":null,"NodeNames":["gpu-node-a","odd \"node\" \\ name"]})");
  FilterAnswer a = ReadFilterAnswer(service_->Filter(body));
  EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"});
  EXPECT_EQ(a.unresolvable,
            (std::map<std::string, std::string>{{odd, Message(FitReason::kNodeUnknown)}}));

  VerbResult p = service_->Prioritize(body);
  ASSERT_EQ(p.status, 200) << p.body;
  rapidjson::Document scores = Json(p.body);
  ASSERT_TRUE(scores.IsArray()) << p.body;
  ASSERT_EQ(scores.Size(), 2u);
  EXPECT_STREQ(scores[0]["Host"].GetString(), "gpu-node-a");
  EXPECT_GE(scores[0]["Score"].GetInt64(), 1);
  EXPECT_EQ(scores[1]["Host"].GetString(), odd);
  EXPECT_EQ(scores[1]["Score"].GetInt64(), 0);
}

// The service remembers the last candidate list's lookups; a node added, removed, or the
// whole mirror rebuilt between two identical requests must show in the second answer (and,
// under AddressSanitizer, no remembered pointer to a freed node may be read).
TEST_F(ExtenderServiceTest, RepeatedCandidateListsFollowNodeChanges) {
  LoadExampleNodes();
  const std::string body =
      NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"gpu-node-a", "gpu-node-c"});
  auto unknown = [&] {
    std::set<std::string> out;
    for (const auto& [node, why] : ReadFilterAnswer(service_->Filter(body)).unresolvable) {
      if (why == Message(FitReason::kNodeUnknown)) out.insert(node);
    }
    return out;
  };
  EXPECT_EQ(unknown(), std::set<std::string>{"gpu-node-c"});
  EXPECT_EQ(unknown(), std::set<std::string>{"gpu-node-c"});  // the remembered lookup
  NodeObject c = NodesOf(Protocol("nodelist-2-gpu-nodes.json"))[0];
  c.name = "gpu-node-c";
  AddNode(c);
  EXPECT_EQ(unknown(), std::set<std::string>{});
  mirror_.Write([](ClusterState& s) {
    s.RemoveNode("gpu-node-a");
    return true;
  });
  EXPECT_EQ(unknown(), std::set<std::string>{"gpu-node-a"});
  // A relist replaces every node object: the remembered pointers must not be used.
  ObjectBatch batch;
  batch.nodes = NodesOf(Protocol("nodelist-2-gpu-nodes.json"));
  mirror_.ReplaceAll(batch, absl::Now());
  EXPECT_EQ(unknown(), std::set<std::string>{"gpu-node-c"});
  EXPECT_EQ(ReadFilterAnswer(service_->Filter(body)).passed,
            std::vector<std::string>{"gpu-node-a"});
}

TEST_F(ExtenderServiceTest, PodWithoutCatalogResourcePassesEveryNodeUntouched) {
  LoadExampleNodes();
  const std::string before = service_->DebugStateJson();
  const std::string pod = PodJson("web", "uid-web", {{"cpu", "2"}});
  FilterAnswer a =
      ReadFilterAnswer(service_->Filter(NamesBody(pod, {"gpu-node-b", "gpu-node-zzz", "gpu-node-a"})));
  EXPECT_EQ(a.passed, (std::vector<std::string>{"gpu-node-b", "gpu-node-zzz", "gpu-node-a"}));
  EXPECT_TRUE(a.failed.empty());
  EXPECT_TRUE(a.unresolvable.empty());

  rapidjson::Document scores = Json(service_->Prioritize(NamesBody(pod, {"gpu-node-a", "gpu-node-b"})).body);
  ASSERT_TRUE(scores.IsArray());
  for (const auto& s : scores.GetArray()) EXPECT_EQ(s["Score"].GetInt64(), 0);

  // Bind just binds: no annotations, nothing reserved.
  rapidjson::Document bind = Json(service_->Bind(BindBody("web", "uid-web", "gpu-node-b")).body);
  EXPECT_STREQ(bind["Error"].GetString(), "");
  ASSERT_EQ(binder_.calls().size(), 1u);
  EXPECT_TRUE(binder_.calls()[0].annotations.empty());
  EXPECT_EQ(binder_.calls()[0].target.node, "gpu-node-b");
  EXPECT_EQ(service_->DebugStateJson(), before);
}

// /debug/state's host view: per node its allocatable cpu, memory and pods and the summed
// requests of the non-terminal pods bound there, GPU pods and others alike; a name known only
// from pods bound to it shows null allocatable.
TEST_F(ExtenderServiceTest, DebugStateShowsHostAllocatableAndRequests) {
  LoadExampleNodes();
  mirror_.Write([&](ClusterState& s) {
    for (const auto& [json, node] : std::vector<std::pair<std::string, std::string>>{
             {PodJson("web", "uid-web", {{"cpu", "1500m"}, {"memory", "1Gi"}}), "gpu-node-a"},
             {PodJson("train", "uid-train", {{"cpu", "2"}, {kMig, "1"}}), "gpu-node-a"},
             {PodJson("lost", "uid-lost", {{"cpu", "1"}}), "gpu-node-gone"}}) {
      rapidjson::Document doc = Json(json);
      absl::StatusOr<PodObject> pod = DecodePod(doc, "Pod");
      ASSERT_TRUE(pod.ok()) << pod.status();
      pod->node_name = node;
      pod->phase = "Running";
      s.ApplyPod(*pod);
    }
  });
  rapidjson::Document state = Json(service_->DebugStateJson());
  ASSERT_TRUE(state.HasMember("hosts"));
  std::map<std::string, std::string> hosts;
  for (const auto& h : state["hosts"].GetArray()) {
    hosts[h["node"].GetString()] = ToJson(h["allocatable"]) + " " + ToJson(h["requested"]);
  }
  EXPECT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts["gpu-node-a"],
            R"({"cpu_milli":127500,"memory_bytes":1080639262720,"pods":110} )"
            R"({"cpu_milli":3500,"memory_bytes":1073741824,"pods":2})");
  EXPECT_EQ(hosts["gpu-node-b"],
            R"({"cpu_milli":127500,"memory_bytes":1080639262720,"pods":110} )"
            R"({"cpu_milli":0,"memory_bytes":0,"pods":0})");
  EXPECT_EQ(hosts["gpu-node-gone"],
            R"({"cpu_milli":null,"memory_bytes":null,"pods":null} )"
            R"({"cpu_milli":1000,"memory_bytes":0,"pods":1})");
  // The window fgd reads: each pod as it arrived on a host, the earlier ones decayed by
  // 2^(-1/2000) per newer pod (MirrorOptions' half-life); train is the one GPU pod.
  const double decay = std::exp2(-1.0 / 2000);
  EXPECT_EQ(ToJson(state["recent_host_demand"]),
            absl::StrCat(R"({"gpu_pods":{"cpu_milli":)", std::llround(2000 * decay),
                         R"(,"memory_bytes":0},"other_pods":{"cpu_milli":)",
                         std::llround(1500 * decay * decay + 1000), R"(,"memory_bytes":)",
                         std::llround(1073741824 * decay * decay), R"(},"pods_counted":3})"));
}

// What a user expects of a pod that asks for no catalog resource (it reaches bind when it
// names a managed resource with quantity 0, or when managedResources is empty): the extender
// binds it as kube-scheduler's default binder would, wherever kube-scheduler put it. Filter
// passes every node for such a pod, known or not (I6), so bind does not refuse a node the
// mirror does not know: nothing of ours is reserved there, and whether the node exists is the
// API server's business, as for the default binder (docs in README "How it decides").
TEST_F(ExtenderServiceTest, PodWithoutCatalogResourceBindsOntoANodeTheMirrorDoesNotKnow) {
  LoadExampleNodes();
  const std::string before = service_->DebugStateJson();
  for (const auto& [name, requests] :
       std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"web", {{"cpu", "1"}}}, {"zero", {{kMig, "0"}}}}) {
    const std::string uid = "uid-" + name;
    ASSERT_EQ(service_->Filter(NamesBody(PodJson(name, uid, requests), {"node-zzz"})).status, 200);
    VerbResult r = service_->Bind(BindBody(name, uid, "node-zzz"));
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.outcome, "ok");
    EXPECT_EQ(r.body, R"({"Error":""})") << name;
  }
  ASSERT_EQ(binder_.calls().size(), 2u);
  for (const FakeBinder::Call& call : binder_.calls()) {
    EXPECT_EQ(call.target.node, "node-zzz");
    EXPECT_TRUE(call.annotations.empty()) << "no unit annotations: nothing of ours was chosen";
    EXPECT_FALSE(call.target.pod_uid.empty()) << "the Binding carries the UID precondition";
  }
  EXPECT_EQ(service_->DebugStateJson(), before) << "the mirror is untouched";
  EXPECT_EQ(NodeCount(), 2u) << "no node invented";
}

TEST_F(ExtenderServiceTest, TwoTicketPodIsUnresolvableEverywhere) {
  LoadExampleNodes();
  AddNode(MakeNode("ts-node", {{kMigShared, {2, 4}}}));
  const std::string pod_json = PodJson("greedy", "uid-greedy", {{kMigShared, "2"}});
  FilterAnswer a = ReadFilterAnswer(
      service_->Filter(NamesBody(pod_json, {"gpu-node-a", "gpu-node-b", "ts-node"})));
  EXPECT_TRUE(a.passed.empty());
  EXPECT_TRUE(a.failed.empty());
  ASSERT_EQ(a.unresolvable.size(), 3u);

  // The message is the pod's own reason (I5), the same on every node.
  rapidjson::Document pod_doc = Json(pod_json);
  PodObject pod = *DecodePod(pod_doc, "Pod");
  const PodRequest request = ResolvePodRequest(Catalog::BuiltIn(), pod, "ml-team");
  ASSERT_FALSE(request.unresolvable.empty());
  for (const auto& [node, message] : a.unresolvable) EXPECT_EQ(message, request.unresolvable) << node;

  // Bind refuses it too and reserves nothing.
  rapidjson::Document bind = Json(service_->Bind(BindBody("greedy", "uid-greedy", "ts-node")).body);
  EXPECT_TRUE(absl::StrContains(bind["Error"].GetString(), request.unresolvable));
  EXPECT_TRUE(binder_.calls().empty());
  EXPECT_EQ(Usage("ml-team", kMigShared), 0);
}

// ------------------------------------------------------------------------------- prioritize

TEST_F(ExtenderServiceTest, PrioritizeAnswersBareArrayForEveryInputNode) {
  LoadExampleNodes();
  for (const std::string file :
       {"prioritize-request.json", "captured-k8s-1.26/k8s1.26-prioritize-request-nodecache-true.json",
        "captured-k8s-1.26/k8s1.26-prioritize-request-nodecache-false.json"}) {
    SCOPED_TRACE(file);
    const std::string body = Protocol(file);
    rapidjson::Document in = Json(body);
    std::vector<std::string> hosts;
    if (in["NodeNames"].IsArray()) {
      for (const auto& n : in["NodeNames"].GetArray()) hosts.push_back(n.GetString());
    } else {
      for (const auto& n : in["Nodes"]["items"].GetArray()) {
        hosts.push_back(n["metadata"]["name"].GetString());
      }
    }
    // Both nodes are candidates in every file: an empty answer must not pass the loops below.
    ASSERT_EQ(std::set<std::string>(hosts.begin(), hosts.end()),
              (std::set<std::string>{"gpu-node-a", "gpu-node-b"}));
    VerbResult r = service_->Prioritize(body);
    ASSERT_EQ(r.status, 200) << r.body;
    rapidjson::Document out = Json(r.body);
    ASSERT_TRUE(out.IsArray());
    ASSERT_EQ(out.Size(), hosts.size());
    for (rapidjson::SizeType i = 0; i < out.Size(); ++i) {
      EXPECT_EQ(Keys(out[i]), (std::set<std::string>{"Host", "Score"}));
      EXPECT_EQ(out[i]["Host"].GetString(), hosts[i]);
      const int64_t score = out[i]["Score"].GetInt64();
      EXPECT_GE(score, 0);
      EXPECT_LE(score, kMaxExtenderPriority);
      if (hosts[i] == "gpu-node-b") {
        EXPECT_EQ(score, 0) << "infeasible node scored";
      }
    }
    // The feasible node gets the policy's score.
    rapidjson::Document pod_doc = Json(body);
    PodObject pod = *DecodePod(pod_doc["Pod"], "Pod");
    const int64_t want = mirror_.Read([&](const ClusterState& s) {
      const PodRequest req = ResolvePodRequest(s.catalog(), pod, "ml-team");
      return MakePolicy("affinity-pack").value()->Score(s, req, *s.FindNode("gpu-node-a"));
    });
    int scored_a = 0;
    for (const auto& e : out.GetArray()) {
      if (std::string(e["Host"].GetString()) == "gpu-node-a") {
        EXPECT_EQ(e["Score"].GetInt64(), want);
        ++scored_a;
      }
    }
    EXPECT_EQ(scored_a, 1);
  }
}

// ------------------------------------------------------------------------------- bind

TEST_F(ExtenderServiceTest, CapturedFilterThenBindReservesConfirmsAndAnnotates) {
  LoadExampleNodes();
  ASSERT_EQ(service_->Filter(Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-true.json"))
                .status,
            200);
  VerbResult r = service_->Bind(Protocol("captured-k8s-1.26/k8s1.26-bind-request.json"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.outcome, "ok");
  EXPECT_EQ(r.body, R"({"Error":""})");

  ASSERT_EQ(binder_.calls().size(), 1u);
  const FakeBinder::Call call = binder_.calls()[0];
  EXPECT_EQ(call.target.pod_name, "cuda-infer-3");
  EXPECT_EQ(call.target.pod_namespace, "ml-team");
  EXPECT_EQ(call.target.pod_uid, "7a2932cf-1232-487e-b4ff-8accbb91c1f1");
  EXPECT_EQ(call.target.node, "gpu-node-a");
  ASSERT_EQ(call.annotations.count(std::string(kAnnotationUnit)), 1u);
  EXPECT_TRUE(absl::StartsWith(call.annotations.at(std::string(kAnnotationUnit)),
                               "gpu-node-a/nvidia.com/mig-1g.5gb/"));
  EXPECT_EQ(call.annotations.at(std::string(kAnnotationProject)), "ml-team");

  PodRecord rec;
  ASSERT_NE(FindPodCopy("ml-team/cuda-infer-3", &rec), nullptr);
  EXPECT_EQ(rec.source, HoldingSource::kConfirmed);
  EXPECT_EQ(rec.uid, "7a2932cf-1232-487e-b4ff-8accbb91c1f1");
  EXPECT_EQ(rec.assignment.node, "gpu-node-a");
  // The annotation names exactly the unit the mirror holds for the pod.
  absl::StatusOr<Assignment> parsed =
      ParseAssignmentAnnotations(call.annotations, "gpu-node-a", Catalog::BuiltIn());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, rec.assignment);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
  EXPECT_EQ(Audit().oversubscribed_units, 0);

  // Bound pods are forgotten: a second bind of the same pod is an unknown pod.
  rapidjson::Document again =
      Json(service_->Bind(Protocol("captured-k8s-1.26/k8s1.26-bind-request.json")).body);
  EXPECT_TRUE(absl::StrContains(again["Error"].GetString(), "was not seen in filter"));
}

TEST_F(ExtenderServiceTest, ExampleBindBodyAfterExampleFilter) {
  LoadExampleNodes();
  ASSERT_EQ(service_->Filter(Protocol("filter-request.json")).status, 200);
  EXPECT_EQ(service_->Bind(Protocol("bind-request.json")).body, R"({"Error":""})");
  EXPECT_EQ(Usage("ml-team", kMig), 1);
}

TEST_F(ExtenderServiceTest, FilterBindFilterShowsCapacityConsumed) {
  LoadExampleNodes();
  for (int i = 0; i < 7; ++i) {
    ASSERT_EQ(Place(absl::StrCat("p", i), absl::StrCat("uid-", i), {{kMig, "1"}}, "gpu-node-a"), "")
        << i;
  }
  EXPECT_EQ(Usage("ml-team", kMig), 7);
  FilterAnswer a = ReadFilterAnswer(
      service_->Filter(NamesBody(PodJson("p7", "uid-7", {{kMig, "1"}}), {"gpu-node-a", "gpu-node-b"})));
  EXPECT_TRUE(a.passed.empty());
  // Full is a capacity reason (preemption may help), node b stays unresolvable.
  EXPECT_EQ(a.failed, (std::map<std::string, std::string>{{"gpu-node-a", Message(FitReason::kNoFreeUnit)}}));
  EXPECT_EQ(a.unresolvable.count("gpu-node-b"), 1u);

  // Seven distinct slices, one holder each.
  rapidjson::Document state = Json(service_->DebugStateJson());
  std::set<std::string> held;
  for (const auto& u : state["units"].GetArray()) {
    if (std::string(u["node"].GetString()) != "gpu-node-a") continue;
    EXPECT_EQ(u["used"].GetInt(), 1);
    ASSERT_EQ(u["holders"].Size(), 1u);
    held.insert(u["holders"][0].GetString());
  }
  EXPECT_EQ(held.size(), 7u);
}

TEST_F(ExtenderServiceTest, LastUnitGoesToOnlyOneOfTwoBinds) {
  LoadExampleNodes();
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Place(absl::StrCat("p", i), absl::StrCat("uid-", i), {{kMig, "1"}}, "gpu-node-a"), "");
  }
  // Both see the last free slice in filter...
  for (const std::string name : {"x", "y"}) {
    FilterAnswer a = ReadFilterAnswer(
        service_->Filter(NamesBody(PodJson(name, "uid-" + name, {{kMig, "1"}}), {"gpu-node-a"})));
    EXPECT_EQ(a.passed, std::vector<std::string>{"gpu-node-a"});
  }
  // ...but bind is the commit point.
  EXPECT_EQ(Json(service_->Bind(BindBody("x", "uid-x", "gpu-node-a")).body)["Error"].GetString(),
            std::string());
  VerbResult second = service_->Bind(BindBody("y", "uid-y", "gpu-node-a"));
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.outcome, "error");
  const std::string error = Json(second.body)["Error"].GetString();
  EXPECT_TRUE(absl::StartsWith(error, "binding rejected: gpu-node-a: ")) << error;
  EXPECT_TRUE(absl::StrContains(error, Message(FitReason::kNoFreeUnit))) << error;
  EXPECT_EQ(Usage("ml-team", kMig), 7);
  PodRecord rec;
  EXPECT_EQ(FindPodCopy("ml-team/y", &rec), nullptr);
  const AuditReport audit = Audit();
  EXPECT_EQ(audit.oversubscribed_units, 0);
  EXPECT_TRUE(audit.problems.empty());
}

TEST_F(ExtenderServiceTest, FailingBinderRollsBackReservation) {
  LoadExampleNodes();
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"gpu-node-a"})).status,
            200);
  const std::string before = service_->DebugStateJson();
  binder_.SetResult(absl::UnavailableError("apiserver unreachable"));
  VerbResult r = service_->Bind(BindBody("p", "uid-p", "gpu-node-a"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.outcome, "error");
  EXPECT_EQ(Json(r.body)["Error"].GetString(), std::string("binding rejected: apiserver unreachable"));
  ASSERT_EQ(binder_.calls().size(), 1u);
  EXPECT_FALSE(binder_.calls()[0].annotations.empty());  // it tried with the chosen unit
  EXPECT_EQ(service_->DebugStateJson(), before);          // and nothing leaked
  EXPECT_EQ(Usage("ml-team", kMig), 0);
  EXPECT_TRUE(Audit().problems.empty());

  // The pod is still known, so kube-scheduler's retry can bind it once the API is back.
  binder_.SetResult(absl::OkStatus());
  EXPECT_EQ(service_->Bind(BindBody("p", "uid-p", "gpu-node-a")).body, R"({"Error":""})");
  EXPECT_EQ(Usage("ml-team", kMig), 1);
}

TEST_F(ExtenderServiceTest, FailedRetryOfABoundPodDoesNotReleaseItsUnit) {
  // Time-sliced, so that the retry's choice is the unit the pod already holds a ticket on
  // (the project's own unit) and Reserve accepts it as the same assignment.
  AddNode(MakeNode("ts-node", {{kMigShared, {1, 4}}}));
  ASSERT_EQ(Place("p", "uid-p", {{kMigShared, "1"}}, "ts-node"), "");
  PodRecord bound;
  ASSERT_NE(FindPodCopy("ml-team/p", &bound), nullptr);
  // kube-scheduler retries (its first answer timed out) and the API server now refuses.
  ASSERT_EQ(
      service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMigShared, "1"}}), {"ts-node"})).status,
      200);
  binder_.SetResult(absl::AlreadyExistsError("pod p is already assigned to node ts-node"));
  const std::string error =
      Json(service_->Bind(BindBody("p", "uid-p", "ts-node")).body)["Error"].GetString();
  EXPECT_TRUE(absl::StartsWith(error, "binding rejected: ")) << error;
  PodRecord after;
  ASSERT_NE(FindPodCopy("ml-team/p", &after), nullptr) << "the bound pod's ticket was released";
  EXPECT_EQ(after.assignment, bound.assignment);
  EXPECT_EQ(Usage("ml-team", kMigShared), 4) << "its one slice of 4 tickets";
}

// The pod as the watch shows it once `call`'s binding committed.
PodObject BoundPod(const FakeBinder::Call& call) {
  PodObject pod;
  pod.name = call.target.pod_name;
  pod.namespace_name = call.target.pod_namespace;
  pod.uid = call.target.pod_uid;
  pod.node_name = call.target.node;
  pod.phase = "Running";
  pod.annotations = call.annotations;
  return pod;
}

// Issue 12, finding 1: a bind whose outcome is unknown (the POST may have committed) never
// frees its unit; the holding stays, unconfirmed, until the API server's objects settle it.
TEST_F(ExtenderServiceTest, UnknownBindOutcomeKeepsTheUnitHeldUntilTheApiSettlesIt) {
  AddNode(MakeNode("one", {{kMig, {1, 1}}}));
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"one"})).status, 200);
  binder_.SetResult(BindResult::Unknown(absl::DeadlineExceededError("timed out")));
  VerbResult r = service_->Bind(BindBody("p", "uid-p", "one"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.outcome, "error");
  EXPECT_EQ(Json(r.body)["Error"].GetString(), std::string("binding outcome unknown: timed out"));
  PodRecord held;
  ASSERT_NE(FindPodCopy("ml-team/p", &held), nullptr) << "an ambiguous bind freed its unit";
  EXPECT_EQ(held.source, HoldingSource::kReserved);
  EXPECT_NE(held.unconfirmed_since, absl::InfinitePast());
  EXPECT_EQ(Usage("ml-team", kMig), 1);

  // The unit is not handed out again while p may be bound on it.
  binder_.SetResult(absl::OkStatus());
  const std::string error = Place("q", "uid-q", {{kMig, "1"}}, "one");
  EXPECT_TRUE(absl::StartsWith(error, "binding rejected: one: ")) << error;
  EXPECT_EQ(binder_.calls().size(), 1u);

  // The watch shows that p's binding committed: the holding is confirmed, nothing doubled.
  const FakeBinder::Call first = binder_.calls()[0];
  mirror_.Write([&](ClusterState& s) { s.ApplyPod(BoundPod(first)); });
  ASSERT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  EXPECT_EQ(held.source, HoldingSource::kConfirmed);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
  EXPECT_TRUE(Audit().problems.empty());
}

// A relist listed after the unknown outcome (and after any POST of it could still commit)
// that shows the pod still pending settles it: no binding of it committed, the unit is free
// again.
TEST_F(ExtenderServiceTest, RelistAfterAnUnknownBindOutcomeFreesTheUnitOfAPendingPod) {
  AddNode(MakeNode("one", {{kMig, {1, 1}}}));
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"one"})).status, 200);
  binder_.SetResult(BindResult::Unknown(absl::UnavailableError("connection reset")));
  ASSERT_EQ(Json(service_->Bind(BindBody("p", "uid-p", "one")).body)["Error"].GetString(),
            std::string("binding outcome unknown: connection reset"));
  const absl::Time outcome_at = absl::Now();
  ObjectBatch relist;
  relist.nodes.push_back(MakeNode("one", {{kMig, {1, 1}}}));
  PodObject pending = BoundPod(binder_.calls()[0]);
  pending.node_name.clear();
  pending.phase = "Pending";
  relist.pods.push_back(pending);
  mirror_.ReplaceAll(relist, outcome_at - absl::Seconds(1));  // may predate a commit: kept
  PodRecord held;
  EXPECT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  // Listed just after the outcome: a POST without answer may still commit, kept.
  mirror_.ReplaceAll(relist, outcome_at + absl::Seconds(5));
  EXPECT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  // Listed when no POST of it can still be in flight: the API's word.
  mirror_.ReplaceAll(relist, absl::Now() + Mirror::kInFlightBindGrace + absl::Seconds(1));
  EXPECT_EQ(FindPodCopy("ml-team/p", &held), nullptr);
  binder_.SetResult(absl::OkStatus());
  EXPECT_EQ(Place("q", "uid-q", {{kMig, "1"}}, "one"), "");
}

// kube-scheduler retries a pod whose bind outcome was unknown: onto the same node it repeats
// the same binding (so that a committed first one reads back as ours) and confirms it.
TEST_F(ExtenderServiceTest, RetryAfterAnUnknownOutcomeRepeatsTheSameBinding) {
  AddNode(MakeNode("two", {{kMig, {2, 1}}}));
  binder_.SetResult(BindResult::Unknown(absl::DeadlineExceededError("timed out")));
  ASSERT_NE(Place("p", "uid-p", {{kMig, "1"}}, "two"), "");
  binder_.SetResult(absl::OkStatus());
  EXPECT_EQ(Place("p", "uid-p", {{kMig, "1"}}, "two"), "");
  ASSERT_EQ(binder_.calls().size(), 2u);
  EXPECT_EQ(binder_.calls()[1].annotations, binder_.calls()[0].annotations);
  PodRecord held;
  ASSERT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  EXPECT_EQ(held.source, HoldingSource::kConfirmed);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
}

// A definite "not bound" releases only the holding this call created while it is still that
// reservation: when the watch recorded the pod bound meanwhile (kube-scheduler's earlier bind
// of it committed), that holding stays.
TEST_F(ExtenderServiceTest, NotBoundReleasesOnlyTheReservationThisCallStillHolds) {
  AddNode(MakeNode("one", {{kMig, {1, 1}}}));
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"one"})).status, 200);
  binder_.SetDuring([&](const FakeBinder::Call& call) {
    mirror_.Write([&](ClusterState& s) { s.ApplyPod(BoundPod(call)); });
  });
  binder_.SetResult(absl::AbortedError("Operation cannot be fulfilled: already assigned"));
  const std::string error =
      Json(service_->Bind(BindBody("p", "uid-p", "one")).body)["Error"].GetString();
  EXPECT_TRUE(absl::StartsWith(error, "binding rejected: ")) << error;
  PodRecord held;
  ASSERT_NE(FindPodCopy("ml-team/p", &held), nullptr) << "a holding the watch confirmed was freed";
  EXPECT_EQ(held.source, HoldingSource::kConfirmed);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
}

// Issue 12: kube-scheduler binds the same pod twice at once (its retry while the first POST is
// still out). The retry joins the first call's reservation; the first call's definite "not
// bound" must not free the unit while the retry's POST may still commit: the unit would look
// free while the pod ends up bound on it. Interleaving: first POST out, retry's POST out,
// first answered 503 (not applied), then the retry's commits.
TEST_F(ExtenderServiceTest, NotBoundOfOneOfTwoConcurrentBindsKeepsTheUnitTheOtherMayCommit) {
  AddNode(MakeNode("one", {{kMig, {1, 1}}}));
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"one"})).status, 200);
  binder_.HoldEach(true);
  VerbResult first, retry;
  std::thread first_bind([&] { first = service_->Bind(BindBody("p", "uid-p", "one")); });
  ASSERT_TRUE(binder_.WaitForCalls(1));
  std::thread retry_bind([&] { retry = service_->Bind(BindBody("p", "uid-p", "one")); });
  ASSERT_TRUE(binder_.WaitForCalls(2));
  EXPECT_EQ(binder_.calls()[1].annotations, binder_.calls()[0].annotations);  // joined

  binder_.Answer(0, BindResult::NotBound(absl::UnavailableError("503: not applied")));
  first_bind.join();
  EXPECT_EQ(Json(first.body)["Error"].GetString(), std::string("binding rejected: 503: not applied"));
  PodRecord held;
  EXPECT_NE(FindPodCopy("ml-team/p", &held), nullptr)
      << "the unit was freed while the retry's POST may still commit";
  EXPECT_EQ(Usage("ml-team", kMig), 1);
  // Nobody else gets the unit meanwhile.
  const FilterAnswer other =
      ReadFilterAnswer(service_->Filter(NamesBody(PodJson("q", "uid-q", {{kMig, "1"}}), {"one"})));
  EXPECT_TRUE(other.passed.empty());

  binder_.Answer(1, BindResult::Bound());
  retry_bind.join();
  EXPECT_EQ(retry.body, R"({"Error":""})");
  ASSERT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  EXPECT_EQ(held.source, HoldingSource::kConfirmed);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
  EXPECT_TRUE(Audit().problems.empty());
}

// The same two binds both definitely not bound: the last one out frees the unit (nothing
// leaks: a reservation without a bind in flight would never be settled by a relist).
TEST_F(ExtenderServiceTest, TwoConcurrentBindsBothNotBoundFreeTheUnitOnce) {
  AddNode(MakeNode("one", {{kMig, {1, 1}}}));
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"one"})).status, 200);
  binder_.HoldEach(true);
  std::thread first_bind([&] { service_->Bind(BindBody("p", "uid-p", "one")); });
  ASSERT_TRUE(binder_.WaitForCalls(1));
  std::thread retry_bind([&] { service_->Bind(BindBody("p", "uid-p", "one")); });
  ASSERT_TRUE(binder_.WaitForCalls(2));
  binder_.Answer(1, BindResult::NotBound(absl::UnavailableError("503")));
  retry_bind.join();
  PodRecord held;
  EXPECT_NE(FindPodCopy("ml-team/p", &held), nullptr);  // the first POST is still out
  binder_.Answer(0, BindResult::NotBound(absl::UnavailableError("503")));
  first_bind.join();
  EXPECT_EQ(FindPodCopy("ml-team/p", &held), nullptr);
  EXPECT_EQ(Usage("ml-team", kMig), 0);
  // And when one of them ended unknown, a definite "not bound" of the other frees nothing.
  binder_.HoldEach(false);
  binder_.SetResult(BindResult::Unknown(absl::DeadlineExceededError("timed out")));
  ASSERT_NE(Place("p", "uid-p", {{kMig, "1"}}, "one"), "");
  binder_.SetResult(BindResult::NotBound(absl::UnavailableError("503")));
  ASSERT_NE(Place("p", "uid-p", {{kMig, "1"}}, "one"), "");
  EXPECT_NE(FindPodCopy("ml-team/p", &held), nullptr);
  EXPECT_EQ(Usage("ml-team", kMig), 1);
}

TEST_F(ExtenderServiceTest, BindOfUnseenPodOrWrongUidIsRefused) {
  LoadExampleNodes();
  VerbResult r = service_->Bind(BindBody("ghost", "uid-ghost", "gpu-node-a"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Json(r.body)["Error"].GetString(),
            std::string("pod ml-team/ghost was not seen in filter; cannot bind"));

  // Same name, another UID (the pod was recreated): not the pod filter saw.
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-old", {{kMig, "1"}}), {"gpu-node-a"})).status,
            200);
  EXPECT_TRUE(absl::StrContains(
      Json(service_->Bind(BindBody("p", "uid-new", "gpu-node-a")).body)["Error"].GetString(),
      "was not seen in filter"));
  EXPECT_TRUE(binder_.calls().empty());
  EXPECT_EQ(Usage("ml-team", kMig), 0);
}

TEST_F(ExtenderServiceTest, BindOntoUnknownOrUnusableNodeIsRefused) {
  LoadExampleNodes();
  ASSERT_EQ(service_->Filter(NamesBody(PodJson("p", "uid-p", {{kMig, "1"}}), {"gpu-node-a"})).status,
            200);
  const std::string unknown =
      Json(service_->Bind(BindBody("p", "uid-p", "gpu-node-zzz")).body)["Error"].GetString();
  EXPECT_EQ(unknown, absl::StrCat("binding rejected: gpu-node-zzz: ", Message(FitReason::kNodeUnknown)));
  const std::string unusable =
      Json(service_->Bind(BindBody("p", "uid-p", "gpu-node-b")).body)["Error"].GetString();
  EXPECT_EQ(unusable,
            absl::StrCat("binding rejected: gpu-node-b: ", Message(FitReason::kOfferingUnusable)));
  EXPECT_TRUE(binder_.calls().empty());
  EXPECT_EQ(Usage("ml-team", kMig), 0);
}

TEST_F(ExtenderServiceTest, TimeSlicedPodsShareTheProjectsUnit) {
  AddNode(MakeNode("ts-node", {{kMigShared, {2, 4}}}));
  ASSERT_EQ(Place("a1", "uid-a1", {{kMigShared, "1"}}, "ts-node"), "");
  ASSERT_EQ(Place("a2", "uid-a2", {{kMigShared, "1"}}, "ts-node"), "");
  ASSERT_EQ(Place("b1", "uid-b1", {{kMigShared, "1"}}, "ts-node", "other-team"), "");
  // ml-team owns one slice (two tickets used on it), other-team the other: each is charged
  // the slice's 4 tickets.
  EXPECT_EQ(Usage("ml-team", kMigShared), 4);
  EXPECT_EQ(Usage("other-team", kMigShared), 4);
  PodRecord a1, a2, b1;
  ASSERT_NE(FindPodCopy("ml-team/a1", &a1), nullptr);
  ASSERT_NE(FindPodCopy("ml-team/a2", &a2), nullptr);
  ASSERT_NE(FindPodCopy("other-team/b1", &b1), nullptr);
  EXPECT_EQ(a1.assignment.units, a2.assignment.units);
  EXPECT_NE(a1.assignment.units, b1.assignment.units);
  EXPECT_EQ(Audit().multi_owner_units, 0);
}

// ------------------------------------------------------------------------------- preempt

// Preemption answers, node -> victim UIDs (and the PDB count).
std::map<std::string, std::pair<std::vector<std::string>, int64_t>> ReadPreempt(const VerbResult& r) {
  std::map<std::string, std::pair<std::vector<std::string>, int64_t>> out;
  EXPECT_EQ(r.status, 200) << r.body;
  rapidjson::Document doc = Json(r.body);
  EXPECT_EQ(Keys(doc), std::set<std::string>{"NodeNameToMetaVictims"});
  const rapidjson::Value& map = doc["NodeNameToMetaVictims"];
  EXPECT_TRUE(map.IsObject());
  for (auto m = map.MemberBegin(); m != map.MemberEnd(); ++m) {
    EXPECT_EQ(Keys(m->value), (std::set<std::string>{"Pods", "NumPDBViolations"}));
    auto& entry = out[m->name.GetString()];
    for (const auto& p : m->value["Pods"].GetArray()) {
      EXPECT_EQ(Keys(p), std::set<std::string>{"UID"});
      entry.first.push_back(p["UID"].GetString());
    }
    EXPECT_FALSE(entry.first.empty()) << "node without victims";
    entry.second = m->value["NumPDBViolations"].GetInt64();
  }
  return out;
}

std::string MetaVictimsBody(const std::string& pod,
                            const std::map<std::string, std::vector<std::string>>& victims,
                            int pdb = 0) {
  std::string map;
  for (const auto& [node, uids] : victims) {
    std::string pods;
    for (const std::string& u : uids) absl::StrAppend(&pods, pods.empty() ? "" : ",", R"({"UID":")", u, R"("})");
    absl::StrAppend(&map, map.empty() ? "" : ",", "\"", node, R"(":{"Pods":[)", pods,
                    R"(],"NumPDBViolations":)", pdb, "}");
  }
  return absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToVictims":null,"NodeNameToMetaVictims":{)", map,
                      "}}");
}

TEST_F(ExtenderServiceTest, PreemptKeepsOnlyNodesWhereVictimsFreeTheRightOffering) {
  AddNode(MakeNode("mixed", {{kMig, {1, 1}}, {kMig3g, {1, 1}}}));
  ASSERT_EQ(Place("small", "uid-small", {{kMig, "1"}}, "mixed", "batch"), "");
  ASSERT_EQ(Place("big", "uid-big", {{kMig3g, "1"}}, "mixed", "batch"), "");
  const std::string preemptor = PodJson("hi", "uid-hi", {{kMig, "1"}});
  // Evicting the 3g.20gb holder frees nothing a 1g.5gb pod can use; evicting the 1g.5gb
  // holder does. The scheduler sends one candidate per node, so ask twice.
  EXPECT_TRUE(ReadPreempt(service_->Preempt(MetaVictimsBody(preemptor, {{"mixed", {"uid-big"}}}))).empty());
  auto kept = ReadPreempt(service_->Preempt(MetaVictimsBody(preemptor, {{"mixed", {"uid-small"}}}, 2)));
  ASSERT_EQ(kept.count("mixed"), 1u);
  EXPECT_EQ(kept["mixed"].first, std::vector<std::string>{"uid-small"});
  EXPECT_EQ(kept["mixed"].second, 2);  // NumPDBViolations copied

  // Unknown nodes and nodes without victims are dropped; the mirror is not changed.
  const std::string before = service_->DebugStateJson();
  auto dropped = ReadPreempt(service_->Preempt(
      MetaVictimsBody(preemptor, {{"nowhere", {"uid-small"}}, {"mixed", {}}})));
  EXPECT_TRUE(dropped.empty());
  EXPECT_EQ(service_->DebugStateJson(), before);
}

TEST_F(ExtenderServiceTest, PreemptTimeSlicedNeedsTheOwnersTicketsGone) {
  // One time-sliced unit with 2 tickets, both held by other-team: ml-team can only get it
  // once *all* of other-team's holders are gone (one owner per unit, I2).
  AddNode(MakeNode("ts1", {{kMigShared, {1, 2}}}));
  ASSERT_EQ(Place("o1", "uid-o1", {{kMigShared, "1"}}, "ts1", "other-team"), "");
  ASSERT_EQ(Place("o2", "uid-o2", {{kMigShared, "1"}}, "ts1", "other-team"), "");
  const std::string preemptor = PodJson("hi", "uid-hi", {{kMigShared, "1"}});
  EXPECT_TRUE(ReadPreempt(service_->Preempt(MetaVictimsBody(preemptor, {{"ts1", {"uid-o1"}}}))).empty());
  auto kept = ReadPreempt(service_->Preempt(MetaVictimsBody(preemptor, {{"ts1", {"uid-o1", "uid-o2"}}})));
  EXPECT_EQ(kept["ts1"].first, (std::vector<std::string>{"uid-o1", "uid-o2"}));
  // A pod of the owning project needs just one ticket freed.
  const std::string same_project = PodJson("hi2", "uid-hi2", {{kMigShared, "1"}}, "other-team");
  EXPECT_EQ(ReadPreempt(service_->Preempt(MetaVictimsBody(same_project, {{"ts1", {"uid-o1"}}}))).size(), 1u);
}

TEST_F(ExtenderServiceTest, PreemptCapturedAndExampleBodies) {
  LoadExampleNodes();
  // Node a full: six pods plus the example victim batch-embed-0 (its UID as in
  // preempt-request*.json). The captured victims are not in our mirror.
  constexpr char kExampleVictim[] = "a3b4c5d6-e7f8-4a1b-9c2d-3e4f5a6b7c8d";
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Place(absl::StrCat("p", i), absl::StrCat("uid-", i), {{kMig, "1"}}, "gpu-node-a"), "");
  }
  ASSERT_EQ(Place("batch-embed-0", kExampleVictim, {{kMig, "1"}}, "gpu-node-a"), "");

  // Evicting pods that hold no slice frees nothing: node a is no candidate.
  for (const std::string file : {"captured-k8s-1.26/k8s1.26-preempt-request-nodecache-true.json",
                                 "captured-k8s-1.26/k8s1.26-preempt-request-nodecache-false.json"}) {
    SCOPED_TRACE(file);
    EXPECT_TRUE(ReadPreempt(service_->Preempt(Protocol(file))).empty());
  }
  // Evicting the slice holder makes room: node a is kept with its victim, in both input forms.
  for (const std::string file : {"preempt-request.json", "preempt-request-nodecache.json"}) {
    SCOPED_TRACE(file);
    auto kept = ReadPreempt(service_->Preempt(Protocol(file)));
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(kept["gpu-node-a"].first, std::vector<std::string>{kExampleVictim});
    EXPECT_EQ(kept["gpu-node-a"].second, 0);
  }
  EXPECT_EQ(Usage("ml-team", kMig), 7);  // preempt decides, it does not evict
}

TEST_F(ExtenderServiceTest, PreemptForPodWithoutCatalogResourceEchoesVictims) {
  const std::string pod = PodJson("web", "uid-web", {{"cpu", "1"}});
  auto kept = ReadPreempt(service_->Preempt(
      MetaVictimsBody(pod, {{"n1", {"v1", "v2"}}, {"n2", {"v3"}}}, 1)));
  EXPECT_EQ(kept["n1"].first, (std::vector<std::string>{"v1", "v2"}));
  EXPECT_EQ(kept["n1"].second, 1);
  EXPECT_EQ(kept["n2"].first, std::vector<std::string>{"v3"});
}

// ------------------------------------------------------------------------------- bad input

TEST_F(ExtenderServiceTest, MalformedBodiesAre400NamingThePathAndChangeNothing) {
  LoadExampleNodes();
  const std::string pod = PodJson("p", "uid-p", {{kMig, "1"}});
  const std::string good_node =
      R"({"metadata":{"name":"new-node","resourceVersion":"1"},"status":{"allocatable":{"nvidia.com/mig-1g.5gb":"7"}}})";
  const std::string bad_node =
      R"({"metadata":{"name":"bad-node"},"status":{"allocatable":{"nvidia.com/mig-1g.5gb":"-1"}}})";
  struct Case {
    std::string verb;
    std::string body;
    std::string error_prefix;  // the path the error names
  };
  const std::vector<Case> cases = {
      {"filter", "not json", "body: "},
      {"filter", "[1,2]", "body: must be a JSON object, got array"},
      {"filter", R"({"Nodes":null,"NodeNames":["a"]})", "Pod: missing"},
      {"filter", R"({"Pod":"p","NodeNames":["a"]})", "Pod: must be an object, got string"},
      {"filter", absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":[],"NodeNames":null})"),
       "Nodes: must be a NodeList object or null, got array"},
      {"filter", absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":{"items":{}},"NodeNames":null})"),
       "Nodes.items: must be an array, got object"},
      {"filter", absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":["a",7]})"),
       "NodeNames[1]: must be a string, got number"},
      // The first node is valid and new: it must not reach the mirror, since the second fails.
      {"filter",
       absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":{"metadata":{},"items":[)", good_node, ",",
                    bad_node, R"(]},"NodeNames":null})"),
       "Nodes.items[1]"},
      {"prioritize", "{", "body: "},
      {"prioritize", absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":{}})"),
       "NodeNames: must be an array of strings or null, got object"},
      {"prioritize",
       absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":{"metadata":{},"items":[)", good_node, ",",
                    bad_node, R"(]},"NodeNames":null})"),
       "Nodes.items[1]"},
      {"bind", "", "body: "},
      {"bind", R"({"PodName":7,"PodNamespace":"ml-team","PodUID":"u","Node":"gpu-node-a"})",
       "PodName: must be a string, got number"},
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","PodUID":"u"})", "Node: missing"},
      {"bind", R"({"PodName":"p","PodNamespace":"","PodUID":"u","Node":"gpu-node-a"})",
       "PodNamespace: empty"},
      // kube-scheduler always sends PodUID; without it the Binding cannot carry the UID
      // precondition, and a recreated pod of the same name could be bound by mistake.
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","Node":"gpu-node-a"})", "PodUID: missing"},
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","PodUID":null,"Node":"gpu-node-a"})",
       "PodUID: missing"},
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","PodUID":"","Node":"gpu-node-a"})",
       "PodUID: empty"},
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","PodUID":7,"Node":"gpu-node-a"})",
       "PodUID: must be a string, got number"},
      {"bind", absl::StrCat(R"({"PodName":"p","PodNamespace":"ml-team","PodUID":")",
                            std::string(300, 'u'), R"(","Node":"gpu-node-a"})"),
       "PodUID: longer than 253 bytes"},
      {"bind", R"({"PodName":"p","PodNamespace":"ml-team","PodUID":"\u0001ml-team/p","Node":"n"})",
       R"(PodUID: "\001ml-team/p" contains a control character)"},
      {"preempt", "nul", "body: "},
      {"preempt", R"({"NodeNameToMetaVictims":{}})", "Pod: missing"},
      {"preempt", absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":5}]}}})"),
       R"(NodeNameToMetaVictims["n"].Pods[0].UID: must be a string, got number)"},
      // An empty victim UID names no pod: echoing it would evict nothing we decided on.
      {"preempt", absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToMetaVictims":{"n":{"Pods":[{"UID":""}]}}})"),
       R"(NodeNameToMetaVictims["n"].Pods[0].UID: empty)"},
      {"preempt", absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToVictims":{"n":{"Pods":[{"metadata":{"uid":""}}]}}})"),
       R"(NodeNameToVictims["n"].Pods[0].metadata.uid: empty)"},
      {"preempt", absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToMetaVictims":{"n":{"Pods":[],"NumPDBViolations":"x"}}})"),
       R"(NodeNameToMetaVictims["n"].NumPDBViolations: must be an integer, got string)"},
      {"preempt", absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToVictims":{"n":{"Pods":[{"spec":{}}]}}})"),
       R"(NodeNameToVictims["n"].Pods[0].metadata: missing)"},
  };
  const std::string before = service_->DebugStateJson();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.verb + " " + c.body);
    VerbResult r;
    if (c.verb == "filter") r = service_->Filter(c.body);
    if (c.verb == "prioritize") r = service_->Prioritize(c.body);
    if (c.verb == "bind") r = service_->Bind(c.body);
    if (c.verb == "preempt") r = service_->Preempt(c.body);
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(r.outcome, "bad_request");
    rapidjson::Document doc = Json(r.body);
    ASSERT_TRUE(doc.IsObject());
    const std::string error = doc["Error"].GetString();
    EXPECT_TRUE(absl::StartsWith(error, c.error_prefix)) << error;
    if (c.verb == "filter") {
      EXPECT_EQ(Keys(doc), (std::set<std::string>{"Nodes", "NodeNames", "FailedNodes",
                                                  "FailedAndUnresolvableNodes", "Error"}));
      EXPECT_TRUE(doc["Nodes"].IsNull() && doc["NodeNames"].IsNull() &&
                  doc["FailedNodes"].IsNull() && doc["FailedAndUnresolvableNodes"].IsNull());
    }
    EXPECT_EQ(service_->DebugStateJson(), before);
  }
  EXPECT_TRUE(binder_.calls().empty());
}

// Issue 12, finding 7: a body that is not strict RFC 8259 JSON is refused before anything is
// decided, with the offset of the first offence. The bind below would succeed with a
// well-formed body (its pod passed filter); before the fix the one with U+001A in a key bound.
TEST_F(ExtenderServiceTest, BodiesThatAreNotStrictJsonAre400NamingTheOffset) {
  LoadExampleNodes();
  const std::string pod = PodJson("strict", "uid-strict", {{kMig, "1"}});
  ASSERT_EQ(service_->Filter(NamesBody(pod, {"gpu-node-a"})).status, 200);
  // An unknown member long enough that the control character lands in a 16-byte block of
  // RapidJSON's SIMD string scan.
  const std::string padding = R"(,"x-padding-aaaaaaaaaaaaaaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbb":1})";
  auto with_padding = [&](std::string body) {
    body.pop_back();  // its closing brace
    return body + padding;
  };
  const std::map<std::string, std::string> good = {
      {"filter", with_padding(NamesBody(pod, {"gpu-node-a"}))},
      {"prioritize", with_padding(NamesBody(pod, {"gpu-node-a"}))},
      {"bind", with_padding(BindBody("strict", "uid-strict", "gpu-node-a"))},
      {"preempt", with_padding(absl::StrCat(R"({"Pod":)", pod, R"(,"NodeNameToMetaVictims":{}})"))},
  };
  auto call = [&](const std::string& verb, std::string body) {
    if (verb == "filter") return service_->Filter(std::move(body));
    if (verb == "prioritize") return service_->Prioritize(std::move(body));
    if (verb == "bind") return service_->Bind(std::move(body));
    return service_->Preempt(std::move(body));
  };
  const std::string before = service_->DebugStateJson();
  for (const auto& [verb, body] : good) {
    const size_t at = body.find('_');
    ASSERT_NE(at, std::string::npos);
    struct Case {
      std::string body;
      std::string error;
    };
    std::string control = body, utf8 = body, nul = body;
    control[at] = '\x1a';
    utf8[at] = '\xff';
    nul[at] = '\0';
    const std::vector<Case> cases = {
        {control, absl::StrCat("body: invalid JSON at offset ", at,
                               ": Unescaped control character U+001A.")},
        {utf8, absl::StrCat("body: invalid JSON at offset ", at, ": Invalid UTF-8 encoding.")},
        {nul, absl::StrCat("body: invalid JSON at offset ", at, ": NUL byte in the document")},
        {body + "{}", absl::StrCat("body: invalid JSON at offset ", body.size(),
                                   ": The document root must not be followed by other values.")},
        {body + " x", absl::StrCat("body: invalid JSON at offset ", body.size() + 1,
                                   ": The document root must not be followed by other values.")},
    };
    for (const Case& c : cases) {
      SCOPED_TRACE(verb + " " + c.error);
      VerbResult r = call(verb, c.body);
      EXPECT_EQ(r.status, 400);
      EXPECT_EQ(r.outcome, "bad_request");
      rapidjson::Document doc = Json(r.body);
      ASSERT_TRUE(doc.IsObject());
      EXPECT_EQ(doc["Error"].GetString(), c.error);
      EXPECT_EQ(service_->DebugStateJson(), before);
    }
  }
  EXPECT_TRUE(binder_.calls().empty());
  // The same bind, well-formed and with trailing whitespace (allowed), binds.
  VerbResult r = service_->Bind(good.at("bind") + "\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, R"({"Error":""})");
  EXPECT_EQ(binder_.calls().size(), 1u);
}

// ------------------------------------------------------------------------------- not ready

TEST_F(ExtenderServiceTest, NotReadyAnswersWithoutDeciding) {
  service_->SetReady(false);
  const std::string before = service_->DebugStateJson();
  VerbResult f = service_->Filter(Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-false.json"));
  EXPECT_EQ(f.status, 200);
  EXPECT_EQ(f.outcome, "error");
  FilterAnswer a = ReadFilterAnswer(f);
  EXPECT_EQ(a.error, kNotSynced);
  EXPECT_TRUE(a.nodes_null && a.names_null);
  rapidjson::Document fdoc = Json(f.body);
  EXPECT_TRUE(fdoc["FailedNodes"].IsNull() && fdoc["FailedAndUnresolvableNodes"].IsNull());
  EXPECT_EQ(NodeCount(), 0u);  // the Node objects were not applied

  VerbResult p = service_->Prioritize(Protocol("prioritize-request.json"));
  EXPECT_EQ(p.status, 503);
  EXPECT_EQ(Json(p.body)["Error"].GetString(), std::string(kNotSynced));

  VerbResult b = service_->Bind(Protocol("bind-request.json"));
  EXPECT_EQ(b.status, 200);
  EXPECT_EQ(Json(b.body)["Error"].GetString(), std::string(kNotSynced));
  EXPECT_TRUE(binder_.calls().empty());

  VerbResult e = service_->Preempt(Protocol("preempt-request-nodecache.json"));
  EXPECT_EQ(e.status, 200);
  EXPECT_EQ(e.body, R"({"NodeNameToMetaVictims":{}})");
  EXPECT_EQ(service_->DebugStateJson(), before);

  service_->SetReady(true);
  LoadExampleNodes();
  EXPECT_EQ(ReadFilterAnswer(service_->Filter(Protocol("filter-request-nodecache.json"))).passed,
            std::vector<std::string>{"gpu-node-a"});
}

TEST_F(ExtenderServiceTest, NotReadyAnswersSayWhy) {
  const std::string lease = "gpu-slice-extender/gpu-slice-extender";
  struct Case {
    Readiness readiness;
    std::string message;
    std::string label;
  };
  const Case cases[] = {
      {Readiness::NotLeader("node-7_ab12", lease),
       "not the leader; node-7_ab12 leads (Lease gpu-slice-extender/gpu-slice-extender)",
       "not_leader"},
      {Readiness::NotLeader("", lease),
       "not the leader; no replica holds the Lease gpu-slice-extender/gpu-slice-extender right "
       "now (a take-over is under way)",
       "not_leader"},
      {Readiness::Stopping(), "extender is shutting down", "stopping"},
      {Readiness::NotSynced(), kNotSynced, "not_synced"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    service_->SetReadiness(c.readiness);
    EXPECT_FALSE(service_->Ready());
    EXPECT_EQ(service_->readiness().label(), c.label);
    EXPECT_EQ(ReadFilterAnswer(service_->Filter(Protocol("filter-request-nodecache.json"))).error,
              c.message);
    VerbResult p = service_->Prioritize(Protocol("prioritize-request.json"));
    EXPECT_EQ(p.status, 503);
    EXPECT_EQ(Json(p.body)["Error"].GetString(), c.message);
    EXPECT_EQ(Json(service_->Bind(Protocol("bind-request.json")).body)["Error"].GetString(),
              c.message);
  }
  EXPECT_TRUE(binder_.calls().empty());
  EXPECT_EQ(service_->BindsInFlight(), 0);
  service_->SetReadiness(Readiness::Ready());
  EXPECT_TRUE(service_->Ready());
  EXPECT_EQ(service_->readiness().label(), std::string("ready"));
}

// Shutdown waits for this count before the Lease is released (LiveCluster::Stop).
TEST_F(ExtenderServiceTest, ABindInFlightIsCountedUntilItHasAnswered) {
  LoadExampleNodes();
  ASSERT_EQ(service_->Filter(Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-true.json"))
                .status,
            200);
  binder_.Hold(true);
  VerbResult answer;
  std::thread bind([&] {
    answer = service_->Bind(Protocol("captured-k8s-1.26/k8s1.26-bind-request.json"));
  });
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (binder_.calls().empty() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(binder_.calls().size(), 1u);
  EXPECT_EQ(service_->BindsInFlight(), 1);
  // Not ready from here on: new binds are refused (and not counted once answered), the one in
  // flight is still counted.
  service_->SetReadiness(Readiness::Stopping());
  EXPECT_EQ(Json(service_->Bind(Protocol("bind-request.json")).body)["Error"].GetString(),
            std::string("extender is shutting down"));
  EXPECT_EQ(service_->BindsInFlight(), 1);
  EXPECT_FALSE(service_->WaitForBindsToFinish(absl::Milliseconds(50)));
  binder_.Hold(false);
  EXPECT_TRUE(service_->WaitForBindsToFinish(absl::Seconds(10)));
  bind.join();
  EXPECT_EQ(answer.body, R"({"Error":""})");
  EXPECT_EQ(service_->BindsInFlight(), 0);
}

// ------------------------------------------------------------------------------- debug state

TEST_F(ExtenderServiceTest, DebugStateListsUnitsProjectsAndAudit) {
  LoadExampleNodes();
  ASSERT_EQ(Place("p", "uid-p", {{kMig, "1"}}, "gpu-node-a"), "");
  rapidjson::Document doc = Json(service_->DebugStateJson());
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(doc["nodes"].GetInt(), 2);
  EXPECT_EQ(doc["pods"].GetInt(), 1);
  EXPECT_EQ(doc["audit"]["oversubscribed_units"].GetInt(), 0);
  EXPECT_EQ(doc["audit"]["multi_owner_units"].GetInt(), 0);
  EXPECT_EQ(doc["audit"]["over_quota_projects"].GetInt(), 0);

  std::vector<std::string> ids;
  int held = 0;
  for (const auto& u : doc["units"].GetArray()) {
    ids.push_back(u["id"].GetString());
    EXPECT_TRUE(absl::StartsWith(ids.back(), absl::StrCat(u["node"].GetString(), "/",
                                                          u["resource"].GetString(), "/")));
    if (u["holders"].Size() > 0) {
      ++held;
      EXPECT_STREQ(u["holders"][0].GetString(), "ml-team/p");
      EXPECT_STREQ(u["owner"].GetString(), "ml-team");
      EXPECT_STREQ(u["node"].GetString(), "gpu-node-a");
      EXPECT_EQ(u["used"].GetInt(), 1);
      EXPECT_EQ(u["capacity"].GetInt(), 1);
    } else {
      EXPECT_TRUE(u["owner"].IsNull());
    }
  }
  EXPECT_EQ(held, 1);
  // 7 slices on node a; node b advertises 2 (unusable) 1g.5gb + 1 2g.10gb + 1 3g.20gb.
  EXPECT_EQ(std::count_if(ids.begin(), ids.end(),
                          [](const std::string& id) { return absl::StartsWith(id, "gpu-node-a/"); }),
            7);
  auto prefix = [](const std::string& id) { return id.substr(0, id.rfind('/')); };
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end(), [&](const std::string& a, const std::string& b) {
    return prefix(a) < prefix(b);
  }));  // grouped by node and resource, in order

  bool found = false;
  for (const auto& p : doc["projects"].GetArray()) {
    if (std::string(p["name"].GetString()) != "ml-team") continue;
    found = true;
    EXPECT_EQ(p["units"][kMig].GetInt(), 1);
    EXPECT_EQ(p["quota"][kMig].GetInt(), -1);  // no ResourceQuota: unlimited
  }
  EXPECT_TRUE(found);
  // Deterministic: the same state prints the same text.
  EXPECT_EQ(service_->DebugStateJson(), service_->DebugStateJson());
}

// ------------------------------------------------------------------------------- concurrency

TEST_F(ExtenderServiceTest, ConcurrentFilterAndBindNeverOversubscribe) {
  LoadExampleNodes();
  constexpr int kPods = 16;
  std::vector<std::string> errors(kPods);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kPods; i += 4) {
        const std::string name = absl::StrCat("c", i);
        const std::string uid = absl::StrCat("uid-c", i);
        service_->Filter(NamesBody(PodJson(name, uid, {{kMig, "1"}}), {"gpu-node-a", "gpu-node-b"}));
        service_->Prioritize(NamesBody(PodJson(name, uid, {{kMig, "1"}}), {"gpu-node-a", "gpu-node-b"}));
        errors[static_cast<size_t>(i)] =
            Json(service_->Bind(BindBody(name, uid, "gpu-node-a")).body)["Error"].GetString();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(std::count(errors.begin(), errors.end(), ""), 7);
  EXPECT_EQ(Usage("ml-team", kMig), 7);
  const AuditReport audit = Audit();
  EXPECT_EQ(audit.oversubscribed_units, 0);
  EXPECT_TRUE(audit.problems.empty());
}

// ------------------------------------------------------------------------------- PendingPods

PodObject Pending(const std::string& name, const std::string& uid) {
  PodObject p;
  p.name = name;
  p.namespace_name = "ns";
  p.uid = uid;
  p.annotations["big"] = std::string(1000, 'x');
  return p;
}

TEST(PendingPodsTest, FindsByUidOnlyWithMatchingNameAndDropsAnnotations) {
  PendingPods pods(10);
  pods.Remember(Pending("a", "u1"));
  ASSERT_TRUE(pods.Find("u1", "ns", "a").has_value());
  EXPECT_TRUE(pods.Find("u1", "ns", "a")->annotations.empty());
  EXPECT_FALSE(pods.Find("u1", "ns", "b").has_value());    // UID of another pod
  EXPECT_FALSE(pods.Find("u2", "ns", "a").has_value());    // recreated pod, new UID
  EXPECT_TRUE(pods.Find("", "ns", "a").has_value());       // no UID given: by name
  pods.Forget("u1", "ns", "a");
  EXPECT_FALSE(pods.Find("u1", "ns", "a").has_value());
  EXPECT_EQ(pods.size(), 0u);
}

TEST(PendingPodsTest, RecreatedPodReplacesNameLookupButOldEntryStillByUid) {
  PendingPods pods(10);
  pods.Remember(Pending("a", "old"));
  pods.Remember(Pending("a", "new"));
  EXPECT_EQ(pods.Find("", "ns", "a")->uid, "new");
  pods.Forget("old", "ns", "a");
  EXPECT_EQ(pods.Find("", "ns", "a")->uid, "new");  // forgetting the old one keeps the new
  EXPECT_EQ(pods.size(), 1u);
}

TEST(PendingPodsTest, BoundedLeastRecentlyUsedEviction) {
  PendingPods pods(3);
  pods.Remember(Pending("a", "ua"));
  pods.Remember(Pending("b", "ub"));
  pods.Remember(Pending("c", "uc"));
  ASSERT_TRUE(pods.Find("ua", "ns", "a").has_value());  // a is now the most recent
  pods.Remember(Pending("d", "ud"));                      // evicts b, the least recent
  EXPECT_EQ(pods.size(), 3u);
  EXPECT_FALSE(pods.Find("ub", "ns", "b").has_value());
  EXPECT_FALSE(pods.Find("", "ns", "b").has_value());
  EXPECT_TRUE(pods.Find("ua", "ns", "a").has_value());
  EXPECT_TRUE(pods.Find("uc", "ns", "c").has_value());
  EXPECT_TRUE(pods.Find("ud", "ns", "d").has_value());
  // Remembering the same pod again refreshes, it does not duplicate.
  pods.Remember(Pending("d", "ud"));
  EXPECT_EQ(pods.size(), 3u);
}

}  // namespace
}  // namespace gse
