// Decoding of Kubernetes objects from the real bodies in shared/protocol (kube-scheduler 1.26
// extender calls, kube-apiserver 1.26 responses) and from hostile hand-made documents.
#include "state/k8s_objects.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "rapidjson/stringbuffer.h"
#include "rapidjson/writer.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::gse::testing::ReadFileOrDie;
using ::gse::testing::SharedPath;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::StartsWith;

constexpr int64_t kGi = int64_t{1} << 30;
constexpr int64_t kKi = int64_t{1} << 10;

std::string Protocol(const std::string& rel) {
  return ReadFileOrDie(SharedPath("protocol/" + rel));
}

rapidjson::Document ParseOrDie(const std::string& text) {
  rapidjson::Document doc;
  absl::Status s = ParseJsonLimited(text, doc);
  EXPECT_TRUE(s.ok()) << s;
  return doc;
}

// The message of a failed decode, or a marker that makes the expectation fail.
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& result) {
  if (result.ok()) return "<decoded without error>";
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(result.status().message());
}

absl::StatusOr<PodObject> PodFromJson(const std::string& json) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) return s;
  return DecodePod(doc, "Pod");
}

absl::StatusOr<NodeObject> NodeFromJson(const std::string& json) {
  rapidjson::Document doc;
  if (absl::Status s = ParseJsonLimited(json, doc); !s.ok()) return s;
  return DecodeNode(doc, "Node");
}

// A minimal valid pod with `extra` spliced into its spec.
std::string PodWithSpec(const std::string& spec) {
  return absl::StrCat(R"({"metadata":{"name":"p","namespace":"ns"},"spec":)", spec, "}");
}

// ---------------------------------------------------------------------------------------
// Real bodies.

TEST(RealBodiesTest, SchedulerNodeListDecodesEveryNode) {
  const rapidjson::Document doc = ParseOrDie(Protocol("nodelist-2-gpu-nodes.json"));
  const rapidjson::Value& items = doc["items"];
  ASSERT_EQ(items.Size(), 2u);
  std::vector<NodeObject> nodes;
  for (rapidjson::SizeType i = 0; i < items.Size(); ++i) {
    absl::StatusOr<NodeObject> node = DecodeNode(items[i], absl::StrCat("Nodes.items[", i, "]"));
    ASSERT_TRUE(node.ok()) << node.status();
    nodes.push_back(*std::move(node));
  }

  const NodeObject& a = nodes[0];
  EXPECT_EQ(a.name, "gpu-node-a");
  EXPECT_EQ(a.uid, "0b8a4d52-6a3e-4a54-8f4c-1d7f1f0e9a01");
  EXPECT_EQ(a.resource_version, "481977");
  EXPECT_EQ(a.labels.size(), items[0]["metadata"]["labels"].MemberCount());
  EXPECT_EQ(a.labels.at("nvidia.com/mig-1g.5gb.count"), "7");
  EXPECT_EQ(a.labels.at("nvidia.com/mig-1g.5gb.replicas"), "1");
  EXPECT_EQ(a.labels.at("nvidia.com/mig.config"), "all-1g.5gb");
  EXPECT_EQ(a.labels.at("nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-40GB");
  EXPECT_EQ(a.allocatable_milli.at("cpu"), 127500);
  EXPECT_EQ(a.allocatable_milli.at("memory"), int64_t{1055311780} * kKi * 1000);
  EXPECT_EQ(a.allocatable_milli.at("ephemeral-storage"), int64_t{1698539192723} * 1000);
  EXPECT_EQ(a.allocatable_milli.at("pods"), 110 * 1000);
  EXPECT_EQ(a.allocatable_milli.at("hugepages-1Gi"), 0);
  EXPECT_EQ(a.allocatable_milli.at("nvidia.com/mig-1g.5gb"), 7 * 1000);
  EXPECT_EQ(a.allocatable_milli.count("nvidia.com/mig-2g.10gb"), 0u);
  EXPECT_FALSE(a.unschedulable);
  ASSERT_EQ(a.taints.size(), 1u);
  EXPECT_EQ(a.taints[0].key, "nvidia.com/gpu");
  EXPECT_EQ(a.taints[0].value, "present");
  EXPECT_EQ(a.taints[0].effect, "NoSchedule");

  const NodeObject& b = nodes[1];
  EXPECT_EQ(b.name, "gpu-node-b");
  EXPECT_EQ(b.uid, "9d2e6c13-4f7b-4b0e-a2c9-7e3f5a1b2c02");
  EXPECT_EQ(b.labels.at("nvidia.com/mig-1g.5gb.count"), "2");
  EXPECT_EQ(b.labels.at("nvidia.com/mig-1g.5gb.replicas"), "2");
  EXPECT_EQ(b.labels.at("nvidia.com/mig-1g.5gb.product"),
            "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED");
  EXPECT_EQ(b.labels.at("nvidia.com/mig.config"), "all-balanced");
  EXPECT_EQ(b.allocatable_milli.at("nvidia.com/mig-1g.5gb"), 4 * 1000);
  EXPECT_EQ(b.allocatable_milli.at("nvidia.com/mig-2g.10gb"), 1 * 1000);
  EXPECT_EQ(b.allocatable_milli.at("nvidia.com/mig-3g.20gb"), 1 * 1000);
}

TEST(RealBodiesTest, PodWithMigRequest) {
  const rapidjson::Document doc = ParseOrDie(Protocol("pod-mig-1g.5gb.json"));
  absl::StatusOr<PodObject> pod = DecodePod(doc, "Pod");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->name, "cuda-infer-7d9f8b6c5-x2lqp");
  EXPECT_EQ(pod->namespace_name, "ml-team");
  EXPECT_EQ(pod->Key(), "ml-team/cuda-infer-7d9f8b6c5-x2lqp");
  EXPECT_EQ(pod->uid, "6f0c3a8e-2b1d-4c6e-9a57-0d2f4b8e1c11");
  EXPECT_EQ(pod->resource_version, "482193");
  EXPECT_THAT(pod->labels,
              ElementsAre(Pair("app", "cuda-infer"), Pair("pod-template-hash", "7d9f8b6c5")));
  EXPECT_TRUE(pod->annotations.empty());
  EXPECT_EQ(pod->node_name, "");
  EXPECT_EQ(pod->phase, "Pending");
  EXPECT_EQ(pod->scheduler_name, "default-scheduler");
  EXPECT_FALSE(pod->terminating);
  EXPECT_FALSE(pod->Terminal());
  EXPECT_TRUE(pod->node_selector.empty());
  EXPECT_TRUE(pod->init_containers.empty());
  ASSERT_EQ(pod->containers.size(), 1u);
  const ContainerResources& c = pod->containers[0];
  EXPECT_EQ(c.name, "infer");
  EXPECT_THAT(c.requests_milli, ElementsAre(Pair("cpu", 2000), Pair("memory", 4 * kGi * 1000),
                                            Pair("nvidia.com/mig-1g.5gb", 1000)));
  EXPECT_EQ(c.limits_milli, c.requests_milli);
}

