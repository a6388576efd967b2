// FaultCluster: see the header.
#include "tests/testing/fault_cluster.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rapidjson/document.h"
#include "testsupport/dra_test_objects.h"
#include "testsupport/json_edit.h"
#include "testsupport/paths.h"

namespace gse::testing {
namespace {

struct NodeSpec {
  const char* name;
  const char* resource;
  int64_t units;
  int64_t per_unit;  // tickets or shares per unit; 1 for exclusive
  std::map<std::string, std::string> labels;  // GPU feature discovery labels
  bool dra = false;  // devices from the DRA driver's ResourceSlice, no allocatable
};



const std::vector<NodeSpec>& Nodes() {
  static const auto* nodes = new std::vector<NodeSpec>{
      {"dgx-a", "nvidia.com/gpu", 4, 1,
       {{"nvidia.com/gpu.count", "4"}, {"nvidia.com/gpu.replicas", "1"},
        {"nvidia.com/gpu.sharing-strategy", "none"}}},
      {"mig-x", "nvidia.com/mig-1g.5gb", 4, 1,
       {{"nvidia.com/mig.strategy", "mixed"}, {"nvidia.com/mig-1g.5gb.count", "4"},
        {"nvidia.com/mig-1g.5gb.replicas", "1"}, {"nvidia.com/mig-1g.5gb.sharing-strategy", "none"},
        {"nvidia.com/mig-1g.5gb.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}}},
      {"ts-a", "nvidia.com/mig-1g.5gb.shared", 3, 4,
       {{"nvidia.com/mig.strategy", "mixed"}, {"nvidia.com/mig-1g.5gb.count", "3"},
        {"nvidia.com/mig-1g.5gb.replicas", "4"}, {"nvidia.com/mig-1g.5gb.sharing-strategy", "time-slicing"},
        {"nvidia.com/mig-1g.5gb.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"}}},
      {"ts-b", "nvidia.com/mig-1g.5gb.shared", 3, 4,
       {{"nvidia.com/mig.strategy", "mixed"}, {"nvidia.com/mig-1g.5gb.count", "3"},
        {"nvidia.com/mig-1g.5gb.replicas", "4"}, {"nvidia.com/mig-1g.5gb.sharing-strategy", "time-slicing"},
        {"nvidia.com/mig-1g.5gb.product", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"}}},
      {"mps-a", "nvidia.com/gpu.mps", 2, 4,
       {{"nvidia.com/gpu.count", "2"}, {"nvidia.com/gpu.replicas", "4"},
        {"nvidia.com/gpu.sharing-strategy", "mps"}}},
      {"dra-m", "nvidia.com/mig-1g.5gb", 4, 1, {}, true},
      {"dra-g", "nvidia.com/gpu.shared", 2, 4, {}, true},
  };
  return *nodes;
}

const NodeSpec* FindNode(const std::string& name) {
  for (const NodeSpec& n : Nodes()) {
    if (name == n.name) return &n;
  }
  return nullptr;
}

// Initial ResourceQuota hard values per namespace (tickets for the time-sliced offering).
const std::map<std::string, std::map<std::string, int64_t>>& InitialQuotas() {
  static const auto* q = new std::map<std::string, std::map<std::string, int64_t>>{
      {"alpha", {{"nvidia.com/mig-1g.5gb.shared", 8}, {"nvidia.com/gpu", 2},
                 {"nvidia.com/mig-1g.5gb", 2}, {"nvidia.com/gpu.mps", 4},
                 {"nvidia.com/gpu.shared", 4}}},
      {"beta", {{"nvidia.com/mig-1g.5gb.shared", 8}, {"nvidia.com/gpu", 2},
                {"nvidia.com/mig-1g.5gb", 1}, {"nvidia.com/gpu.mps", 4}}},
      {"lab", {{"nvidia.com/mig-1g.5gb.shared", 4}, {"nvidia.com/mig-1g.5gb", 1}}}};
  return *q;
}

using Doc = rapidjson::Document;
using json::Obj;
using json::RemovePrefixed;
using json::Serialize;
using json::SetStr;

std::string NodeJson(const NodeSpec& spec, int64_t units) {
  static const std::string* recorded = new std::string(
      ReadFileOrDie(SharedPath("protocol/nodelist-2-gpu-nodes.json")));
  Doc list;
  list.Parse(recorded->c_str());
  Doc doc;
  doc.CopyFrom(list["items"][0], doc.GetAllocator());
  rapidjson::Value& meta = doc["metadata"];
  meta.RemoveMember("uid");
  meta.RemoveMember("resourceVersion");
  SetStr(doc, meta, "name", spec.name);
  rapidjson::Value& labels = Obj(doc, meta, "labels");
  RemovePrefixed(labels, "nvidia.com/");
  SetStr(doc, labels, "kubernetes.io/hostname", spec.name);
  SetStr(doc, labels, "nvidia.com/gpu.present", "true");
  SetStr(doc, labels, "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-40GB");
  for (const auto& [k, v] : spec.labels) SetStr(doc, labels, k, v);
  for (const char* which : {"capacity", "allocatable"}) {
    rapidjson::Value& r = Obj(doc, doc["status"], which);
    RemovePrefixed(r, "nvidia.com/");
    // A DRA node advertises no allocatable for the name: KEP-5004's per-node rule.
    if (!spec.dra) SetStr(doc, r, spec.resource, absl::StrCat(units * spec.per_unit));
  }
  return Serialize(doc);
}

// The DRA driver's devices on a DRA node, in its one slice's order (unit i is device i).
std::string DeviceName(const NodeSpec& spec, int64_t i) {
  return spec.per_unit > 1 ? absl::StrCat("gpu-", i) : DraMigDeviceName(static_cast<int>(i));
}

std::string SliceJson(const NodeSpec& spec) {
  std::vector<std::string> devices;
  for (int i = 0; i < static_cast<int>(spec.units); ++i) {
    devices.push_back(spec.per_unit > 1
                          ? DraGpuDeviceJson(spec.name, i, static_cast<int>(spec.per_unit))
                          : DraMigDeviceJson(spec.name, i));
  }
  return DraSliceJson(spec.name, absl::StrCat(spec.name, "-gpu"), 1, devices);
}

std::string QuotaJson(const std::string& ns, const std::map<std::string, int64_t>& hard) {
  std::string h;
  for (const auto& [resource, value] : hard) {
    absl::StrAppend(&h, h.empty() ? "" : ",", "\"requests.", resource, "\":\"", value, "\"");
  }
  return absl::StrCat(R"({"metadata":{"name":"gpu","namespace":")", ns, R"("},"spec":{"hard":{)", h, "}}}");
}

}  // namespace

const std::vector<AuditOffering>& FaultCluster::Offerings() {
  static const auto* offerings = new std::vector<AuditOffering>{
      {"nvidia.com/gpu", AuditSharing::kExclusive, 1},
      {"nvidia.com/mig-1g.5gb", AuditSharing::kExclusive, 1},
      {"nvidia.com/mig-1g.5gb.shared", AuditSharing::kTimeSliced, 4},
      {"nvidia.com/gpu.mps", AuditSharing::kMps, 4},
      {"nvidia.com/gpu.shared", AuditSharing::kTimeSliced, 4}};
  return *offerings;
}

const std::vector<std::string>& FaultCluster::DevicePluginNodes() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const NodeSpec& n : Nodes()) {
      if (!n.dra) v->push_back(n.name);
    }
    return v;
  }();
  return *names;
}

bool FaultCluster::IsDraNode(const std::string& node) {
  const NodeSpec* n = FindNode(node);
  return n != nullptr && n->dra;
}

std::vector<AuditDraNode> FaultCluster::DraNodes() {
  std::vector<AuditDraNode> out;
  for (const NodeSpec& n : Nodes()) {
    if (!n.dra) continue;
    AuditDraNode d{n.name, n.resource, {}, n.per_unit};
    for (int64_t i = 0; i < n.units; ++i) {
      d.devices.push_back(absl::StrCat(kDraDriver, "/", n.name, "/", DeviceName(n, i)));
    }
    out.push_back(std::move(d));
  }
  return out;
}

const std::vector<std::string>& FaultCluster::NodeNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const NodeSpec& n : Nodes()) v->push_back(n.name);
    return v;
  }();
  return *names;
}

const std::vector<std::string>& FaultCluster::Namespaces() {
  static const auto* v = new std::vector<std::string>{"alpha", "beta", "gamma", "lab", "shared"};
  return *v;
}

const std::vector<std::string>& FaultCluster::RelabelledNamespaces() {
  static const auto* v = new std::vector<std::string>{"lab", "shared"};
  return *v;
}

const std::vector<std::string>& FaultCluster::ProjectLabelValues() {
  static const auto* v = new std::vector<std::string>{"alpha", "beta", ""};
  return *v;
}

const std::vector<std::string>& FaultCluster::QuotaNamespaces() {
  static const auto* v = new std::vector<std::string>{"alpha", "beta", "lab"};
  return *v;
}

int64_t FaultCluster::FullUnits(const std::string& node) {
  const NodeSpec* n = FindNode(node);
  return n == nullptr ? 0 : n->units;
}

std::string FaultCluster::ResourceOf(const std::string& node) {
  const NodeSpec* n = FindNode(node);
  return n == nullptr ? "" : n->resource;
}

absl::Status FaultCluster::Load() {
  for (const NodeSpec& n : Nodes()) {
    if (absl::Status s = fake_->Apply("nodes", NodeJson(n, n.units)); !s.ok()) return s;
  }
  const std::map<std::string, std::string> projects = {
      {"alpha", "alpha"}, {"beta", "beta"}, {"gamma", ""}, {"lab", "alpha"}, {"shared", "beta"}};
  for (const auto& [ns, project] : projects) {
    std::string labels = absl::StrCat(R"({"kubernetes.io/metadata.name":")", ns, "\"");
    if (!project.empty()) absl::StrAppend(&labels, ",\"", kProjectLabel, "\":\"", project, "\"");
    if (absl::Status s = fake_->Apply("namespaces", absl::StrCat(R"({"metadata":{"name":")", ns,
                                                                 R"(","labels":)", labels, "}}}"));
        !s.ok()) {
      return s;
    }
  }
  for (const auto& [ns, hard] : InitialQuotas()) {
    if (absl::Status s = fake_->Apply("resourcequotas", QuotaJson(ns, hard)); !s.ok()) return s;
  }
  if (absl::Status s = fake_->ApplyFile("deviceclasses", SharedPath("protocol/dra/deviceclass-mig-1g-extended.json"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s = fake_->Apply("deviceclasses", DraSharedGpuClassJson()); !s.ok()) return s;
  for (const NodeSpec& n : Nodes()) {
    if (!n.dra) continue;
    if (absl::Status s = fake_->Apply("resourceslices", SliceJson(n)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void FaultCluster::DeleteClaimsOf(const std::string& namespace_name, const std::string& uid) {
  if (uid.empty()) return;
  for (const std::string& text : fake_->Objects("resourceclaims")) {
    Doc doc;
    doc.Parse(text.c_str());
    const rapidjson::Value* meta = json::Member(doc, "metadata");
    if (meta == nullptr || json::Str(*meta, "namespace") != namespace_name) continue;
    const rapidjson::Value* owners = json::Member(*meta, "ownerReferences");
    bool owned = false;
    if (owners != nullptr && owners->IsArray()) {
      for (const auto& o : owners->GetArray()) owned = owned || json::Str(o, "uid") == uid;
    }
    if (owned) fake_->Delete("resourceclaims", namespace_name, json::Str(*meta, "name"));
  }
}

namespace {
std::string UidOf(const std::optional<std::string>& pod) {
  if (!pod) return "";
  Doc doc;
  doc.Parse(pod->c_str());
  const rapidjson::Value* meta = json::Member(doc, "metadata");
  return meta == nullptr ? "" : json::Str(*meta, "uid");
}
}  // namespace

absl::Status FaultCluster::CreatePod(const PodPlan& pod) {
  PodSpec spec;
  spec.namespace_name = pod.namespace_name;
  spec.name = pod.name;
  if (!pod.resource.empty()) spec.requests[pod.resource] = absl::StrCat(pod.amount);
  return fake_->Apply("pods", PodJson(spec));
}

absl::Status FaultCluster::DeletePod(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string uid = UidOf(fake_->Get("pods", ns, key.substr(slash + 1)));
  if (!fake_->Delete("pods", ns, key.substr(slash + 1))) return absl::NotFoundError(key);
  DeleteClaimsOf(ns, uid);
  return absl::OkStatus();
}

absl::Status FaultCluster::RecreatePod(const std::string& key) {
  const size_t slash = key.find('/');
  std::optional<std::string> old = fake_->Get("pods", key.substr(0, slash), key.substr(slash + 1));
  if (!old) return absl::NotFoundError(key);
  Doc doc;
  doc.Parse(old->c_str());
  rapidjson::Value& meta = doc["metadata"];
  for (const char* m : {"uid", "resourceVersion", "creationTimestamp"}) meta.RemoveMember(m);
  if (meta.HasMember("annotations")) RemovePrefixed(meta["annotations"], "gpu.themelio.io/");
  doc["spec"].RemoveMember("nodeName");
  SetStr(doc, Obj(doc, doc, "status"), "phase", "Pending");
  doc["status"].RemoveMember("extendedResourceClaimStatus");
  if (absl::Status s = DeletePod(key); !s.ok()) return s;
  return fake_->Apply("pods", Serialize(doc));
}

absl::Status FaultCluster::CompletePod(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash);
  const std::string uid = UidOf(fake_->Get("pods", ns, key.substr(slash + 1)));
  if (absl::Status s = fake_->SetPodPhase(ns, key.substr(slash + 1), "Succeeded"); !s.ok()) return s;
  DeleteClaimsOf(ns, uid);
  return absl::OkStatus();
}

absl::Status FaultCluster::Relabel(const std::string& namespace_name, const std::string& project) {
  return fake_->Mutate("namespaces", "", namespace_name, [&](Doc& doc) {
    rapidjson::Value& labels = Obj(doc, Obj(doc, doc, "metadata"), "labels");
    labels.RemoveMember(kProjectLabel);
    if (!project.empty()) SetStr(doc, labels, kProjectLabel, project);
  });
}

absl::Status FaultCluster::SetQuota(const std::string& namespace_name, const std::string& resource,
                                    int64_t hard) {
  return fake_->Mutate("resourcequotas", namespace_name, "gpu", [&](Doc& doc) {
    rapidjson::Value& h = Obj(doc, Obj(doc, doc, "spec"), "hard");
    SetStr(doc, h, absl::StrCat("requests.", resource), absl::StrCat(hard));
  });
}

absl::Status FaultCluster::SetNodeUnits(const std::string& node, int64_t units) {
  const NodeSpec* spec = FindNode(node);
  if (spec == nullptr || spec->dra) return absl::NotFoundError(absl::StrCat(node, ": no device-plugin node"));
  return fake_->Mutate("nodes", "", node, [&](Doc& doc) {
    for (const char* which : {"capacity", "allocatable"}) {
      SetStr(doc, Obj(doc, Obj(doc, doc, "status"), which), spec->resource,
          absl::StrCat(std::clamp<int64_t>(units, 0, spec->units) * spec->per_unit));
    }
  });
}

std::vector<std::string> FaultCluster::BoundPods() const {
  std::vector<std::string> out;
  for (const PodView& p : fake_->Pods()) {
    if (!p.node.empty() && p.phase != "Succeeded" && p.phase != "Failed") out.push_back(p.key);
  }
  return out;  // Pods() is in key order
}

std::vector<std::string> FaultCluster::PendingPods() const {
  std::vector<std::string> out;
  for (const PodView& p : fake_->Pods()) {
    if (p.node.empty() && p.phase != "Succeeded" && p.phase != "Failed") out.push_back(p.key);
  }
  return out;
}

std::vector<std::string> FaultCluster::TerminalPods() const {
  std::vector<std::string> out;
  for (const PodView& p : fake_->Pods()) {
    if (p.phase == "Succeeded" || p.phase == "Failed") out.push_back(p.key);
  }
  return out;
}

}  // namespace gse::testing
