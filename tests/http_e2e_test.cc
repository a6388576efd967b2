// End to end over HTTP, as kube-scheduler drives the extender:
//  * a stream of pods from several projects goes filter -> prioritize (skipped when one node
//    passes) -> bind against a cluster built from JSON (exclusive MIG, time-sliced MIG, whole
//    GPUs, quotas that some projects hit, two-ticket pods, pods without GPUs). An independent
//    model written from DESIGN.md predicts every filter answer; at the end GET /debug/state
//    is audited for I1-I6 with the test's own accounting;
//  * 64 concurrent keep-alive clients race for the last free units of a nearly full cluster;
//  * the real binary: embedded demo cluster and example requests, SIGTERM with a request in
//    flight, flag errors, --help.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/testing/http_fixture.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

using ::gse::testing::ChildProcess;
using ::gse::testing::ChildResult;
using ::gse::testing::ExtenderBinary;
using ::gse::testing::HttpFixture;
using ::gse::testing::HttpFixtureOptions;
using ::gse::testing::PostJson;
using ::gse::testing::RawStatus;
using ::gse::testing::ReadFileOrDie;
using ::gse::testing::RunToCompletion;
using ::gse::testing::SourcePath;
using ::gse::testing::TempDir;
using ::testing::HasSubstr;

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif

constexpr char kTs[] = "nvidia.com/mig-1g.5gb.shared";  // time-sliced MIG, 4 tickets/unit
constexpr char kMig[] = "nvidia.com/mig-3g.20gb";       // exclusive MIG
constexpr char kGpu[] = "nvidia.com/gpu";               // whole GPUs
constexpr int kTickets = 4;
constexpr char kA100[] = "NVIDIA-A100-SXM4-40GB";
constexpr char kH100[] = "NVIDIA-H100-80GB-HBM3";
constexpr char kGhost[] = "ghost-node";  // named by the scheduler, unknown to the mirror

rapidjson::Document Parse(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str(), json.size());
  EXPECT_FALSE(doc.HasParseError()) << json.substr(0, 300);
  return doc;
}

// ----------------------------------------------------------------------- cluster JSON

// A Node as GPU feature discovery labels it (label keys under the un-renamed resource name;
// the time-sliced MIG resource is advertised renamed to ".shared").
struct NodeSpec {
  std::string name;
  std::string product;
  std::string resource;  // as the catalog names it
  int units;
  int replicas;
};

std::string NodeJson(const NodeSpec& n) {
  const bool shared = absl::EndsWith(n.resource, ".shared");
  const std::string base = shared ? n.resource.substr(0, n.resource.size() - 7) : n.resource;
  std::map<std::string, std::string> labels = {
      {"nvidia.com/gpu.present", "true"},
      {"nvidia.com/gpu.product", n.product},
      {"nvidia.com/gpu.count", base == kGpu ? std::to_string(n.units) : "1"},
      {base + ".count", std::to_string(n.units)},
      {base + ".replicas", std::to_string(n.replicas)},
      {base + ".sharing-strategy", n.replicas > 1 ? "time-slicing" : "none"},
      {base + ".product",
       base == kGpu ? n.product : absl::StrCat(n.product, "-MIG-", base.substr(15))}};
  std::vector<std::string> pairs;
  for (const auto& [k, v] : labels) pairs.push_back(absl::StrCat("\"", k, "\":\"", v, "\""));
  return absl::StrCat(R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")", n.name,
                      R"(","uid":"uid-)", n.name, R"(","labels":{)", absl::StrJoin(pairs, ","),
                      R"(}},"status":{"allocatable":{"cpu":"64","pods":"110",")", n.resource,
                      R"(":")", n.units * n.replicas, R"("}}})");
}

std::string NamespaceJson(const std::string& name, const std::string& project) {
  return absl::StrCat(
      R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")", name, R"(","labels":{)",
      project.empty() ? "" : absl::StrCat(R"("gpu.themelio.io/project":")", project, R"(")"),
      "}}}");
}

std::string QuotaJson(const std::string& ns, const std::map<std::string, int>& hard) {
  std::vector<std::string> entries;
  for (const auto& [resource, n] : hard) {
    entries.push_back(absl::StrCat(R"("requests.)", resource, R"(":")", n, R"(")"));
  }
  return absl::StrCat(R"({"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"gpu",)"
                      R"("namespace":")",
                      ns, R"("},"spec":{"hard":{)", absl::StrJoin(entries, ","), "}}}");
}

// A pod as it appears in the scheduler's request (no kind); `resource` empty = CPU only.
std::string PodJson(const std::string& ns, const std::string& name, const std::string& resource,
                    int amount) {
  std::string gpu =
      resource.empty() ? "" : absl::StrCat(R"(,")", resource, R"(":")", amount, R"(")");
  return absl::StrCat(
      R"({"metadata":{"name":")", name, R"(","namespace":")", ns, R"(","uid":"uid-)", ns, "-", name,
      R"("},"spec":{"schedulerName":"default-scheduler","containers":[{"name":"main",)"
      R"("resources":{"requests":{"cpu":"1")",
      gpu, R"(},"limits":{"cpu":"1")", gpu, R"(}}}]},"status":{"phase":"Pending"}})");
}

// A running pod holding unit `unit` of `resource` on `node`, as a snapshot lists it.
std::string BoundPodJson(const std::string& ns, const std::string& name,
                         const std::string& resource, const std::string& node, int unit) {
  return absl::StrCat(
      R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":")", name, R"(","namespace":")", ns,
      R"(","uid":"uid-)", ns, "-", name, R"(","annotations":{"gpu.themelio.io/unit":")", node, "/",
      resource, "/", unit, R"(","gpu.themelio.io/amount":"1"}},"spec":{"nodeName":")", node,
      R"(","containers":[{"name":"main","resources":{"requests":{")", resource,
      R"(":"1"},"limits":{")", resource, R"(":"1"}}}]},"status":{"phase":"Running"}})");
}