TEST(RealBodiesTest, CapturedFilterRequestPodAndNodes) {
  // Both the copying and the in-situ parser must see the same objects.
  std::string text = Protocol("captured-k8s-1.26/k8s1.26-filter-request-nodecache-false.json");
  rapidjson::Document copied;
  ASSERT_TRUE(ParseJsonLimited(text, copied).ok());
  rapidjson::Document insitu;
  ASSERT_TRUE(ParseJsonInSituLimited(text.data(), text.size(), insitu).ok());

  for (const rapidjson::Document* doc : {&copied, &insitu}) {
    absl::StatusOr<PodObject> pod = DecodePod((*doc)["Pod"], "Pod");
    ASSERT_TRUE(pod.ok()) << pod.status();
    EXPECT_EQ(pod->name, "cuda-infer-2");
    EXPECT_EQ(pod->namespace_name, "ml-team");
    EXPECT_EQ(pod->uid, "a3774ec5-4cb5-4fa6-9af4-9cc72b5e2aad");
    EXPECT_EQ(pod->resource_version, "212");
    EXPECT_EQ(pod->labels.at("app"), "cuda-infer");
    // The kubectl annotation (a JSON document with escaped quotes and a newline) survives.
    const std::string& applied =
        pod->annotations.at("kubectl.kubernetes.io/last-applied-configuration");
    EXPECT_THAT(applied, StartsWith(R"({"apiVersion":"v1","kind":"Pod",)"));
    EXPECT_EQ(applied.back(), '\n');
    ASSERT_EQ(pod->containers.size(), 1u);
    EXPECT_EQ(pod->containers[0].requests_milli.at("nvidia.com/mig-1g.5gb"), 1000);
    EXPECT_EQ(pod->containers[0].limits_milli.at("memory"), 4 * kGi * 1000);

    const rapidjson::Value& items = (*doc)["Nodes"]["items"];
    ASSERT_EQ(items.Size(), 2u);
    absl::StatusOr<NodeObject> b = DecodeNode(items[0], "Nodes.items[0]");
    absl::StatusOr<NodeObject> a = DecodeNode(items[1], "Nodes.items[1]");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->name, "gpu-node-b");
    EXPECT_EQ(b->uid, "5742ebec-78ad-4ca9-9693-5f35845e94ff");
    EXPECT_EQ(b->resource_version, "208");
    EXPECT_EQ(b->labels.size(), 66u);
    EXPECT_EQ(b->labels.at("nvidia.com/mig-1g.5gb.sharing-strategy"), "time-slicing");
    EXPECT_EQ(b->allocatable_milli.at("nvidia.com/mig-1g.5gb"), 4000);
    EXPECT_EQ(b->allocatable_milli.at("nvidia.com/mig-3g.20gb"), 1000);
    EXPECT_EQ(a->name, "gpu-node-a");
    EXPECT_EQ(a->labels.size(), 40u);
    EXPECT_EQ(a->labels.at("nvidia.com/mig-1g.5gb.count"), "7");
    EXPECT_EQ(a->allocatable_milli.at("nvidia.com/mig-1g.5gb"), 7000);
    EXPECT_EQ(a->allocatable_milli.at("cpu"), 127500);
  }
}

TEST(RealBodiesTest, EveryCapturedSchedulerBodyHasADecodablePod) {
  struct Expect {
    const char* file;
    const char* pod;
    const char* uid;
  };
  const Expect expects[] = {
      {"k8s1.26-filter-request-nodecache-true.json", "cuda-infer-3",
       "7a2932cf-1232-487e-b4ff-8accbb91c1f1"},
      {"k8s1.26-prioritize-request-nodecache-false.json", "cuda-infer-2",
       "a3774ec5-4cb5-4fa6-9af4-9cc72b5e2aad"},
      {"k8s1.26-prioritize-request-nodecache-true.json", "cuda-infer-3",
       "7a2932cf-1232-487e-b4ff-8accbb91c1f1"},
      {"k8s1.26-preempt-request-nodecache-true.json", "cuda-infer-hi",
       "2e97f0e7-92e0-4191-b24b-5902e31b5f23"},
      {"k8s1.26-preempt-request-nodecache-false.json", "cuda-infer-hi2", nullptr},
  };
  for (const Expect& e : expects) {
    SCOPED_TRACE(e.file);
    const rapidjson::Document doc =
        ParseOrDie(Protocol(absl::StrCat("captured-k8s-1.26/", e.file)));
    absl::StatusOr<PodObject> pod = DecodePod(doc["Pod"], "Pod");
    ASSERT_TRUE(pod.ok()) << pod.status();
    EXPECT_EQ(pod->name, e.pod);
    EXPECT_EQ(pod->namespace_name, "ml-team");
    if (e.uid != nullptr) {
      EXPECT_EQ(pod->uid, e.uid);
    }
    EXPECT_EQ(pod->containers.at(0).requests_milli.at("nvidia.com/mig-1g.5gb"), 1000);
  }

  // Preemption with nodeCacheCapable=false sends the victims as full, bound Pods.
  const rapidjson::Document doc =
      ParseOrDie(Protocol("captured-k8s-1.26/k8s1.26-preempt-request-nodecache-false.json"));
  const rapidjson::Value& victims = doc["NodeNameToVictims"]["gpu-node-a"]["Pods"];
  ASSERT_EQ(victims.Size(), 1u);
  absl::StatusOr<PodObject> victim =
      DecodePod(victims[0], "NodeNameToVictims[\"gpu-node-a\"].Pods[0]");
  ASSERT_TRUE(victim.ok()) << victim.status();
  EXPECT_EQ(victim->name, "cuda-infer-1");
  EXPECT_EQ(victim->node_name, "gpu-node-a");
  EXPECT_EQ(victim->containers.at(0).requests_milli.at("cpu"), 2000);
}

