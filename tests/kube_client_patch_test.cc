// KubeClient::Patch and the local test API server's PATCH, Event and fieldSelector support
// (the calls the node agent makes): merge-patch semantics, the watch event a patch causes,
// and the errors a real kube-apiserver gives for a missing object, an unsupported patch type,
// a UID change, an Event in the wrong namespace and an unsupported field selector.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kube/kube_client.h"
#include "rapidjson/document.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::FakeApiServer;
using testing::PodJson;
using testing::PodSpec;

class KubePatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    auto client = KubeClient::Create(config);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void AddPod(const std::string& name, const std::string& node,
              std::map<std::string, std::string> annotations = {}) {
    PodSpec spec;
    spec.name = name;
    spec.node = node;
    spec.annotations = std::move(annotations);
    ASSERT_TRUE(fake_.Apply("pods", PodJson(spec)).ok());
  }
  std::map<std::string, std::string> Annotations(const std::string& key) {
    for (const auto& p : fake_.Pods()) {
      if (p.key == key) return p.annotations;
    }
    return {};
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(KubePatchTest, MergePatchSetsAndRemovesAnnotationsAndEmitsModified) {
  AddPod("p1", "node-a", {{"keep", "1"}, {"drop", "2"}});
  const std::string rv = fake_.resource_version();
  absl::StatusOr<std::string> r =
      client_->Patch("/api/v1/namespaces/team-a/pods/p1",
                     R"({"metadata":{"annotations":{"gpu.themelio.io/allocated":"MIG-1::0","drop":null}}})");
  ASSERT_TRUE(r.ok()) << r.status();
  rapidjson::Document doc;
  doc.Parse(r->c_str());
  ASSERT_FALSE(doc.HasParseError());
  EXPECT_STREQ(doc["kind"].GetString(), "Pod");
  EXPECT_STREQ(doc["metadata"]["annotations"]["gpu.themelio.io/allocated"].GetString(), "MIG-1::0");
  auto ann = Annotations("team-a/p1");
  EXPECT_EQ(ann["keep"], "1");
  EXPECT_EQ(ann.count("drop"), 0u);
  EXPECT_EQ(ann["gpu.themelio.io/allocated"], "MIG-1::0");
  // The patch is one write: a watch from before it sees one MODIFIED event.
  std::vector<std::string> types;
  WatchStopper stopper;
  absl::Status s = client_->Watch(
      absl::StrCat("/api/v1/pods?watch=1&resourceVersion=", rv, "&timeoutSeconds=1"),
      absl::Seconds(5),
      [&](absl::string_view line) {
        rapidjson::Document ev;
        ev.Parse(line.data(), line.size());
        types.push_back(ev["type"].GetString());
        return false;
      },
      &stopper);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(types, ::testing::ElementsAre("MODIFIED"));
}

TEST_F(KubePatchTest, StrategicMergePatchOfANodeAnnotation) {
  ASSERT_TRUE(fake_.Apply("nodes", R"({"metadata":{"name":"node-a"}})").ok());
  absl::StatusOr<std::string> r =
      client_->Patch("/api/v1/nodes/node-a", R"({"metadata":{"annotations":{"a":"b"}}})",
                     KubeClient::kStrategicMergePatch);
  ASSERT_TRUE(r.ok()) << r.status();
  std::optional<std::string> node = fake_.Get("nodes", "", "node-a");
  ASSERT_TRUE(node.has_value());
  EXPECT_THAT(*node, HasSubstr(R"("annotations":{"a":"b"})"));
}

TEST_F(KubePatchTest, PatchErrorsAreTheApiServersAndChangeNothing) {
  AddPod("p1", "node-a");
  const std::string before = *fake_.Get("pods", "team-a", "p1");
  // A missing object.
  absl::StatusOr<std::string> r = client_->Patch("/api/v1/namespaces/team-a/pods/ghost", "{}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 404);
  // A patch type the server does not take as a merge.
  r = client_->Patch("/api/v1/namespaces/team-a/pods/p1", R"({"metadata":{}})", "application/json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 415);
  // Not a JSON object.
  r = client_->Patch("/api/v1/namespaces/team-a/pods/p1", "[1,2]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 400);
  // Another pod's UID (a pod recreated under the same name): the UID is immutable.
  r = client_->Patch("/api/v1/namespaces/team-a/pods/p1",
                     R"({"metadata":{"uid":"not-this-pod","annotations":{"x":"y"}}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 422);
  EXPECT_THAT(KubeErrorOf(r.status()).message, HasSubstr("metadata.uid"));
  EXPECT_EQ(*fake_.Get("pods", "team-a", "p1"), before);
}

TEST_F(KubePatchTest, FieldSelectorOnNodeNameFiltersListsAndWatches) {
  AddPod("on-a", "node-a");
  AddPod("on-b", "node-b");
  AddPod("unbound", "");
  std::vector<std::string> listed;
  absl::StatusOr<std::string> rv =
      client_->List("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a", [&](const rapidjson::Value& page) {
        for (const auto& item : page["items"].GetArray()) listed.push_back(item["metadata"]["name"].GetString());
        return absl::OkStatus();
      });
  ASSERT_TRUE(rv.ok()) << rv.status();
  EXPECT_THAT(listed, ::testing::ElementsAre("on-a"));
  // Binding the unbound pod to node-a shows on node-a's watch; changes on node-b do not.
  ASSERT_TRUE(fake_.Mutate("pods", "team-a", "on-b", [](rapidjson::Document& d) {
                    d["metadata"].AddMember("labels", rapidjson::Value(rapidjson::kObjectType), d.GetAllocator());
                  }).ok());
  ASSERT_TRUE(fake_.Mutate("pods", "team-a", "unbound", [](rapidjson::Document& d) {
                    d["spec"].AddMember("nodeName", "node-a", d.GetAllocator());
                  }).ok());
  std::vector<std::string> seen;
  WatchStopper stopper;
  absl::Status s = client_->Watch(
      absl::StrCat("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a&watch=1&resourceVersion=", *rv,
                   "&timeoutSeconds=1"),
      absl::Seconds(5),
      [&](absl::string_view line) {
        rapidjson::Document ev;
        ev.Parse(line.data(), line.size());
        seen.push_back(absl::StrCat(ev["type"].GetString(), " ", ev["object"]["metadata"]["name"].GetString()));
        return true;
      },
      &stopper);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(seen, ::testing::ElementsAre("MODIFIED unbound"));
  // Selectors the server does not support are a 400, as on a real one.
  absl::StatusOr<std::string> bad = client_->Get("/api/v1/pods?fieldSelector=spec.schedulerName%3Dx");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(KubeErrorOf(bad.status()).http_code, 400);
  EXPECT_THAT(KubeErrorOf(bad.status()).message, HasSubstr("field label not supported"));
}

TEST_F(KubePatchTest, EventsAreStoredAndMustNameTheirNamespacesObject) {
  const std::string good =
      R"({"metadata":{"name":"p1.1","namespace":"team-a"},"involvedObject":{"kind":"Pod","namespace":"team-a","name":"p1"},"reason":"R","message":"m","type":"Warning"})";
  ASSERT_TRUE(client_->Post("/api/v1/namespaces/team-a/events", good).ok());
  absl::StatusOr<std::string> r = client_->Post(
      "/api/v1/namespaces/team-a/events",
      R"({"metadata":{"name":"p1.2"},"involvedObject":{"kind":"Pod","namespace":"team-b","name":"p1"}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 422);
  r = client_->Post("/api/v1/namespaces/team-a/events", R"({"involvedObject":{}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(KubeErrorOf(r.status()).http_code, 422);
  std::vector<std::string> events = fake_.Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], good);
}

}  // namespace
}  // namespace gse