std::string ListJson(const std::vector<std::string>& items) {
  return absl::StrCat(R"({"apiVersion":"v1","kind":"List","items":[)", absl::StrJoin(items, ","),
                      "]}");
}

std::string FilterArgs(const std::string& pod, const std::vector<std::string>& nodes) {
  std::vector<std::string> quoted;
  for (const std::string& n : nodes) quoted.push_back(absl::StrCat("\"", n, "\""));
  return absl::StrCat(R"({"Pod":)", pod, R"(,"Nodes":null,"NodeNames":[)",
                      absl::StrJoin(quoted, ","), "]}");
}

std::string BindArgs(const std::string& ns, const std::string& name, const std::string& node) {
  return absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":")", ns, R"(","PodUID":"uid-)",
                      ns, "-", name, R"(","Node":")", node, R"("})");
}

// ----------------------------------------------------------------------- one scheduling cycle

struct FilterAnswer {
  std::vector<std::string> passed;
  std::map<std::string, std::string> failed;        // FailedNodes
  std::map<std::string, std::string> unresolvable;  // FailedAndUnresolvableNodes
  std::string error;
  int status = 0;
};

FilterAnswer Filter(httplib::Client& client, const std::string& args) {
  FilterAnswer a;
  httplib::Result r = PostJson(client, "/filter", args);
  if (!r) {
    a.error = "transport: " + httplib::to_string(r.error());
    return a;
  }
  a.status = r->status;
  rapidjson::Document doc = Parse(r->body);
  if (!doc.IsObject()) return a;
  if (doc["NodeNames"].IsArray()) {
    for (const auto& n : doc["NodeNames"].GetArray()) a.passed.push_back(n.GetString());
  }
  for (auto [key, out] :
       {std::pair<const char*, std::map<std::string, std::string>*>{"FailedNodes", &a.failed},
        {"FailedAndUnresolvableNodes", &a.unresolvable}}) {
    if (!doc[key].IsObject()) continue;
    for (const auto& m : doc[key].GetObject()) (*out)[m.name.GetString()] = m.value.GetString();
  }
  a.error = doc["Error"].GetString();
  return a;
}

// kube-scheduler's choice: the only node, or the best prioritize score (ties: first by name).
std::string Choose(httplib::Client& client, const std::string& pod,
                   const std::vector<std::string>& passed, int* prioritize_calls) {
  if (passed.size() == 1) return passed.front();
  ++*prioritize_calls;
  httplib::Result r = PostJson(client, "/prioritize", FilterArgs(pod, passed));
  EXPECT_TRUE(r);
  if (!r) return passed.front();
  EXPECT_EQ(r->status, 200) << r->body;
  rapidjson::Document doc = Parse(r->body);
  std::map<std::string, int64_t> scores;
  if (doc.IsArray()) {
    for (const auto& hp : doc.GetArray()) scores[hp["Host"].GetString()] = hp["Score"].GetInt64();
  }
  EXPECT_EQ(scores.size(), passed.size()) << r->body;
  std::string best;
  int64_t best_score = -1;
  for (const auto& [host, score] : scores) {  // map order: by name
    if (score > best_score) {
      best = host;
      best_score = score;
    }
  }
  return best.empty() ? passed.front() : best;
}

// Returns the bind's Error ("" = bound), or "HTTP <status>" for a non-protocol answer.
std::string Bind(httplib::Client& client, const std::string& ns, const std::string& name,
                 const std::string& node) {
  httplib::Result r = PostJson(client, "/bind", BindArgs(ns, name, node));
  if (!r) return "transport: " + httplib::to_string(r.error());
  if (r->status != 200) return absl::StrCat("HTTP ", r->status);
  rapidjson::Document doc = Parse(r->body);
  return doc.IsObject() && doc["Error"].IsString() ? doc["Error"].GetString() : "bad body";
}

// ----------------------------------------------------------------------- /debug/state audit

struct UnitView {
  std::string node, resource;
  int index = 0;
  std::vector<std::string> holders;  // pod keys
};

std::vector<UnitView> Units(httplib::Client& client, rapidjson::Document* state_out = nullptr) {
  httplib::Result r = client.Get("/debug/state");
  EXPECT_TRUE(r);
  std::vector<UnitView> units;
  if (!r) return units;
  rapidjson::Document doc = Parse(r->body);
  for (const auto& u : doc["units"].GetArray()) {
    UnitView v;
    v.node = u["node"].GetString();
    v.resource = u["resource"].GetString();
    const std::string id = u["id"].GetString();
    v.index = std::stoi(id.substr(id.rfind('/') + 1));
    for (const auto& h : u["holders"].GetArray()) v.holders.push_back(h.GetString());
    units.push_back(std::move(v));
  }
  if (state_out != nullptr) *state_out = std::move(doc);
  return units;
}