TEST(RealBodiesTest, ApiServerNodeList) {
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(Protocol("kube-api-1.26/list-nodes.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->pods.empty());
  EXPECT_EQ(batch->ignored_objects, 0);
  ASSERT_EQ(batch->nodes.size(), 1u);
  const NodeObject& n = batch->nodes[0];
  EXPECT_EQ(n.name, "mig-a");
  EXPECT_EQ(n.uid, "72a9c7dd-3bf8-4a90-a523-2c8c0d108c68");
  EXPECT_EQ(n.resource_version, "202");
  EXPECT_EQ(n.labels.at("nvidia.com/mig-1g.5gb.count"), "7");
  EXPECT_EQ(n.labels.at("nvidia.com/mig-1g.5gb.replicas"), "4");
  EXPECT_EQ(n.labels.at("nvidia.com/mig-1g.5gb.sharing-strategy"), "time-slicing");
  EXPECT_THAT(
      n.allocatable_milli,
      ElementsAre(Pair("cpu", 64 * 1000), Pair("memory", 512 * kGi * 1000),
                  Pair("nvidia.com/mig-1g.5gb.shared", 28 * 1000), Pair("pods", 110 * 1000)));
  ASSERT_EQ(n.taints.size(), 1u);
  EXPECT_EQ(n.taints[0].key, "node.kubernetes.io/not-ready");
  EXPECT_EQ(n.taints[0].value, "");
  EXPECT_EQ(n.taints[0].effect, "NoSchedule");
}

TEST(RealBodiesTest, ApiServerPodList) {
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(Protocol("kube-api-1.26/list-pods.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->pods.size(), 1u);
  const PodObject& p = batch->pods[0];
  EXPECT_EQ(p.Key(), "team-a/nb-1");
  EXPECT_EQ(p.uid, "ff88a4c8-b864-4061-8738-bb5f0d63b1ed");
  EXPECT_EQ(p.resource_version, "210");
  EXPECT_EQ(p.labels.at("run"), "nb-1");
  EXPECT_EQ(p.node_name, "");
  EXPECT_EQ(p.phase, "Pending");
  ASSERT_EQ(p.containers.size(), 1u);
  EXPECT_EQ(p.containers[0].name, "main");
  EXPECT_THAT(p.containers[0].requests_milli,
              ElementsAre(Pair("nvidia.com/mig-1g.5gb.shared", 1000)));
  EXPECT_THAT(p.containers[0].limits_milli,
              ElementsAre(Pair("nvidia.com/mig-1g.5gb.shared", 1000)));

  absl::StatusOr<ObjectBatch> paged =
      DecodeObjects(Protocol("kube-api-1.26/list-pods-paginated-limit1.json"));
  ASSERT_TRUE(paged.ok()) << paged.status();
  EXPECT_EQ(paged->pods.size(), 1u);
}

TEST(RealBodiesTest, ApiServerNamespaceList) {
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(Protocol("kube-api-1.26/list-namespaces.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  std::vector<std::string> names;
  for (const NamespaceObject& ns : batch->namespaces) names.push_back(ns.name);
  EXPECT_THAT(names,
              ElementsAre("default", "kube-node-lease", "kube-public", "kube-system", "team-a"));
  EXPECT_THAT(batch->namespaces[4].labels,
              ElementsAre(Pair("gpu.themelio.io/project", "team-a"),
                          Pair("kubernetes.io/metadata.name", "team-a")));
}

TEST(RealBodiesTest, ApiServerResourceQuotaList) {
  absl::StatusOr<ObjectBatch> batch =
      DecodeObjects(Protocol("kube-api-1.26/list-resourcequotas.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->quotas.size(), 1u);
  EXPECT_EQ(batch->quotas[0].name, "gpu");
  EXPECT_EQ(batch->quotas[0].namespace_name, "team-a");
  EXPECT_THAT(batch->quotas[0].hard_milli,
              ElementsAre(Pair("requests.nvidia.com/mig-1g.5gb.shared", 8 * 1000)));
}

TEST(RealBodiesTest, ApiServerPodAfterBinding) {
  absl::StatusOr<ObjectBatch> batch =
      DecodeObjects(Protocol("kube-api-1.26/pod-after-binding.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->pods.size(), 1u);
  const PodObject& p = batch->pods[0];
  EXPECT_EQ(p.Key(), "team-a/nb-0");
  EXPECT_EQ(p.uid, "de697f1e-d915-473c-a8ba-f0eadff79666");
  EXPECT_EQ(p.node_name, "mig-a");
  EXPECT_EQ(p.annotations.at("gpu.themelio.io/unit"), "mig-a/nvidia.com/mig-1g.5gb.shared/0");
  EXPECT_EQ(p.annotations.size(), 2u);
  EXPECT_EQ(p.labels.at("app"), "notebook");
  EXPECT_FALSE(p.terminating);
}

TEST(RealBodiesTest, WatchEventObjectsTrackBindingAndDeletion) {
  const std::string stream = Protocol("kube-api-1.26/watch-pods-stream.jsonl");
  std::vector<PodObject> pods;
  std::vector<std::string> errors;
  size_t start = 0;
  while (start < stream.size()) {
    size_t end = stream.find('\n', start);
    if (end == std::string::npos) end = stream.size();
    const std::string line = stream.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const rapidjson::Document doc = ParseOrDie(line);
    absl::StatusOr<PodObject> pod = DecodePod(doc["object"], "object");
    if (pod.ok()) {
      pods.push_back(*std::move(pod));
    } else {
      errors.push_back(std::string(pod.status().message()));
    }
  }
  // ADDED, MODIFIED (bound), MODIFIED (deleting), DELETED; the BOOKMARK carries no name.
  ASSERT_EQ(pods.size(), 4u);
  EXPECT_THAT(errors, ElementsAre("object.metadata.name: missing"));
  EXPECT_EQ(pods[0].node_name, "");
  EXPECT_FALSE(pods[0].terminating);
  EXPECT_EQ(pods[1].resource_version, "204");
  EXPECT_EQ(pods[1].node_name, "mig-a");
  EXPECT_EQ(pods[1].annotations.at("gpu.themelio.io/unit"), "mig-a/nvidia.com/mig-1g.5gb.shared/0");
  EXPECT_FALSE(pods[1].terminating);
  EXPECT_EQ(pods[2].resource_version, "205");
  EXPECT_TRUE(pods[2].terminating);
  EXPECT_TRUE(pods[3].terminating);
}

TEST(RealBodiesTest, StatusBodiesAreIgnoredKinds) {
  absl::StatusOr<ObjectBatch> batch =
      DecodeObjects(Protocol("kube-api-1.26/binding-response-404.json"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->ignored_objects, 1);
  EXPECT_TRUE(batch->pods.empty());
}

TEST(RealBodiesTest, TruncatedBodiesAreErrorsNeverCrashes) {
  const std::string full = Protocol("kube-api-1.26/list-nodes.json");
  for (size_t cut = 0; cut + 1 < full.size(); cut += 37) {
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(absl::string_view(full).substr(0, cut));
    EXPECT_FALSE(batch.ok()) << "cut at " << cut;
  }
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"Pod")")),
            "invalid JSON at offset 13: Missing a comma or '}' after an object member.");
}

// ---------------------------------------------------------------------------------------
// Node identities noted while parsing: DecodeNodeIdentity must give the same result or the
// same error with the parser's note as without it, whatever the item looks like.

TEST(ListIdentitiesTest, CapturedIdentitiesDecodeExactlyAsTheDocumentDoes) {
  const std::vector<std::string> items = {
      R"({"metadata":{"name":"a","resourceVersion":"7","labels":{"name":"x"}},"spec":{},"status":{}})",
      R"({"status":{"name":"s"},"metadata":{"uid":"u","name":"b"}})",                 // no version
      R"({"metadata":{"name":"c","resourceVersion":null},"spec":null})",
      R"({"metadata":{"name":"d","name":"e"}})",                                      // repeated
      R"({"metadata":{"name":"f"},"metadata":{"name":"g"}})",
      R"({"metadata":{"name":null}})",
      R"({"metadata":{"name":7}})",
      R"({"metadata":{"name":"h","resourceVersion":5}})",
      R"({"metadata":null,"name":"i"})",
      R"({"metadata":["j"]})",
      R"({"metadata":{"name":"k"},"spec":"x"})",
      R"({"metadata":{"name":"l"},"status":[]})",
      R"({"metadata":{"name":"a/b"}})",                                               // bad name
      R"({"metadata":{"name":""}})",
      R"({"metadata":{"labels":{"a":{"name":"deep"}},"name":"m","uid":"u","uid":"v"}})",
      R"({"spec":{"metadata":{"name":"n"}}})",                                        // no metadata
      R"("o")",
      R"({"metadata":{"name":"p","resourceVersion":"1"}})",
  };
  const std::string list = absl::StrCat(R"({"items":[)", absl::StrJoin(items, ","), "]}");
  struct Variant {
    std::string body;
    bool usable;
  } variants[] = {
      {absl::StrCat(R"({"Pod":{},"Nodes":)", list, R"(,"NodeNames":null})"), true},
      {absl::StrCat(R"({"Nodes":)", list, R"(,"Nodes":{"items":[]}})"), false},
      {absl::StrCat(R"({"Nodes":{"items":[],"items":)", list.substr(9), "}"), false},
  };
  for (Variant& v : variants) {
    SCOPED_TRACE(v.body.substr(0, 60));
    rapidjson::Document doc;
    ListIdentities ids("Nodes");
    ASSERT_TRUE(ParseJsonInSituLimited(v.body.data(), v.body.size(), doc, nullptr, &ids).ok());
    EXPECT_EQ(ids.usable, v.usable);
    if (!v.usable) continue;
    const rapidjson::Value& parsed = doc["Nodes"]["items"];
    ASSERT_EQ(ids.items.size(), parsed.Size());
    int complete = 0;
    for (rapidjson::SizeType i = 0; i < parsed.Size(); ++i) {
      SCOPED_TRACE(items[i]);
      const absl::StatusOr<ObjectIdentity> plain = DecodeNodeIdentity(parsed[i], "it");
      const absl::StatusOr<ObjectIdentity> noted =
          DecodeNodeIdentity(parsed[i], "it", &ids.items[i]);
      ASSERT_EQ(plain.ok(), noted.ok());
      if (plain.ok()) {
        EXPECT_EQ(noted->name, plain->name);
        EXPECT_EQ(noted->resource_version, plain->resource_version);
      } else {
        EXPECT_EQ(noted.status(), plain.status());
      }
      complete += ids.items[i].complete ? 1 : 0;
    }
    // The capture is used, not bypassed: the clean items (a, b, c, bad names, m's deep name
    // is ignored but its uid repeats, p) are complete.
    EXPECT_TRUE(ids.items[0].complete);
    EXPECT_EQ(ids.items[0].name, "a");
    EXPECT_EQ(ids.items[0].resource_version, "7");
    EXPECT_TRUE(ids.items[1].complete);
    EXPECT_TRUE(ids.items[2].complete);
    EXPECT_FALSE(ids.items[3].complete);
    EXPECT_TRUE(ids.items[12].complete);  // complete; CheckName refuses it, as DecodeNode does
    EXPECT_FALSE(ids.items[14].complete);
    EXPECT_TRUE(ids.items[17].complete);
    EXPECT_EQ(complete, 6);
  }
}

// ---------------------------------------------------------------------------------------
// Hostile objects.

TEST(HostileObjectTest, TopLevelShapes) {
  EXPECT_EQ(ErrorOf(DecodeObjects("null")), "expected a JSON object at the top level, got null");
  EXPECT_EQ(ErrorOf(DecodeObjects("[]")), "expected a JSON object at the top level, got an array");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"("Pod")")),
            "expected a JSON object at the top level, got a string");
  EXPECT_EQ(ErrorOf(DecodeObjects("")), "invalid JSON at offset 0: The document is empty.");
  EXPECT_EQ(ErrorOf(DecodeObjects("{}")), "kind: missing");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":null})")), "kind: missing");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":7})")), "kind: expected a string, got a number");

  rapidjson::Document doc;
  ASSERT_TRUE(ParseJsonLimited("null", doc).ok());
  EXPECT_EQ(ErrorOf(DecodePod(doc, "Pod")), "Pod: expected an object, got null");
  EXPECT_EQ(ErrorOf(DecodeNode(doc, "Nodes.items[3]")),
            "Nodes.items[3]: expected an object, got null");
  ASSERT_TRUE(ParseJsonLimited("[]", doc).ok());
  EXPECT_EQ(ErrorOf(DecodeNamespace(doc, "ns")), "ns: expected an object, got an array");
  EXPECT_EQ(ErrorOf(DecodeResourceQuota(doc, "q")), "q: expected an object, got an array");
}

TEST(HostileObjectTest, MissingAndNullFields) {
  EXPECT_EQ(ErrorOf(PodFromJson("{}")), "Pod.metadata.name: missing");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":null})")), "Pod.metadata.name: missing");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{}})")), "Pod.metadata.name: missing");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":null,"namespace":"n"}})")),
            "Pod.metadata.name: missing");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p"}})")),
            "Pod.metadata.namespace: missing");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"ResourceQuota","metadata":{"name":"q"}})")),
            "ResourceQuota.metadata.namespace: missing");

  // null is "absent" for every optional field.
  absl::StatusOr<PodObject> pod = PodFromJson(
      R"({"metadata":{"name":"p","namespace":"n","uid":null,"labels":null,"annotations":null,)"
      R"("deletionTimestamp":null},"spec":{"nodeName":null,"containers":null,"initContainers":null,)"
      R"("nodeSelector":null},"status":null})");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->Key(), "n/p");
  EXPECT_FALSE(pod->terminating);
  EXPECT_TRUE(pod->containers.empty());
  EXPECT_EQ(pod->node_name, "");

  absl::StatusOr<NodeObject> node = NodeFromJson(
      R"({"metadata":{"name":"n"},"spec":{"unschedulable":null,"taints":null},"status":{"allocatable":null}})");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->unschedulable);
  EXPECT_TRUE(node->allocatable_milli.empty());

  // A node needs no namespace; a namespace-looking field on it is ignored.
  absl::StatusOr<NodeObject> bare = NodeFromJson(R"({"metadata":{"name":"n","namespace":7}})");
  EXPECT_TRUE(bare.ok()) << bare.status();
}

TEST(HostileObjectTest, WrongTypesNameThePath) {
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":5,"namespace":"n"}})")),
            "Pod.metadata.name: expected a string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":[]})")),
            "Pod.metadata: expected an object, got an array");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","labels":["a"]}})")),
            "Pod.metadata.labels: expected an object, got an array");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","labels":{"a":1}}})")),
            R"(Pod.metadata.labels["a"]: expected a string, got a number)");
  EXPECT_EQ(
      ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","annotations":{"a":true}}})")),
      R"(Pod.metadata.annotations["a"]: expected a string, got a boolean)");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","uid":{}}})")),
            "Pod.metadata.uid: expected a string, got an object");
  EXPECT_EQ(
      ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","deletionTimestamp":1}})")),
      "Pod.metadata.deletionTimestamp: expected a timestamp string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"("x")"))),
            "Pod.spec: expected an object, got a string");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"containers":{}})"))),
            "Pod.spec.containers: expected an array, got an object");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"containers":[{},"c"]})"))),
            "Pod.spec.containers[1]: expected an object, got a string");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"initContainers":[{"resources":[]}]})"))),
            "Pod.spec.initContainers[0].resources: expected an object, got an array");
  EXPECT_EQ(
      ErrorOf(PodFromJson(PodWithSpec(R"({"containers":[{"resources":{"requests":["1"]}}]})"))),
      "Pod.spec.containers[0].resources.requests: expected an object, got an array");
  EXPECT_EQ(
      ErrorOf(PodFromJson(PodWithSpec(R"({"containers":[{"resources":{"limits":{"cpu":2}}}]})"))),
      R"(Pod.spec.containers[0].resources.limits["cpu"]: expected a quantity string, got a number)");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"containers":[{"name":1}]})"))),
            "Pod.spec.containers[0].name: expected a string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"nodeName":1})"))),
            "Pod.spec.nodeName: expected a string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"nodeSelector":{"zone":null}})"))),
            R"(Pod.spec.nodeSelector["zone"]: expected a string, got null)");
  EXPECT_EQ(
      ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n"},"status":{"phase":[]}})")),
      "Pod.status.phase: expected a string, got an array");

  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"n"},"spec":{"unschedulable":"true"}})")),
            "Node.spec.unschedulable: expected a boolean, got a string");
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"n"},"spec":{"taints":{}}})")),
            "Node.spec.taints: expected an array, got an object");
  EXPECT_EQ(ErrorOf(NodeFromJson(
                R"({"metadata":{"name":"n"},"spec":{"taints":[{"key":"k","effect":3}]}})")),
            "Node.spec.taints[0].effect: expected a string, got a number");
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"n"},"status":{"allocatable":"8"}})")),
            "Node.status.allocatable: expected an object, got a string");
  EXPECT_EQ(
      ErrorOf(NodeFromJson(
          R"({"metadata":{"name":"n"},"status":{"allocatable":{"nvidia.com/gpu":8}}})")),
      R"(Node.status.allocatable["nvidia.com/gpu"]: expected a quantity string, got a number)");
  EXPECT_EQ(
      ErrorOf(DecodeObjects(
          R"({"kind":"ResourceQuota","metadata":{"name":"q","namespace":"n"},"spec":{"hard":[]}})")),
      "ResourceQuota.spec.hard: expected an object, got an array");
}