// I1, I2 and I4 from the units' holder lists alone, against the cluster the test built:
// capacity per unit from `capacity` (node, resource), projects from `project_of` (pod key).
std::vector<std::string> AuditUnits(
    const std::vector<UnitView>& units,
    const std::map<std::pair<std::string, std::string>, std::pair<int, int>>& capacity,
    const std::map<std::string, std::string>& project_of,
    const std::map<std::pair<std::string, std::string>, int>& quota_units) {
  std::vector<std::string> problems;
  std::map<std::pair<std::string, std::string>, int> units_of;  // (project, resource)
  std::map<std::string, std::string> place_of;  // pod -> node/resource (one place per pod)
  for (const UnitView& u : units) {
    const std::string id = absl::StrCat(u.node, "/", u.resource, "/", u.index);
    auto cap = capacity.find({u.node, u.resource});
    if (cap == capacity.end() || u.index >= cap->second.first) {
      if (!u.holders.empty()) problems.push_back(id + ": held unit that the cluster lacks");
      continue;
    }
    if (static_cast<int>(u.holders.size()) > cap->second.second) {
      problems.push_back(absl::StrCat("I1 ", id, ": ", u.holders.size(), " holders > capacity ",
                                      cap->second.second));
    }
    std::set<std::string> projects;
    const std::string place = absl::StrCat(u.node, "/", u.resource);
    if (std::set<std::string>(u.holders.begin(), u.holders.end()).size() != u.holders.size()) {
      problems.push_back(id + ": a pod holds two tickets of one unit");
    }
    for (const std::string& pod : u.holders) {
      // A pod may hold several exclusive units (nvidia.com/gpu: 2), all on one node.
      auto [it, fresh] = place_of.emplace(pod, place);
      if (!fresh && it->second != place) {
        problems.push_back(absl::StrCat(pod, " holds units on ", it->second, " and ", place));
      }
      auto p = project_of.find(pod);
      projects.insert(p == project_of.end() ? "?" + pod : p->second);
    }
    if (projects.size() > 1) {
      problems.push_back(absl::StrCat("I2 ", id, ": owners ", absl::StrJoin(projects, ",")));
    }
    for (const std::string& p : projects) ++units_of[{p, u.resource}];
  }
  for (const auto& [key, n] : units_of) {
    auto q = quota_units.find(key);
    if (q != quota_units.end() && n > q->second) {
      problems.push_back(absl::StrCat("I4 ", key.first, " holds ", n, " units of ", key.second,
                                      " > quota ", q->second));
    }
  }
  return problems;
}

// ----------------------------------------------------------------------- the stream test

// The test's own model of the cluster, from DESIGN.md's placement rules.
class Model {
 public:
  void AddNode(const NodeSpec& n) {
    nodes_.push_back(n);
    capacity_[{n.name, n.resource}] = {n.units, n.replicas};
  }
  void SetQuotaUnits(const std::string& project, const std::string& resource, int units) {
    quota_units_[{project, resource}] = units;
  }
  const std::map<std::pair<std::string, std::string>, std::pair<int, int>>& capacity() const {
    return capacity_;
  }
  const std::map<std::pair<std::string, std::string>, int>& quota_units() const {
    return quota_units_;
  }

  // Nodes (among `candidates`) where the pod may go, and whether quota alone blocked it.
  std::set<std::string> Feasible(const std::string& project, const std::string& resource,
                                 int amount, const std::vector<std::string>& candidates,
                                 bool* quota_blocked) const {
    std::set<std::string> out;
    *quota_blocked = false;
    const bool quota_ok =
        Usage(project, resource) + (resource == kTs ? 1 : amount) <= QuotaUnits(project, resource);
    if (resource == kTs) {
      // I3: while one of the project's units has a free ticket on a candidate, only those.
      for (const std::string& n : candidates) {
        if (OwnedFree(project, n) > 0) out.insert(n);
      }
      if (!out.empty()) return out;
    }
    for (const std::string& n : candidates) {
      auto cap = capacity_.find({n, resource});
      if (cap == capacity_.end()) continue;
      if (FreeUnits(n, resource) < (resource == kTs ? 1 : amount)) continue;
      if (!quota_ok) {
        *quota_blocked = true;
        continue;
      }
      out.insert(n);
    }
    return out;
  }

  void Place(const std::string& project, const std::string& resource, int amount,
             const std::string& node) {
    if (resource == kTs) {
      if (OwnedFree(project, node) == 0) ++owned_[{project, node}];
      ++tickets_[{project, node}];
    } else {
      used_[{node, resource}] += amount;
      usage_[{project, resource}] += amount;
    }
  }

  int Usage(const std::string& project, const std::string& resource) const {
    if (resource == kTs) {
      int units = 0;
      for (const auto& [key, n] : owned_) {
        if (key.first == project) units += n;
      }
      return units;
    }
    auto it = usage_.find({project, resource});
    return it == usage_.end() ? 0 : it->second;
  }
  // Units with a holder per (node, resource), and tickets per ts node.
  std::map<std::pair<std::string, std::string>, int> HeldUnits() const {
    std::map<std::pair<std::string, std::string>, int> out;
    for (const auto& [key, n] : used_) out[key] += n;
    for (const auto& [key, n] : owned_) out[{key.second, kTs}] += n;
    return out;
  }

 private:
  int QuotaUnits(const std::string& project, const std::string& resource) const {
    auto it = quota_units_.find({project, resource});
    return it == quota_units_.end() ? 1 << 30 : it->second;
  }
  int OwnedFree(const std::string& project, const std::string& node) const {
    auto o = owned_.find({project, node});
    auto t = tickets_.find({project, node});
    const int owned = o == owned_.end() ? 0 : o->second;
    const int tickets = t == tickets_.end() ? 0 : t->second;
    return owned * kTickets - tickets;
  }
  int FreeUnits(const std::string& node, const std::string& resource) const {
    auto cap = capacity_.find({node, resource});
    if (cap == capacity_.end()) return 0;
    int used = 0;
    if (resource == kTs) {
      for (const auto& [key, n] : owned_) {
        if (key.second == node) used += n;
      }
    } else {
      auto u = used_.find({node, resource});
      used = u == used_.end() ? 0 : u->second;
    }
    return cap->second.first - used;
  }

  std::vector<NodeSpec> nodes_;
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> capacity_;  // units, cap
  std::map<std::pair<std::string, std::string>, int> quota_units_;  // (project, resource)
  std::map<std::pair<std::string, std::string>, int> used_;         // (node, resource)
  std::map<std::pair<std::string, std::string>, int> usage_;        // (project, resource)
  std::map<std::pair<std::string, std::string>, int> owned_;        // (project, node): ts units
  std::map<std::pair<std::string, std::string>, int> tickets_;      // (project, node)
};