TEST(HostileObjectTest, BadQuantitiesNameThePathAndTheValue) {
  const std::string spec =
      R"({"containers":[{"name":"a"},{"name":"b","resources":{"requests":{"nvidia.com/gpu":"abc"}}}]})";
  EXPECT_THAT(
      ErrorOf(PodFromJson(PodWithSpec(spec))),
      StartsWith(
          R"(Pod.spec.containers[1].resources.requests["nvidia.com/gpu"]: "abc" is not a quantity)"));
  EXPECT_THAT(
      ErrorOf(NodeFromJson(
          R"({"metadata":{"name":"n"},"status":{"allocatable":{"memory":"99999999999999999999"}}})")),
      StartsWith(R"(Node.status.allocatable["memory"]: "99999999999999999999" is out of range)"));
  EXPECT_EQ(ErrorOf(NodeFromJson(
                R"({"metadata":{"name":"n"},"status":{"allocatable":{"nvidia.com/gpu":"-1"}}})")),
            R"(Node.status.allocatable["nvidia.com/gpu"]: "-1" is negative)");
  EXPECT_EQ(ErrorOf(PodFromJson(
                PodWithSpec(R"({"containers":[{"resources":{"limits":{"cpu":"-500m"}}}]})"))),
            R"(Pod.spec.containers[0].resources.limits["cpu"]: "-500m" is negative)");
  EXPECT_EQ(
      ErrorOf(DecodeObjects(R"({"kind":"ResourceQuota","metadata":{"name":"q","namespace":"n"},)"
                            R"("spec":{"hard":{"requests.nvidia.com/gpu":"-1"}}})")),
      R"(ResourceQuota.spec.hard["requests.nvidia.com/gpu"]: "-1" is negative)");
  EXPECT_THAT(
      ErrorOf(NodeFromJson(R"({"metadata":{"name":"n"},"status":{"allocatable":{"cpu":""}}})")),
      HasSubstr(R"("" is not a quantity: empty)"));
  // A huge JSON number in a field we do not read is harmless.
  EXPECT_TRUE(NodeFromJson(R"({"metadata":{"name":"n","generation":99999999999999999999}})").ok());
}

TEST(HostileObjectTest, NameRules) {
  const std::string max_name(kMaxNameBytes, 'a');
  absl::StatusOr<NodeObject> longest =
      NodeFromJson(absl::StrCat(R"({"metadata":{"name":")", max_name, R"("}})"));
  ASSERT_TRUE(longest.ok()) << longest.status();
  EXPECT_EQ(longest->name, max_name);
  EXPECT_THAT(ErrorOf(NodeFromJson(absl::StrCat(R"({"metadata":{"name":")", max_name, R"(a"}})"))),
              AllOf(StartsWith("Node.metadata.name: "), HasSubstr("is longer than 253 bytes")));
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":""}})")), "Node.metadata.name: empty");
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"a/b"}})")),
            R"(Node.metadata.name: "a/b" contains '/')");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"x/y"}})")),
            R"(Pod.metadata.namespace: "x/y" contains '/')");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":""}})")),
            "Pod.metadata.namespace: empty");
  // NUL and other control characters would corrupt keys and logs.
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"a\u0000b"}})")),
            R"(Node.metadata.name: "a\000b" contains a control character)");
  EXPECT_THAT(ErrorOf(NodeFromJson(R"({"metadata":{"name":"a\nb"}})")),
              HasSubstr("contains a control character"));
}

// The mirror identifies pods by UID and keys pods without one as "\x01namespace/name"
// (PodIdOf): a UID may be absent, but never long or with a control character inside.
TEST(HostileObjectTest, UidRules) {
  absl::StatusOr<PodObject> ok = PodFromJson(R"({"metadata":{"name":"p","namespace":"n","uid":"6f0c3a8e-2b1d"}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->uid, "6f0c3a8e-2b1d");
  EXPECT_TRUE(PodFromJson(R"({"metadata":{"name":"p","namespace":"n"}})").ok());
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"p","namespace":"n","uid":"\u0001n/p"}})")),
            R"(Pod.metadata.uid: "\001n/p" contains a control character)");
  EXPECT_THAT(ErrorOf(PodFromJson(absl::StrCat(R"({"metadata":{"name":"p","namespace":"n","uid":")",
                                               std::string(kMaxNameBytes + 1, 'u'), R"("}})"))),
              AllOf(StartsWith("Pod.metadata.uid: "), HasSubstr("is longer than 253 bytes")));
  EXPECT_EQ(UidProblem("ok-uid"), "");
  EXPECT_THAT(UidProblem(std::string("a\x7f", 2)), HasSubstr("control character"));
}

// The DRA fact sheet's pod: its status names the extended-resource claim PreBind made. The
// name is a hint (PodObject::extended_resource_claim): an unreadable one is dropped, never a
// reason to refuse the pod.
TEST(RealBodiesTest, PodStatusNamesItsExtendedResourceClaim) {
  absl::StatusOr<PodObject> pod = PodFromJson(Protocol("dra/pod-with-extended-resource-claim-status.json"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->extended_resource_claim, "cuda-infer-7d9f8b6c5-x2lqp-extended-resources-k7m2q");
  for (const char* bad : {R"(7)", R"({"resourceClaimName":7})", R"({"resourceClaimName":""})",
                          R"({"resourceClaimName":"a/b"})", R"({"resourceClaimName":"a\u0001"})"}) {
    absl::StatusOr<PodObject> p = PodFromJson(absl::StrCat(
        R"({"metadata":{"name":"p","namespace":"n"},"status":{"extendedResourceClaimStatus":)", bad,
        "}}"));
    ASSERT_TRUE(p.ok()) << bad << ": " << p.status();
    EXPECT_EQ(p->extended_resource_claim, "") << bad;
  }
  absl::StatusOr<PodObject> longer = PodFromJson(absl::StrCat(
      R"({"metadata":{"name":"p","namespace":"n"},"status":{"extendedResourceClaimStatus":)",
      R"({"resourceClaimName":")", std::string(kMaxNameBytes + 1, 'c'), R"("}}})"));
  ASSERT_TRUE(longer.ok());
  EXPECT_EQ(longer->extended_resource_claim, "");
}

// KEP-5504's rule: positive decimal integers without leading zeros, any length; anything else
// (an older server's opaque value, "0", signs, spaces) gives no order.
TEST(ResourceVersionTest, ComparesAsIntegersOfAnyLengthAndRefusesWhatIsNotOne) {
  EXPECT_EQ(CompareResourceVersions("9", "10"), -1);
  EXPECT_EQ(CompareResourceVersions("10", "9"), 1);
  EXPECT_EQ(CompareResourceVersions("123", "123"), 0);
  EXPECT_EQ(CompareResourceVersions("124", "123"), 1);
  EXPECT_EQ(CompareResourceVersions(std::string(40, '9'), "1" + std::string(40, '0')), -1)
      << "beyond 64 bits";
  for (const char* bad : {"", "0", "012", "-1", "+1", "1 ", "1a", "abc", "1.5"}) {
    EXPECT_EQ(CompareResourceVersions(bad, "5"), std::nullopt) << bad;
    EXPECT_EQ(CompareResourceVersions("5", bad), std::nullopt) << bad;
  }
}

TEST(HostileObjectTest, UnicodeAndNulInsideValues) {
  // Unicode names pass through byte for byte, escaped or literal.
  absl::StatusOr<PodObject> pod = PodFromJson(
      "{\"metadata\":{\"name\":\"\xe5\x90\x8d\xe5\x89\x8d\",\"namespace\":\"\\u00fcn\\u00efcode\","
      "\"labels\":{\"k\":\"a\\u0000b\",\"\xf0\x9f\x9a\x80\":\"rocket\"}}}");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->name, "\xe5\x90\x8d\xe5\x89\x8d");
  EXPECT_EQ(pod->namespace_name,
            "\xc3\xbcn\xc3\xaf"
            "code");
  EXPECT_EQ(pod->labels.at("k"), std::string("a\0b", 3));
  EXPECT_EQ(pod->labels.at("\xf0\x9f\x9a\x80"), "rocket");
  // A map key with a NUL is kept whole, not cut at the NUL.
  absl::StatusOr<NodeObject> node =
      NodeFromJson(R"({"metadata":{"name":"n","labels":{"a\u0000b":"v","a":"w"}}})");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->labels.size(), 2u);
  EXPECT_EQ(node->labels.at(std::string("a\0b", 3)), "v");
}

TEST(HostileObjectTest, DuplicateKeysWeReadAreErrors) {
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"Pod","kind":"Node"})")), "kind: duplicate key");
  EXPECT_EQ(ErrorOf(PodFromJson(R"({"metadata":{"name":"a","namespace":"n","name":"b"}})")),
            "Pod.metadata.name: duplicate key");
  EXPECT_EQ(
      ErrorOf(PodFromJson(R"({"metadata":{"name":"a","namespace":"n"},"metadata":{"name":"b"}})")),
      "Pod.metadata: duplicate key");
  EXPECT_EQ(ErrorOf(PodFromJson(
                R"({"metadata":{"name":"a","namespace":"n","labels":{"app":"x","app":"y"}}})")),
            R"(Pod.metadata.labels["app"]: duplicate key)");
  EXPECT_EQ(ErrorOf(NodeFromJson(
                R"({"metadata":{"name":"n"},"status":{"allocatable":{"cpu":"1","cpu":"2"}}})")),
            R"(Node.status.allocatable["cpu"]: duplicate key)");
  // Even a null duplicate is ambiguous.
  EXPECT_EQ(
      ErrorOf(PodFromJson(R"({"metadata":{"name":"a","namespace":"n","uid":"u","uid":null}})")),
      "Pod.metadata.uid: duplicate key");
  // Duplicates among fields we ignore do not matter.
  absl::StatusOr<PodObject> pod =
      PodFromJson(R"({"metadata":{"name":"a","namespace":"n","x":1,"x":2}})");
  EXPECT_TRUE(pod.ok()) << pod.status();
}

TEST(HostileObjectTest, UnknownFieldsAreIgnored) {
  absl::StatusOr<NodeObject> node = NodeFromJson(
      R"({"kind":"Node","whatever":[1,{"a":null}],"metadata":{"name":"n","finalizers":7},)"
      R"("spec":{"podCIDR":5,"unschedulable":true,"taints":[{"key":"k","value":"v","effect":"NoExecute","timeAdded":1}]},)"
      R"("status":{"capacity":{"cpu":"bogus"},"allocatable":{"nvidia.com/gpu":"8"}}})");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->unschedulable);
  ASSERT_EQ(node->taints.size(), 1u);
  EXPECT_EQ(node->taints[0].effect, "NoExecute");
  EXPECT_THAT(node->allocatable_milli, ElementsAre(Pair("nvidia.com/gpu", 8000)));
}

TEST(HostileObjectTest, InitContainerRestartPolicyMarksASidecar) {
  absl::StatusOr<PodObject> pod = PodFromJson(
      R"({"metadata":{"name":"p","namespace":"n"},"spec":{"initContainers":[)"
      R"({"name":"proxy","restartPolicy":"Always"},{"name":"setup"},)"
      R"({"name":"odd","restartPolicy":"OnFailure"},{"name":"nulled","restartPolicy":null}],)"
      R"("containers":[{"name":"main","restartPolicy":"Always"}]}})");
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->init_containers.size(), 4u);
  EXPECT_TRUE(pod->init_containers[0].restartable);
  EXPECT_FALSE(pod->init_containers[1].restartable);
  EXPECT_FALSE(pod->init_containers[2].restartable);
  EXPECT_FALSE(pod->init_containers[3].restartable);
  EXPECT_FALSE(pod->containers[0].restartable) << "an app container is never a sidecar";
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"initContainers":[{"restartPolicy":1}]})"))),
            "Pod.spec.initContainers[0].restartPolicy: expected a string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(
                R"({"initContainers":[{"restartPolicy":"Always","restartPolicy":"Always"}]})"))),
            "Pod.spec.initContainers[0].restartPolicy: duplicate key");
}

TEST(HostileObjectTest, PodSpecDetails) {
  absl::StatusOr<PodObject> pod = PodFromJson(
      R"({"metadata":{"name":"p","namespace":"n","deletionTimestamp":"2026-11-29T09:52:03Z"},)"
      R"("spec":{"nodeName":"node-1","schedulerName":"gpu","nodeSelector":{"zone":"a"},)"
      R"("initContainers":[{"name":"init","resources":{"requests":{"nvidia.com/gpu":"2"}}}],)"
      R"("containers":[{"name":"main","resources":{"limits":{"nvidia.com/gpu":"1"}}}]},)"
      R"("status":{"phase":"Succeeded"}})");
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_TRUE(pod->terminating);
  EXPECT_TRUE(pod->Terminal());
  EXPECT_EQ(pod->node_name, "node-1");
  EXPECT_EQ(pod->scheduler_name, "gpu");
  EXPECT_THAT(pod->node_selector, ElementsAre(Pair("zone", "a")));
  ASSERT_EQ(pod->init_containers.size(), 1u);
  EXPECT_EQ(pod->init_containers[0].name, "init");
  EXPECT_THAT(pod->init_containers[0].requests_milli, ElementsAre(Pair("nvidia.com/gpu", 2000)));
  ASSERT_EQ(pod->containers.size(), 1u);
  EXPECT_TRUE(pod->containers[0].requests_milli.empty());
  EXPECT_THAT(pod->containers[0].limits_milli, ElementsAre(Pair("nvidia.com/gpu", 1000)));
}