TEST(HttpEndToEndTest, StreamOfPodsFromSeveralProjectsKeepsEveryInvariant) {
  const std::vector<NodeSpec> nodes = {
      {"ts-1", kA100, kTs, 7, kTickets}, {"ts-2", kA100, kTs, 7, kTickets},
      {"mig-1", kA100, kMig, 2, 1},      {"mig-2", kA100, kMig, 2, 1},
      {"gpu-1", kH100, kGpu, 8, 1},      {"gpu-2", kH100, kGpu, 8, 1}};
  // namespace -> project; "eps" has no label: its own project.
  const std::vector<std::pair<std::string, std::string>> namespaces = {
      {"team-alpha", "alpha"}, {"team-beta", "beta"},   {"gamma-1", "gamma"},
      {"gamma-2", "gamma"},    {"team-delta", "delta"}, {"eps", ""}};
  // ResourceQuota hard values; time-sliced ones count tickets (units = ceil(hard / 4)).
  const std::map<std::string, std::map<std::string, int>> quotas = {
      {"team-alpha", {{kTs, 8}, {kGpu, 3}, {kMig, 1}}},
      {"team-beta", {{kTs, 6}, {kGpu, 2}}},
      {"team-delta", {{kTs, 4}, {kGpu, 0}, {kMig, 0}}}};

  Model model;
  std::vector<std::string> items;
  std::vector<std::string> candidates;
  for (const NodeSpec& n : nodes) {
    model.AddNode(n);
    items.push_back(NodeJson(n));
    candidates.push_back(n.name);
  }
  candidates.push_back(kGhost);
  std::map<std::string, std::string> project_of_ns;
  for (const auto& [ns, project] : namespaces) {
    items.push_back(NamespaceJson(ns, project));
    project_of_ns[ns] = project.empty() ? ns : project;
  }
  for (const auto& [ns, hard] : quotas) {
    items.push_back(QuotaJson(ns, hard));
    for (const auto& [resource, n] : hard) {
      const int units = resource == kTs ? (n + kTickets - 1) / kTickets : n;
      model.SetQuotaUnits(project_of_ns[ns], resource, units);
    }
  }

  HttpFixtureOptions options;
  options.snapshot_json = ListJson(items);
  absl::StatusOr<std::unique_ptr<HttpFixture>> f = HttpFixture::Start(std::move(options));
  ASSERT_TRUE(f.ok()) << f.status();
  auto client = (*f)->NewClient();

  enum Kind { kTicket, kTwoTickets, kMigSlice, kOneGpu, kTwoGpus, kCpuOnly };
  const std::vector<std::pair<Kind, int>> weights = {{kTicket, 45},    {kMigSlice, 15},
                                                     {kOneGpu, 20},    {kTwoGpus, 8},
                                                     {kTwoTickets, 6}, {kCpuOnly, 6}};
  std::vector<double> kind_weights;
  for (const auto& [kind, weight] : weights) kind_weights.push_back(weight);
  std::mt19937 rng(20261129);
  std::discrete_distribution<int> pick_kind(kind_weights.begin(), kind_weights.end());
  std::uniform_int_distribution<size_t> pick_ns(0, namespaces.size() - 1);

  std::map<std::string, std::string> project_of_pod;  // pod key -> project
  std::set<std::string> bound_gpu_pods;
  std::map<std::string, int> rejected;  // reason -> pods
  int prioritize_calls = 0, single_node_cycles = 0;
  const int kPods = 300;
  for (int i = 0; i < kPods; ++i) {
    const Kind kind = weights[static_cast<size_t>(pick_kind(rng))].first;
    const std::string ns = namespaces[pick_ns(rng)].first;
    const std::string project = project_of_ns[ns];
    const std::string name = absl::StrCat("pod-", i);
    const std::string key = absl::StrCat(ns, "/", name);
    std::string resource;
    int amount = 1;
    switch (kind) {
      case kTicket:
        resource = kTs;
        break;
      case kTwoTickets:
        resource = kTs;
        amount = 2;
        break;
      case kMigSlice:
        resource = kMig;
        break;
      case kOneGpu:
        resource = kGpu;
        break;
      case kTwoGpus:
        resource = kGpu;
        amount = 2;
        break;
      case kCpuOnly:
        break;
    }
    SCOPED_TRACE(absl::StrCat(key, " (", project, ") asks ", amount, " x ",
                              resource.empty() ? "no GPU" : resource));
    const std::string pod = PodJson(ns, name, resource, amount);
    const FilterAnswer answer = Filter(*client, FilterArgs(pod, candidates));
    ASSERT_EQ(answer.status, 200);
    ASSERT_EQ(answer.error, "");
    const std::set<std::string> passed(answer.passed.begin(), answer.passed.end());
    ASSERT_EQ(passed.size() + answer.failed.size() + answer.unresolvable.size(), candidates.size());

    if (kind == kCpuOnly) {
      // I6: nothing of ours asked: every node passes, known or not.
      EXPECT_EQ(passed, std::set<std::string>(candidates.begin(), candidates.end()));
      EXPECT_EQ(Bind(*client, ns, name, "gpu-1"), "");
      continue;
    }
    // I6: a node the mirror does not know is failed with a reason, never guessed at.
    EXPECT_EQ(answer.unresolvable.count(kGhost), 1u);
    if (answer.unresolvable.count(kGhost) != 0) {
      EXPECT_FALSE(answer.unresolvable.at(kGhost).empty());
    }
    if (kind == kTwoTickets) {
      // I5: unresolvable everywhere, one message that says why.
      EXPECT_TRUE(passed.empty());
      EXPECT_EQ(answer.unresolvable.size(), candidates.size());
      for (const auto& [node, why] : answer.unresolvable) {
        if (node != kGhost) {
          EXPECT_THAT(why, HasSubstr("ticket")) << node;
        }
      }
      ++rejected["two tickets"];
      continue;
    }

    bool quota_blocked = false;
    const std::set<std::string> expected =
        model.Feasible(project, resource, amount, candidates, &quota_blocked);
    ASSERT_EQ(passed, expected) << "filter disagrees with the model";
    if (passed.empty()) {
      ++rejected[quota_blocked ? "quota" : "capacity"];
      if (quota_blocked) {
        bool says_quota = false;
        for (const auto& [node, why] : answer.unresolvable)
          says_quota |= absl::StrContains(why, "quota");
        for (const auto& [node, why] : answer.failed) says_quota |= absl::StrContains(why, "quota");
        EXPECT_TRUE(says_quota) << "a quota rejection should say so";
      }
      continue;
    }
    if (passed.size() == 1) ++single_node_cycles;
    const std::string node = Choose(*client, pod, answer.passed, &prioritize_calls);
    ASSERT_EQ(passed.count(node), 1u);
    ASSERT_EQ(Bind(*client, ns, name, node), "") << "bind to " << node;
    model.Place(project, resource, amount, node);
    project_of_pod[key] = project;
    bound_gpu_pods.insert(key);
  }

  // The stream exercised every path it is meant to.
  EXPECT_GE(rejected["quota"], 5);
  EXPECT_GE(rejected["capacity"], 5);
  EXPECT_GE(rejected["two tickets"], 5);
  EXPECT_GE(bound_gpu_pods.size(), 50u);
  EXPECT_GE(prioritize_calls, 10);
  EXPECT_GE(single_node_cycles, 1);

  // Independent audit of the final state.
  rapidjson::Document state;
  const std::vector<UnitView> units = Units(*client, &state);
  const std::vector<std::string> problems =
      AuditUnits(units, model.capacity(), project_of_pod, model.quota_units());
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  std::set<std::string> holders;
  std::map<std::pair<std::string, std::string>, int> held_units;
  std::map<std::string, int> partly_filled;  // project -> time-sliced units not full
  for (const UnitView& u : units) {
    for (const std::string& h : u.holders) holders.insert(h);
    if (!u.holders.empty()) ++held_units[{u.node, u.resource}];
    if (u.resource == kTs && !u.holders.empty() && u.holders.size() < kTickets) {
      ++partly_filled[project_of_pod[u.holders.front()]];
    }
  }
  // Every successful bind holds exactly one place; nothing else holds anything (I5, I6).
  EXPECT_EQ(holders, bound_gpu_pods);
  // I3: a project never opens a unit while one of its units has a free ticket, so at most
  // one of its time-sliced units is partly filled.
  for (const auto& [project, n] : partly_filled) EXPECT_LE(n, 1) << project;
  EXPECT_EQ(held_units, model.HeldUnits());
  // The service's own audit agrees.
  EXPECT_EQ(state["audit"]["oversubscribed_units"].GetInt64(), 0);
  EXPECT_EQ(state["audit"]["multi_owner_units"].GetInt64(), 0);
  EXPECT_EQ(state["audit"]["over_quota_projects"].GetInt64(), 0);
}

// ----------------------------------------------------------------------- 64 concurrent clients

TEST(HttpEndToEndTest, ConcurrentClientsNeverOversubscribeANearlyFullCluster) {
  const std::vector<NodeSpec> nodes = {
      {"ts-1", kA100, kTs, 7, kTickets}, {"ts-2", kA100, kTs, 7, kTickets},
      {"mig-1", kA100, kMig, 2, 1},      {"mig-2", kA100, kMig, 2, 1},
      {"gpu-1", kH100, kGpu, 8, 1},      {"gpu-2", kH100, kGpu, 8, 1}};
  const std::vector<std::string> projects = {"alpha", "beta", "gamma"};
  std::vector<std::string> items;
  std::map<std::pair<std::string, std::string>, std::pair<int, int>> capacity;
  std::vector<std::string> names;
  for (const NodeSpec& n : nodes) {
    items.push_back(NodeJson(n));
    capacity[{n.name, n.resource}] = {n.units, n.replicas};
    names.push_back(n.name);
  }
  for (const std::string& p : projects) items.push_back(NamespaceJson(p, p));

  // Already held: gpu 13 of 16, ts-1 units 0-5 full (gamma), ts-2 unit 0 half (alpha) and
  // units 1-6 full (beta), mig 3 of 4. Free: 3 GPUs, 1 slice, ts-1 unit 6, 2 alpha tickets.
  std::map<std::string, std::string> project_of;
  std::set<std::string> preexisting;
  int seq = 0;
  auto hold = [&](const std::string& project, const std::string& resource, const std::string& node,
                  int unit) {
    const std::string name = absl::StrCat("old-", seq++);
    items.push_back(BoundPodJson(project, name, resource, node, unit));
    project_of[absl::StrCat(project, "/", name)] = project;
    preexisting.insert(absl::StrCat(project, "/", name));
  };
  for (int u = 0; u < 8; ++u) hold("gamma", kGpu, "gpu-1", u);
  for (int u = 0; u < 5; ++u) hold("beta", kGpu, "gpu-2", u);
  for (int u = 0; u < 6; ++u) {
    for (int t = 0; t < kTickets; ++t) hold("gamma", kTs, "ts-1", u);
  }
  for (int t = 0; t < 2; ++t) hold("alpha", kTs, "ts-2", 0);
  for (int u = 1; u < 7; ++u) {
    for (int t = 0; t < kTickets; ++t) hold("beta", kTs, "ts-2", u);
  }
  hold("alpha", kMig, "mig-1", 0);
  hold("beta", kMig, "mig-2", 0);
  hold("gamma", kMig, "mig-2", 1);

  HttpFixtureOptions options;
  options.snapshot_json = ListJson(items);
  const int kClients = 64;
  options.http.threads = kClients + 8;  // one worker per keep-alive connection
  // The clients warm their connections up, then wait for each other; on a loaded machine
  // that can outlast a short keep-alive timeout, and a request racing the server's close of
  // an idle connection fails in transport (as it would for any client).
  options.http.keep_alive_timeout = absl::Seconds(120);
  absl::StatusOr<std::unique_ptr<HttpFixture>> f = HttpFixture::Start(std::move(options));
  ASSERT_TRUE(f.ok()) << f.status();
  {
    auto client = (*f)->NewClient();
    ASSERT_TRUE(AuditUnits(Units(*client), capacity, project_of, {}).empty());
  }

  const int kPodsPerClient = kTsan ? 2 : 4;
  std::mutex mu;
  std::set<std::string> bound;            // guarded by mu
  std::vector<std::string> failures;      // guarded by mu
  int bind_errors = 0, filtered_out = 0;  // guarded by mu
  std::atomic<int> ready{0};
  std::condition_variable start_cv;
  bool go = false;  // guarded by mu

  auto worker = [&](int c) {
    auto client = (*f)->NewClient();
    std::mt19937 rng(static_cast<uint32_t>(c));
    // Warm the keep-alive connection, then start together.
    httplib::Result warm = client->Get("/healthz");
    ready.fetch_add(1);
    {
      std::unique_lock<std::mutex> lock(mu);
      start_cv.wait(lock, [&] { return go; });
      if (!warm) failures.push_back("warm-up failed");
    }
    for (int i = 0; i < kPodsPerClient; ++i) {
      const std::string& project = projects[static_cast<size_t>(c) % projects.size()];
      const char* resource = (c + i) % 3 == 0 ? kTs : (c + i) % 3 == 1 ? kGpu : kMig;
      const std::string name = absl::StrCat("c", c, "-", i);
      const std::string pod = PodJson(project, name, resource, 1);
      const FilterAnswer answer = Filter(*client, FilterArgs(pod, names));
      if (answer.status != 200 || !answer.error.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back(absl::StrCat(name, ": filter ", answer.status, " ", answer.error));
        continue;
      }
      if (answer.passed.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        ++filtered_out;
        continue;
      }
      int prioritize_calls = 0;
      std::vector<std::string> passed = answer.passed;
      std::shuffle(passed.begin(), passed.end(), rng);
      const std::string node = Choose(*client, pod, passed, &prioritize_calls);
      const std::string error = Bind(*client, project, name, node);
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) {
        bound.insert(absl::StrCat(project, "/", name));
        project_of[absl::StrCat(project, "/", name)] = project;
      } else if (absl::StartsWith(error, "HTTP") || absl::StartsWith(error, "transport") ||
                 error == "bad body") {
        failures.push_back(absl::StrCat(name, ": bind answered ", error));
      } else {
        ++bind_errors;  // lost the race: a protocol Error, kube-scheduler retries
      }
    }
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) threads.emplace_back(worker, c);
  while (ready.load() < kClients) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  start_cv.notify_all();
  for (std::thread& t : threads) t.join();

  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
  auto client = (*f)->NewClient();
  rapidjson::Document state;
  const std::vector<UnitView> units = Units(*client, &state);
  const std::vector<std::string> problems = AuditUnits(units, capacity, project_of, {});
  EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "\n");
  std::set<std::string> holders;
  for (const UnitView& u : units) holders.insert(u.holders.begin(), u.holders.end());
  std::set<std::string> expected = preexisting;
  expected.insert(bound.begin(), bound.end());
  // Every successful bind holds a place, every failed one holds nothing.
  EXPECT_EQ(holders, expected);
  EXPECT_EQ(holders.size() - preexisting.size(), bound.size());
  // At most the free capacity was handed out: 3 GPUs + 1 slice + 4 + 2 tickets.
  EXPECT_LE(bound.size(), 10u);
  // The race was real: more pods wanted in than fit, and the cluster ended full.
  EXPECT_GT(bind_errors, 0) << "no bind lost a race: the test did not race";
  EXPECT_GE(bound.size(), 4u);
  EXPECT_EQ(state["audit"]["oversubscribed_units"].GetInt64(), 0);
  EXPECT_EQ(state["audit"]["multi_owner_units"].GetInt64(), 0);
  EXPECT_TRUE((*f)->WaitUntilIdle());
}