// Required node affinity as kubectl writes it: terms ORed, each with matchExpressions (kept)
// and matchFields (not kept); preferred terms and pod (anti-)affinity are not read.
TEST(HostileObjectTest, RequiredNodeAffinityTermsAreKept) {
  absl::StatusOr<PodObject> pod = PodFromJson(PodWithSpec(
      R"({"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[)"
      R"({"matchExpressions":[{"key":"nvidia.com/gpu.product","operator":"In","values":["A","B"]},)"
      R"({"key":"zone","operator":"Exists"}]},)"
      R"({"matchFields":[{"key":"metadata.name","operator":"In","values":["n-1"]}]}]},)"
      R"("preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1,"preference":{}}]},)"
      R"("podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"k"}]}}})"));
  ASSERT_TRUE(pod.ok()) << pod.status();
  ASSERT_EQ(pod->required_node_terms.size(), 2u);
  ASSERT_EQ(pod->required_node_terms[0].size(), 2u);
  EXPECT_EQ(pod->required_node_terms[0][0].key, "nvidia.com/gpu.product");
  EXPECT_EQ(pod->required_node_terms[0][0].op, "In");
  EXPECT_THAT(pod->required_node_terms[0][0].values, ElementsAre("A", "B"));
  EXPECT_EQ(pod->required_node_terms[0][1].op, "Exists");
  EXPECT_TRUE(pod->required_node_terms[0][1].values.empty());
  EXPECT_TRUE(pod->required_node_terms[1].empty()) << "a matchFields-only term restricts no label";

  for (const char* absent : {R"({"affinity":null})", R"({"affinity":{}})",
                             R"({"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":null}}})"}) {
    absl::StatusOr<PodObject> p = PodFromJson(PodWithSpec(absent));
    ASSERT_TRUE(p.ok()) << absent << ": " << p.status();
    EXPECT_TRUE(p->required_node_terms.empty()) << absent;
  }
}

TEST(HostileObjectTest, MalformedNodeAffinityNamesTheField) {
  auto with_terms = [](const std::string& terms) {
    return PodWithSpec(absl::StrCat(
        R"({"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":)",
        terms, "}}}}"));
  };
  const std::string required = "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"affinity":[]})"))),
            "Pod.spec.affinity: expected an object, got an array");
  EXPECT_EQ(ErrorOf(PodFromJson(PodWithSpec(R"({"affinity":{"nodeAffinity":"x"}})"))),
            "Pod.spec.affinity.nodeAffinity: expected an object, got a string");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms("{}"))),
            required + ".nodeSelectorTerms: expected an array, got an object");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms("[1]"))),
            required + ".nodeSelectorTerms[0]: expected an object, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms(R"([{"matchExpressions":[{"key":"k","operator":"In","values":"A"}]}])"))),
            required + ".nodeSelectorTerms[0].matchExpressions[0].values: expected an array, got a string");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms(R"([{"matchExpressions":[{"key":"k","operator":"In","values":["A",2]}]}])"))),
            required + ".nodeSelectorTerms[0].matchExpressions[0].values[1]: expected a string, got a number");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms(R"([{"matchExpressions":[{"key":7}]}])"))),
            required + ".nodeSelectorTerms[0].matchExpressions[0].key: expected a string, got a number");
  // Oversized: a hostile body costs a bounded amount.
  std::vector<std::string> terms(kMaxNodeSelectorTerms + 1, "{}");
  EXPECT_EQ(ErrorOf(PodFromJson(with_terms(absl::StrCat("[", absl::StrJoin(terms, ","), "]")))),
            absl::StrCat(required, ".nodeSelectorTerms: ", kMaxNodeSelectorTerms + 1, " nodeSelectorTerms, at most ",
                         kMaxNodeSelectorTerms));
  std::vector<std::string> values(kMaxRequirementValues + 1, R"("v")");
  EXPECT_THAT(ErrorOf(PodFromJson(with_terms(absl::StrCat(R"([{"matchExpressions":[{"key":"k","operator":"In","values":[)",
                                                          absl::StrJoin(values, ","), "]}]}]")))),
              HasSubstr("matchExpressions[0].values: 1025 values, at most 1024"));
}

// ---------------------------------------------------------------------------------------
// Documents with several objects.

constexpr char kNodeItem[] = R"({"kind":"Node","metadata":{"name":"n1"}})";
constexpr char kPodItem[] = R"({"kind":"Pod","metadata":{"name":"p1","namespace":"ns"}})";

TEST(DecodeObjectsTest, MixedListKeepsDocumentOrderPerKind) {
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(absl::StrCat(
      R"({"kind":"List","apiVersion":"v1","items":[)", kNodeItem, ",", kPodItem,
      R"(,{"kind":"Service","metadata":{"name":"svc"}},)"
      R"({"kind":"Namespace","metadata":{"name":"ns","labels":{"gpu.themelio.io/project":"p"}}},)"
      R"({"kind":"ResourceQuota","metadata":{"name":"q","namespace":"ns"},"spec":{"hard":{"requests.nvidia.com/gpu":"4"}}},)"
      R"({"kind":"Node","metadata":{"name":"n2"}},{"kind":"ConfigMap"}]})"));
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->nodes.size(), 2u);
  EXPECT_EQ(batch->nodes[0].name, "n1");
  EXPECT_EQ(batch->nodes[1].name, "n2");
  ASSERT_EQ(batch->pods.size(), 1u);
  EXPECT_EQ(batch->pods[0].Key(), "ns/p1");
  ASSERT_EQ(batch->namespaces.size(), 1u);
  EXPECT_EQ(batch->namespaces[0].labels.at("gpu.themelio.io/project"), "p");
  ASSERT_EQ(batch->quotas.size(), 1u);
  EXPECT_EQ(batch->quotas[0].hard_milli.at("requests.nvidia.com/gpu"), 4000);
  // Unknown kinds are counted even when they would not decode as one of ours.
  EXPECT_EQ(batch->ignored_objects, 2);
}