// ----------------------------------------------------------------------- the binary

std::unique_ptr<ChildProcess> StartBinary(const std::vector<std::string>& args) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(ExtenderBinary(), args);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return nullptr;
  EXPECT_TRUE((*child)->WaitForStderr("serving on", absl::Seconds(30)))
      << "no start-up banner; stderr:\n"
      << (*child)->Stderr();
  return std::move(*child);
}

TEST(HttpBinaryTest, ServesTheEmbeddedDemoClusterAndTheExampleRequests) {
  auto child = StartBinary({"--listen=127.0.0.1:0"});
  ASSERT_NE(child, nullptr);
  const int port = child->ListenPort();
  ASSERT_GT(port, 0) << child->Stderr();

  // The banner says what was loaded: count the demo file's nodes independently.
  rapidjson::Document demo = Parse(ReadFileOrDie(SourcePath("examples/demo-cluster.json")));
  int demo_nodes = 0;
  for (const auto& item : demo["items"].GetArray()) demo_nodes += item["kind"] == "Node";
  const std::string banner = child->Stderr();
  EXPECT_THAT(banner, HasSubstr(absl::StrCat("nodes: ", demo_nodes)));
  EXPECT_THAT(banner, HasSubstr("nvidia.com/mig-1g.5gb.shared"));
  EXPECT_THAT(banner, HasSubstr(absl::StrCat("serving on http://127.0.0.1:", port)));
  EXPECT_THAT(banner, HasSubstr("-d @examples/filter-request.json"));
  EXPECT_THAT(banner, ::testing::Not(HasSubstr("without a catalog resource")));

  httplib::Client client("127.0.0.1", port);
  client.set_tcp_nodelay(true);
  httplib::Result r =
      PostJson(client, "/filter", ReadFileOrDie(SourcePath("examples/filter-request.json")));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  rapidjson::Document filter = Parse(r->body);
  EXPECT_STREQ(filter["Error"].GetString(), "");
  ASSERT_TRUE(filter["NodeNames"].IsArray());
  EXPECT_GE(filter["NodeNames"].Size(), 1u) << r->body;

  r = PostJson(client, "/prioritize",
               ReadFileOrDie(SourcePath("examples/prioritize-request.json")));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(Parse(r->body).IsArray());

  r = PostJson(client, "/bind", ReadFileOrDie(SourcePath("examples/bind-request.json")));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_STREQ(Parse(r->body)["Error"].GetString(), "");

  r = client.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_THAT(r->body, HasSubstr("verb=\"bind\""));

  child->Signal(SIGINT);
  EXPECT_EQ(child->Wait(absl::Seconds(10)), std::optional<int>(0)) << child->Stderr();
}