TEST(DecodeObjectsTest, TypedListsLendTheirKindToItems) {
  absl::StatusOr<ObjectBatch> pods =
      DecodeObjects(R"({"kind":"PodList","items":[{"metadata":{"name":"a","namespace":"n"}},)"
                    R"({"kind":"Pod","metadata":{"name":"b","namespace":"n"}}]})");
  ASSERT_TRUE(pods.ok()) << pods.status();
  EXPECT_EQ(pods->pods.size(), 2u);
  absl::StatusOr<ObjectBatch> nodes =
      DecodeObjects(R"({"kind":"NodeList","items":[{"metadata":{"name":"a"}}]})");
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->nodes.size(), 1u);
  absl::StatusOr<ObjectBatch> empty = DecodeObjects(R"({"kind":"NamespaceList","items":null})");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_TRUE(empty->namespaces.empty());
  absl::StatusOr<ObjectBatch> quotas = DecodeObjects(
      R"({"kind":"ResourceQuotaList","items":[{"metadata":{"name":"q","namespace":"n"}}]})");
  ASSERT_TRUE(quotas.ok()) << quotas.status();
  EXPECT_EQ(quotas->quotas.size(), 1u);
}

TEST(DecodeObjectsTest, ListErrors) {
  EXPECT_EQ(ErrorOf(DecodeObjects(absl::StrCat(R"({"kind":"List","items":[)", kNodeItem,
                                               R"(,{"metadata":{"name":"x"}}]})"))),
            "items[1].kind: missing");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"List","items":[{"kind":""}]})")),
            "items[0].kind: empty");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"List","items":[{"kind":5}]})")),
            "items[0].kind: expected a string, got a number");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"List","items":[{"kind":"PodList","items":[]}]})")),
            R"(items[0].kind: "PodList" lists may not be nested)");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"List","items":{}})")),
            "items: expected an array, got an object");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"PodList","items":[null]})")),
            "items[0]: expected an object, got null");
  EXPECT_EQ(ErrorOf(DecodeObjects(
                R"({"kind":"NodeList","items":[{"metadata":{"name":"a"}},{"metadata":{}}]})")),
            "items[1].metadata.name: missing");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"NodeList","items":[{"metadata":{"name":"a"},)"
                                  R"("status":{"allocatable":{"nvidia.com/gpu":"-1"}}}]})")),
            R"(items[0].status.allocatable["nvidia.com/gpu"]: "-1" is negative)");
}

TEST(DecodeObjectsTest, OneBadItemFailsTheWholeBatch) {
  // All or nothing: good objects before the bad one are not returned.
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(absl::StrCat(
      R"({"kind":"List","items":[)", kNodeItem, ",", kPodItem,
      R"(,{"kind":"Pod","metadata":{"name":"bad","namespace":"ns"},"spec":{"containers":[{"resources":{"requests":{"cpu":"x"}}}]}}]})"));
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(
      std::string(batch.status().message()),
      StartsWith(
          R"(items[2].spec.containers[0].resources.requests["cpu"]: "x" is not a quantity)"));
}

TEST(DecodeObjectsTest, SingleObjectsUseTheirKindAsPathRoot) {
  absl::StatusOr<ObjectBatch> ns =
      DecodeObjects(R"({"kind":"Namespace","metadata":{"name":"team-a"}})");
  ASSERT_TRUE(ns.ok()) << ns.status();
  ASSERT_EQ(ns->namespaces.size(), 1u);
  EXPECT_EQ(ns->namespaces[0].name, "team-a");
  EXPECT_EQ(ErrorOf(DecodeObjects(R"({"kind":"Node","metadata":{"name":7}})")),
            "Node.metadata.name: expected a string, got a number");
}

// Watch event lines (the API server's watch stream, one event per line) are strict JSON too
// (issue 12, finding 7): the reflector treats a refused line as a broken stream and re-watches.
TEST(ParseWatchEventLineTest, CapturedLinesParseAndBrokenLinesNameTheOffsetOrField) {
  const std::string stream =
      ReadFileOrDie(SharedPath("protocol/kube-api-1.26/watch-pods-stream.jsonl"));
  const std::string line = stream.substr(0, stream.find('\n'));
  rapidjson::Document doc;
  std::string type;
  absl::StatusOr<const rapidjson::Value*> object = ParseWatchEventLine(line, doc, &type);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_EQ(type, "ADDED");
  EXPECT_TRUE(DecodePod(**object, "event.object").ok());

  const size_t name = line.find("\"name\":\"") + 8;
  std::string control = line;
  control.insert(name, 1, '\x1a');
  EXPECT_EQ(ErrorOf(ParseWatchEventLine(control, doc, &type)),
            absl::StrCat("invalid JSON at offset ", name, ": Unescaped control character U+001A."));
  EXPECT_EQ(ErrorOf(ParseWatchEventLine(line + "{}", doc, &type)),
            absl::StrCat("invalid JSON at offset ", line.size(),
                         ": The document root must not be followed by other values."));
  std::string utf8 = line;
  utf8[name] = '\xc0';
  EXPECT_THAT(ErrorOf(ParseWatchEventLine(utf8, doc, &type)),
              StartsWith(absl::StrCat("invalid JSON at offset ", name, ": ")));
  EXPECT_EQ(ErrorOf(ParseWatchEventLine(R"({"object":{}})", doc, &type)),
            "watch event: type: missing (or not a non-empty string)");
  EXPECT_EQ(ErrorOf(ParseWatchEventLine(R"({"type":"ADDED","object":[]})", doc, &type)),
            "watch event: object: missing (or not an object)");
  EXPECT_EQ(ErrorOf(ParseWatchEventLine("[]", doc, &type)), "watch event: must be an object");
}

// The node agent's inventory (docs/agent.md, "Published inventory") is the one annotation a
// Node keeps: its presence tells the mirror that an agent serves the node (the per-node gate).
TEST(NodeAgentInventoryTest, KeptVerbatimWhenPresent) {
  const std::string value = R"({"version":1,"resources":{}})";
  rapidjson::StringBuffer escaped;
  rapidjson::Writer<rapidjson::StringBuffer> w(escaped);
  w.String(value.c_str());
  absl::StatusOr<NodeObject> with = NodeFromJson(absl::StrCat(
      R"({"metadata":{"name":"n1","annotations":{"other":"x","gpu.themelio.io/inventory":)",
      escaped.GetString(), "}}}"));
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(with->agent_inventory.has_value());
  EXPECT_EQ(*with->agent_inventory, value);
  absl::StatusOr<NodeObject> without =
      NodeFromJson(R"({"metadata":{"name":"n1","annotations":{"other":"x"}}})");
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_FALSE(without->agent_inventory.has_value());
}

TEST(NodeAgentInventoryTest, HostileValuesNameTheAnnotation) {
  EXPECT_EQ(ErrorOf(NodeFromJson(
                R"({"metadata":{"name":"n1","annotations":{"gpu.themelio.io/inventory":{}}}})")),
            R"(Node.metadata.annotations["gpu.themelio.io/inventory"]: expected a string, got an object)");
  EXPECT_EQ(ErrorOf(NodeFromJson(R"({"metadata":{"name":"n1","annotations":[]}})")),
            "Node.metadata.annotations: expected an object, got an array");
  const std::string huge(kMaxInventoryAnnotationBytes + 1, 'x');
  EXPECT_EQ(ErrorOf(NodeFromJson(absl::StrCat(
                R"({"metadata":{"name":"n1","annotations":{"gpu.themelio.io/inventory":")", huge,
                R"("}}})"))),
            absl::StrCat(R"(Node.metadata.annotations["gpu.themelio.io/inventory"]: )",
                         kMaxInventoryAnnotationBytes + 1, " bytes, at most ",
                         kMaxInventoryAnnotationBytes));
}

}  // namespace
}  // namespace gse