// --default-quota: a project that no ResourceQuota names (the demo's "research" namespace) is
// unlimited by default and gets nothing with --default-quota=zero.
// A project without a ResourceQuota ("research" in the demo cluster): --default-quota decides,
// unless --quota-file gives it one.
TEST(HttpBinaryTest, DefaultQuotaAndQuotaFileDecideForProjectsWithoutResourceQuota) {
  std::string body = ReadFileOrDie(SourcePath("examples/filter-request.json"));
  body = absl::StrReplaceAll(body, {{"\"team-a\"", "\"research\""},
                                    {"nvidia.com/mig-1g.5gb.shared", "nvidia.com/gpu"}});
  TempDir dir;
  dir.Write("quotas.json", R"({"projects":{"research":{"requests.nvidia.com/gpu":"0"}}})");
  const struct {
    std::vector<std::string> flags;
    bool gets_gpus;
  } cases[] = {
      {{"--default-quota=unlimited"}, true},
      {{"--default-quota=zero"}, false},
      {{"--default-quota=unlimited", "--quota-file=" + dir.File("quotas.json")}, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(absl::StrJoin(c.flags, " "));
    std::vector<std::string> args = c.flags;
    args.push_back("--listen=127.0.0.1:0");
    auto child = StartBinary(args);
    ASSERT_NE(child, nullptr);
    httplib::Client client("127.0.0.1", child->ListenPort());
    httplib::Result r = PostJson(client, "/filter", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    rapidjson::Document filter = Parse(r->body);
    ASSERT_TRUE(filter["NodeNames"].IsArray()) << r->body;
    if (c.gets_gpus) {
      EXPECT_GE(filter["NodeNames"].Size(), 1u) << "h100 nodes have free GPUs: " << r->body;
    } else {
      EXPECT_EQ(filter["NodeNames"].Size(), 0u) << r->body;
      ASSERT_TRUE(filter["FailedAndUnresolvableNodes"].IsObject()) << r->body;
      ASSERT_TRUE(filter["FailedAndUnresolvableNodes"].HasMember("h100-1")) << r->body;
      EXPECT_STREQ(filter["FailedAndUnresolvableNodes"]["h100-1"].GetString(),
                   "project quota exhausted");
    }
    child->Signal(SIGTERM);
    EXPECT_EQ(child->Wait(absl::Seconds(10)), std::optional<int>(0)) << child->Stderr();
  }
}

TEST(HttpBinaryTest, ScoreAllPodsIsAnnouncedInTheBanner) {
  auto child = StartBinary({"--listen=127.0.0.1:0", "--policy=fgd", "--score-all-pods"});
  ASSERT_NE(child, nullptr);
  EXPECT_THAT(child->Stderr(),
              HasSubstr("policy: fgd, scores pods without a catalog resource too"));
  child->Signal(SIGTERM);
  EXPECT_EQ(child->Wait(absl::Seconds(10)), std::optional<int>(0)) << child->Stderr();
}

TEST(HttpBinaryTest, SigtermAnswersTheRequestInFlightThenExitsZero) {
  // A long keep-alive timeout: exiting must not wait for idle connections.
  auto child = StartBinary({"--listen=127.0.0.1:0", "--keep-alive-timeout=60s"});
  ASSERT_NE(child, nullptr);
  const int port = child->ListenPort();
  ASSERT_GT(port, 0);

  // An idle keep-alive connection, as kube-scheduler keeps.
  httplib::Client idle("127.0.0.1", port);
  idle.set_keep_alive(true);
  ASSERT_TRUE(idle.Get("/healthz"));

  const std::string body = ReadFileOrDie(SourcePath("examples/filter-request.json"));
  const std::string head = absl::StrCat(
      "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ",
      body.size(), "\r\n\r\n");
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  // One whole request first, so that the connection is surely accepted and has a worker.
  const std::string health = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(send(fd, health.data(), health.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(health.size()));
  std::string answer;
  char buf[4096];
  while (answer.find("\r\n\r\nok") == std::string::npos) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << answer;
    answer.append(buf, static_cast<size_t>(n));
  }
  const std::string first = head + body.substr(0, body.size() / 2);
  ASSERT_EQ(send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // headers read: in flight

  child->Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(child->Wait(absl::ZeroDuration()).has_value())
      << "exited with a request in flight; stderr:\n"
      << child->Stderr();

  const std::string rest = body.substr(body.size() / 2);
  ASSERT_EQ(send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  std::string response;
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const auto answered = std::chrono::steady_clock::now();
  EXPECT_EQ(RawStatus(response), 200) << response;
  EXPECT_THAT(response, HasSubstr("\"NodeNames\":[\""));

  EXPECT_EQ(child->Wait(absl::Seconds(10)), std::optional<int>(0)) << child->Stderr();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - answered).count();
  EXPECT_LT(seconds, 5.0) << "exit waited for the idle keep-alive connection";
  EXPECT_THAT(child->Stderr(), HasSubstr("SIGTERM received"));
  // Stopped means stopped: nobody listens any more.
  httplib::Client late("127.0.0.1", port);
  late.set_connection_timeout(1, 0);
  EXPECT_FALSE(late.Get("/healthz"));
}

TEST(HttpBinaryTest, ConfigurationErrorsExit2AndNameTheFlag) {
  TempDir dir;
  dir.Write("bad.json", "{\"kind\":\"List\",\"items\":[");
  dir.Write("bad-node.json",
            R"({"kind":"List","items":[{"kind":"Node","metadata":{},"status":{}}]})");
  dir.Write("bad-catalog.yaml", "offerings: 7\n");
  dir.Write("typo-quota.json", R"({"projects":{"research":{"requests.nvidia.com/gpux":"1"}}})");
  // Something listening on a port (plain socket, no SO_REUSEPORT): --listen must fail.
  const int busy = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  socklen_t len = sizeof addr;
  getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len);
  const int busy_port = ntohs(addr.sin_port);

  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--listen=nohost"}, {"--listen", "missing port"}},
      {{"--listen=127.0.0.1:65536"}, {"--listen", "out of range"}},
      {{"--listen=[::1:80"}, {"--listen"}},
      {{absl::StrCat("--listen=127.0.0.1:", busy_port)}, {"--listen", "cannot listen"}},
      {{"--policy=fastest"}, {"--policy", "fastest", "affinity-pack"}},
      {{"--score-all-pods=sometimes"}, {"--score-all-pods", "sometimes"}},
      {{"--threads=many"}, {"--threads"}},
      {{"--threads=-3"}, {"--threads"}},
      {{"--max-body-bytes=0"}, {"--max-body-bytes"}},
      {{"--read-timeout=-1s"}, {"--read-timeout"}},
      {{"--write-timeout=soon"}, {"--write-timeout"}},
      {{"--prefix=a b"}, {"--prefix"}},
      {{"--project-label=not a label"}, {"--project-label"}},
      {{"--default-quota=some"}, {"--default-quota", "unlimited", "zero"}},
      {{"--quota-file=/nonexistent/quotas.json"}, {"--quota-file", "/nonexistent/quotas.json"}},
      {{"--quota-file=" + dir.File("bad.json")}, {"--quota-file", "invalid JSON"}},
      {{"--quota-file=" + dir.File("typo-quota.json")},
       {"--quota-file", "requests.nvidia.com/gpux", "no catalog offering"}},
      {{"--catalog=/nonexistent/catalog.yaml"}, {"--catalog", "/nonexistent/catalog.yaml"}},
      {{"--catalog=" + dir.File("bad-catalog.yaml")}, {"--catalog", "bad-catalog.yaml"}},
      {{"--snapshot=/nonexistent/snap.json"}, {"--snapshot", "/nonexistent/snap.json"}},
      {{"--snapshot=" + dir.File("bad.json")}, {"--snapshot", "bad.json"}},
      {{"--snapshot=" + dir.File("bad-node.json")}, {"--snapshot", "items[0]"}},
      {{"--tls-cert=/nonexistent/tls.crt", "--tls-key=/nonexistent/tls.key"},
       {"--tls-cert", "/nonexistent/tls.crt"}},
      {{"--tls-cert=" + dir.File("bad.json")}, {"--tls-key"}},
      {{"--client-ca=" + dir.File("bad.json")}, {"--client-ca", "--tls-cert"}},
      // Live-cluster flags are checked standalone too: a bad value is never silently ignored.
      {{"--dra-mode=maybe"}, {"--dra-mode", "maybe", "off, on or auto"}},
      {{"--in-cluster=perhaps"}, {"--in-cluster", "perhaps"}},
      {{"--agent-heartbeat-timeout=0s"}, {"--agent-heartbeat-timeout", "1s to 1h"}},
      {{"--kube-context=prod"}, {"--kube-context needs --kubeconfig"}},
      {{"--no-such-flag=1"}, {"unknown flag --no-such-flag"}},
      {{"--listen"}, {"--listen", "needs a value"}},
      {{"stray"}, {"unexpected argument", "stray"}},
  };
  for (const auto& [args, needles] : cases) {
    SCOPED_TRACE(absl::StrJoin(args, " "));
    const ChildResult r = RunToCompletion(ExtenderBinary(), args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    for (const std::string& needle : needles) EXPECT_THAT(r.err, HasSubstr(needle));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("serving on")));
    EXPECT_LT(std::count(r.err.begin(), r.err.end(), '\n'), 3) << "one clear line";
  }
  close(busy);
}

TEST(HttpBinaryTest, HelpAndVersion) {
  ChildResult r = RunToCompletion(ExtenderBinary(), {"--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--listen", "--prefix", "--catalog", "--snapshot", "--policy",
                           "--score-all-pods", "managedResources",
                           "--threads", "--max-body-bytes", "--read-timeout", "--write-timeout",
                           "--tls-cert", "--tls-key", "--client-ca", "--project-label", "--default-quota",
                           "affinity-pack", "127.0.0.1:8888", "gpu.themelio.io/project"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
  r = RunToCompletion(ExtenderBinary(), {"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("gpu-slice-extender"));
  // Dashes and underscores name the same flag.
  r = RunToCompletion(ExtenderBinary(), {"--max_body_bytes=0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--max-body-bytes"));
}

}  // namespace
}  // namespace gse
