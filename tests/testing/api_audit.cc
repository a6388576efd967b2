// ApiAudit: the invariants from the API server's objects (see the header).
#include "tests/testing/api_audit.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "rapidjson/document.h"
#include "testsupport/json_edit.h"

namespace gse::testing {
namespace {

constexpr absl::string_view kPrefix = "gpu.themelio.io/";
constexpr char kUnit[] = "gpu.themelio.io/unit";
constexpr char kAmount[] = "gpu.themelio.io/amount";
constexpr char kProject[] = "gpu.themelio.io/project";

using json::Member;

std::string Str(const rapidjson::Value* v, const char* key) {
  return v == nullptr ? "" : json::Str(*v, key);
}

std::map<std::string, std::string> StringMap(const rapidjson::Value* v) {
  std::map<std::string, std::string> out;
  if (v == nullptr || !v->IsObject()) return out;
  for (const auto& m : v->GetObject()) {
    if (m.value.IsString()) out[m.name.GetString()] = m.value.GetString();
  }
  return out;
}

std::map<std::string, std::string> Labels(const rapidjson::Value* meta) {
  return StringMap(meta == nullptr ? nullptr : Member(*meta, "labels"));
}

// The run writes whole numbers only; anything else is a problem of the test, reported.
bool WholeNumber(const std::string& s, int64_t* out) {
  return absl::SimpleAtoi(s, out) && *out >= 0;
}

std::string UnitName(const std::string& node, const std::string& resource, int64_t index) {
  return absl::StrCat(node, "/", resource, "/", index);
}

}  // namespace

ApiAudit::ApiAudit(std::vector<AuditOffering> offerings, std::string project_label,
                   std::vector<AuditDraNode> dra_nodes)
    : project_label_(std::move(project_label)), dra_nodes_(std::move(dra_nodes)) {
  for (AuditOffering& o : offerings) {
    std::string name = o.resource;
    offerings_.emplace(std::move(name), std::move(o));
  }
}

const AuditDraNode* ApiAudit::FindDraNode(const std::string& node) const {
  for (const AuditDraNode& d : dra_nodes_) {
    if (d.node == node) return &d;
  }
  return nullptr;
}

const AuditOffering* ApiAudit::Find(const std::string& resource) const {
  auto it = offerings_.find(resource);
  return it == offerings_.end() ? nullptr : &it->second;
}

AuditFacts ApiAudit::ReadFacts(const FakeApiServer& fake) const {
  AuditFacts facts;
  for (const std::string& text : fake.Objects("nodes")) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    const rapidjson::Value* meta = Member(doc, "metadata");
    const std::string name = Str(meta, "name");
    const std::map<std::string, std::string> labels = Labels(meta);
    const rapidjson::Value* status = Member(doc, "status");
    for (const auto& [resource, quantity] :
         StringMap(status == nullptr ? nullptr : Member(*status, "allocatable"))) {
      const AuditOffering* offering = Find(resource);
      if (offering == nullptr) continue;
      int64_t allocatable = 0;
      if (!WholeNumber(quantity, &allocatable)) {
        facts.problems.push_back(absl::StrCat("node ", name, ": allocatable ", resource, "=", quantity));
        continue;
      }
      AuditFacts::NodeUnits u;
      if (offering->sharing != AuditSharing::kExclusive) {
        // GPU feature discovery labels a renamed ("<name>.shared") resource under its base name.
        absl::string_view base = resource;
        absl::ConsumeSuffix(&base, ".shared");
        u.capacity = offering->replicas;
        auto label = labels.find(absl::StrCat(base, ".replicas"));
        int64_t replicas = 0;
        if (label != labels.end() && absl::SimpleAtoi(label->second, &replicas) && replicas >= 1) {
          u.capacity = replicas;
        }
      }
      u.units = allocatable / u.capacity;
      facts.units[{name, resource}] = u;
    }
  }
  // A DRA node's units are the devices its slice publishes (the test says which), however
  // its allocatable reads.
  for (const AuditDraNode& d : dra_nodes_) {
    facts.units[{d.node, d.resource}] = {static_cast<int64_t>(d.devices.size()), d.capacity};
  }
  for (const std::string& text : fake.Objects("namespaces")) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    const rapidjson::Value* meta = Member(doc, "metadata");
    const std::map<std::string, std::string> labels = Labels(meta);
    const std::string name = Str(meta, "name");
    auto it = labels.find(project_label_);
    facts.project_of_namespace[name] = it != labels.end() && !it->second.empty() ? it->second : name;
  }
  // Kubernetes enforces every ResourceQuota of a namespace, so the tightest object of a
  // namespace applies; a project spanning namespaces gets the sum of theirs. The hard value is
  // the quota as it is: units, tickets (time-sliced) or shares.
  std::map<std::pair<std::string, std::string>, int64_t> per_namespace;  // (ns, resource)
  for (const std::string& text : fake.Objects("resourcequotas")) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    const std::string ns = Str(Member(doc, "metadata"), "namespace");
    const rapidjson::Value* spec = Member(doc, "spec");
    for (const auto& [key, value] : StringMap(spec == nullptr ? nullptr : Member(*spec, "hard"))) {
      absl::string_view resource = key;
      if (!absl::ConsumePrefix(&resource, "requests.")) continue;
      const AuditOffering* offering = Find(std::string(resource));
      if (offering == nullptr) continue;
      int64_t hard = 0;
      if (!WholeNumber(value, &hard)) {
        facts.problems.push_back(absl::StrCat("resourcequota in ", ns, ": ", key, "=", value));
        continue;
      }
      const int64_t units = hard;
      auto [it, inserted] = per_namespace.emplace(std::make_pair(ns, offering->resource), units);
      if (!inserted) it->second = std::min(it->second, units);
    }
  }
  for (const auto& [ns_resource, units] : per_namespace) {
    auto project = facts.project_of_namespace.find(ns_resource.first);
    const std::string& p = project != facts.project_of_namespace.end() ? project->second : ns_resource.first;
    facts.quota[{p, ns_resource.second}] += units;
  }
  return facts;
}

AuditSnapshot ApiAudit::Snapshot(const FakeApiServer& fake) const {
  AuditSnapshot snap;
  snap.facts = ReadFacts(fake);
  // Units of time-sliced offerings a project holds a ticket on: counted once per unit.
  std::set<std::tuple<std::string, std::string, std::string, int64_t>> owned;  // project, node, resource, index
  for (const PodView& pod : fake.Pods()) {
    if (pod.node.empty() || pod.phase == "Succeeded" || pod.phase == "Failed") continue;
    snap.bound_uids.insert(pod.uid);
    // What the pod asked for of the offerings this run knows (first container, as written).
    std::string wanted;
    int64_t wanted_amount = 0;
    for (const auto& [resource, quantity] : pod.requests) {
      if (Find(resource) == nullptr) continue;
      int64_t n = 0;
      if (WholeNumber(quantity, &n) && n > 0) {
        wanted = resource;
        wanted_amount = n;
      }
    }
    AuditHolder h;
    h.key = pod.key;
    h.uid = pod.uid;
    h.namespace_name = pod.key.substr(0, pod.key.find('/'));
    h.node = pod.node;
    for (const auto& [k, v] : pod.annotations) {
      if (absl::StartsWith(k, kPrefix)) h.annotations[k] = v;
    }
    auto unaccounted = [&](const std::string& why) {
      snap.unaccounted.emplace_back(
          pod.uid, absl::StrCat(pod.key, " (uid ", pod.uid, ", bound to ", pod.node, "): ", why,
                                "; annotations {", absl::StrJoin(h.annotations, ", ", absl::PairFormatter("=")), "}"));
    };
    auto unit = h.annotations.find(kUnit);
    if (unit == h.annotations.end()) {
      if (!wanted.empty()) unaccounted("asks for " + wanted + " but carries no " + kUnit);
      continue;
    }
    // "<node>/<resource>/<i>[,<j>...]"; the resource itself contains one '/'.
    const std::string& value = unit->second;
    const size_t first = value.find('/');
    const size_t last = value.rfind('/');
    if (first == std::string::npos || last == first) {
      unaccounted("unreadable " + std::string(kUnit));
      continue;
    }
    h.resource = value.substr(first + 1, last - first - 1);
    if (value.substr(0, first) != pod.node) {
      unaccounted("annotation names node " + value.substr(0, first));
      continue;
    }
    const AuditOffering* offering = Find(h.resource);
    if (offering == nullptr || h.resource != wanted) {
      unaccounted("holds " + h.resource + " but asks for " + (wanted.empty() ? "nothing" : wanted));
      continue;
    }
    bool readable = true;
    for (absl::string_view idx : absl::StrSplit(value.substr(last + 1), ',')) {
      int64_t i = -1;
      if (!absl::SimpleAtoi(idx, &i) || i < 0) readable = false;
      h.units.push_back(i);
    }
    if (auto a = h.annotations.find(kAmount); a != h.annotations.end()) {
      readable = readable && absl::SimpleAtoi(a->second, &h.amount) && h.amount >= 1;
    }
    auto project = h.annotations.find(kProject);
    h.project = project == h.annotations.end() ? "" : project->second;
    if (!readable || h.project.empty()) {
      unaccounted("unreadable unit indices, amount or project");
      continue;
    }
    // The claim must be what the pod asked for: n exclusive units, or one unit with the
    // pod's tickets (time-sliced: one) or shares (MPS).
    const bool matches = offering->sharing == AuditSharing::kExclusive
                             ? static_cast<int64_t>(h.units.size()) == wanted_amount && h.amount == 1
                             : h.units.size() == 1 && h.amount == wanted_amount;
    if (!matches) {
      unaccounted(absl::StrCat("claims ", h.units.size(), " unit(s) x", h.amount, " for a request of ",
                               wanted_amount));
      continue;
    }
    switch (offering->sharing) {
      case AuditSharing::kExclusive:
        snap.usage[{h.project, h.resource}] += static_cast<int64_t>(h.units.size());
        break;
      case AuditSharing::kMps:
        snap.usage[{h.project, h.resource}] += h.amount;
        break;
      case AuditSharing::kTimeSliced:
        // A slice owned is charged whole, with its node's real ticket count (DESIGN.md I4).
        if (owned.emplace(h.project, h.node, h.resource, h.units.front()).second) {
          auto node_units = snap.facts.units.find({h.node, h.resource});
          const int64_t tickets =
              node_units == snap.facts.units.end() ? offering->replicas : node_units->second.capacity;
          snap.usage[{h.project, h.resource}] += tickets;
          int64_t& largest = snap.largest_slice[{h.project, h.resource}];
          largest = std::max(largest, tickets);
        }
        break;
    }
    snap.holders.push_back(std::move(h));
  }
  ReadDraClaims(fake, snap);
  return snap;
}

void ApiAudit::ReadDraClaims(const FakeApiServer& fake, AuditSnapshot& snap) const {
  if (dra_nodes_.empty()) return;
  std::map<std::string, const PodView*> bound;  // uid -> bound, non-terminal pod
  const std::vector<PodView> pods = fake.Pods();
  for (const PodView& p : pods) {
    if (!p.node.empty() && p.phase != "Succeeded" && p.phase != "Failed") bound[p.uid] = &p;
  }
  std::map<std::string, std::set<std::string>> devices_of;  // pod uid -> devices of its live claims
  for (const std::string& text : fake.Objects("resourceclaims")) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    const rapidjson::Value* meta = Member(doc, "metadata");
    if (meta == nullptr || Member(*meta, "deletionTimestamp") != nullptr) continue;
    std::string owner;
    if (const rapidjson::Value* refs = Member(*meta, "ownerReferences"); refs != nullptr && refs->IsArray()) {
      for (const auto& r : refs->GetArray()) {
        if (json::Str(r, "kind") == "Pod") owner = json::Str(r, "uid");
      }
    }
    auto pod = bound.find(owner);
    if (pod == bound.end()) continue;  // an attempt's claim, or a finished pod's
    const rapidjson::Value* status = Member(doc, "status");
    const rapidjson::Value* allocation = status != nullptr ? Member(*status, "allocation") : nullptr;
    const rapidjson::Value* devs = allocation != nullptr ? Member(*allocation, "devices") : nullptr;
    const rapidjson::Value* results = devs != nullptr ? Member(*devs, "results") : nullptr;
    if (results == nullptr || !results->IsArray()) continue;
    const PodView& p = *pod->second;
    auto project = p.annotations.find(kProject);
    const std::string ns = p.key.substr(0, p.key.find('/'));
    auto ns_project = snap.facts.project_of_namespace.find(ns);
    const std::string who =
        project != p.annotations.end() ? project->second
                                         : (ns_project != snap.facts.project_of_namespace.end() ? ns_project->second : ns);
    for (const auto& r : results->GetArray()) {
      const std::string device =
          absl::StrCat(json::Str(r, "driver"), "/", json::Str(r, "pool"), "/", json::Str(r, "device"));
      devices_of[owner].insert(device);
      snap.dra_claims[device].push_back(absl::StrCat(p.key, " (uid ", p.uid, ", project ", who, ", claim ",
                                                     Str(meta, "name"), ")"));
      snap.dra_projects[device].insert(who);
    }
  }
  // Holders on DRA nodes: their annotations must name their claim's devices, both as
  // gpu.themelio.io/dra-devices and as unit indices (unit i is the i-th device of the walk).
  for (const AuditHolder& h : snap.holders) {
    const AuditDraNode* d = FindDraNode(h.node);
    if (d == nullptr || d->resource != h.resource) continue;
    auto real = devices_of.find(h.uid);
    if (real == devices_of.end()) continue;  // its claim was deleted: the annotation is all there is
    std::set<std::string> by_index, by_annotation;
    for (int64_t i : h.units) {
      by_index.insert(i >= 0 && static_cast<size_t>(i) < d->devices.size() ? d->devices[static_cast<size_t>(i)]
                                                                          : absl::StrCat("unit ", i));
    }
    auto named = h.annotations.find("gpu.themelio.io/dra-devices");
    if (named != h.annotations.end()) {
      for (absl::string_view entry : absl::StrSplit(named->second, ',', absl::SkipEmpty())) {
        by_annotation.insert(std::string(entry.substr(0, entry.find('='))));
      }
    }
    if (by_index != real->second || by_annotation != real->second) {
      snap.dra_mismatches.emplace_back(
          h.uid, absl::StrCat(h.key, " (uid ", h.uid, ") on ", h.node, ": its claim allocated {",
                              absl::StrJoin(real->second, ","), "}, its unit indices name {",
                              absl::StrJoin(by_index, ","), "}, gpu.themelio.io/dra-devices {",
                              absl::StrJoin(by_annotation, ","), "}"));
    }
  }
}

void ApiAudit::Note(const std::string& uid_or_key, const std::string& note) {
  notes_[uid_or_key].push_back(note);
}

std::string ApiAudit::DescribeHolders(const std::vector<const AuditHolder*>& holders) const {
  std::string out;
  for (const AuditHolder* h : holders) {
    absl::StrAppend(&out, "\n      ", h->key, " uid=", h->uid, " node=", h->node, " {",
                    absl::StrJoin(h->annotations, ", ", absl::PairFormatter("=")), "}");
    for (const std::string* subject : {&h->uid, &h->key}) {
      auto it = notes_.find(*subject);
      if (it != notes_.end()) absl::StrAppend(&out, "; ", absl::StrJoin(it->second, "; "));
    }
  }
  return out;
}

std::vector<AuditViolation> ApiAudit::Judge(const AuditSnapshot& previous,
                                            const std::vector<const AuditFacts*>& earlier,
                                            const AuditSnapshot& start,
                                            const AuditSnapshot& end) const {
  std::vector<AuditViolation> out;
  const AuditFacts& after = end.facts;
  std::vector<const AuditFacts*> in_force = earlier;
  in_force.push_back(&start.facts);
  in_force.push_back(&end.facts);
  auto is_new = [&](const AuditHolder& h) { return previous.bound_uids.count(h.uid) == 0; };
  // The most units and the largest per-unit capacity any fact set in force gave the node.
  auto units_of = [&](const std::string& node, const std::string& resource) {
    AuditFacts::NodeUnits most{0, 1};
    for (const AuditFacts* f : in_force) {
      auto it = f->units.find({node, resource});
      if (it == f->units.end()) continue;
      most.units = std::max(most.units, it->second.units);
      most.capacity = std::max(most.capacity, it->second.capacity);
    }
    return most;
  };

  for (const std::string& p : after.problems) out.push_back({"audit input", p, p});
  for (const auto& [uid, evidence] : end.unaccounted) {
    out.push_back({"I1 unaccounted", absl::StrCat("unaccounted ", uid), evidence});
  }

  // Units as the holders fill them.
  struct UnitLoad {
    int64_t used = 0;
    std::set<std::string> projects;
    std::vector<const AuditHolder*> holders;
  };
  std::map<std::tuple<std::string, std::string, int64_t>, UnitLoad> load;
  for (const AuditHolder& h : end.holders) {
    for (int64_t i : h.units) {
      UnitLoad& u = load[{h.node, h.resource, i}];
      u.used += h.amount;
      u.projects.insert(h.project);
      u.holders.push_back(&h);
    }
  }
  for (const auto& [id, u] : load) {
    const auto& [node, resource, index] = id;
    const AuditOffering& offering = *Find(resource);
    // Capacity per unit is the node's, whether the unit is still advertised or draining.
    const AuditFacts::NodeUnits advertised = units_of(node, resource);
    const int64_t capacity = advertised.capacity;
    // A unit that stays over capacity (or two-owned) is one violation until a new holder
    // joins it: then that bind is another.
    std::vector<std::string> uids;
    for (const AuditHolder* h : u.holders) {
      if (is_new(*h)) uids.push_back(h->uid);
    }
    std::sort(uids.begin(), uids.end());
    if (uids.empty()) uids.push_back("(standing)");
    const std::string unit = UnitName(node, resource, index);
    if (u.used > capacity) {
      out.push_back({"I1 capacity", absl::StrCat("capacity ", unit, " ", absl::StrJoin(uids, ",")),
                     absl::StrCat(unit, " holds ", u.used, " of capacity ", capacity, ":",
                                  DescribeHolders(u.holders))});
    }
    if (offering.sharing == AuditSharing::kTimeSliced && u.projects.size() > 1) {
      out.push_back({"I2 two projects", absl::StrCat("owners ", unit, " ", absl::StrJoin(uids, ",")),
                     absl::StrCat(unit, " is shared by projects ", absl::StrJoin(u.projects, ", "), ":",
                                  DescribeHolders(u.holders))});
    }
    if (index >= advertised.units) {
      for (const AuditHolder* h : u.holders) {
        if (!is_new(*h)) continue;  // held before the node shrank: draining, legitimately
        out.push_back({"I1 unit beyond allocatable", absl::StrCat("beyond ", unit, " ", h->uid),
                       absl::StrCat(unit, " is beyond the node's ", advertised.units,
                                    " allocatable unit(s) (at most, during this phase), yet ",
                                    h->key, " was newly bound onto it:", DescribeHolders({h}))});
      }
    }
  }

  // DRA: the claims are what the kubelet hands out. A device over capacity or shared by two
  // projects among the claims of bound pods is a violation whoever allocated it: the extender's
  // bind is the last check before a pod with that claim is bound.
  for (const auto& [device, claims] : end.dra_claims) {
    const AuditDraNode* d = nullptr;
    for (const AuditDraNode& n : dra_nodes_) {
      if (std::find(n.devices.begin(), n.devices.end(), device) != n.devices.end()) d = &n;
    }
    const int64_t capacity = d != nullptr ? d->capacity : 1;
    if (static_cast<int64_t>(claims.size()) > capacity) {
      out.push_back({"I1 DRA capacity", absl::StrCat("dra-capacity ", device, " ", claims.size()),
                     absl::StrCat(device, " is allocated to ", claims.size(), " claims of bound pods, capacity ",
                                  capacity, ": ", absl::StrJoin(claims, "; "))});
    }
    auto projects = end.dra_projects.find(device);
    if (capacity > 1 && projects != end.dra_projects.end() && projects->second.size() > 1) {
      out.push_back({"I2 DRA two projects", absl::StrCat("dra-owners ", device, " ", absl::StrJoin(projects->second, ",")),
                     absl::StrCat(device, " is shared by projects ", absl::StrJoin(projects->second, ", "), ": ",
                                  absl::StrJoin(claims, "; "))});
    }
  }
  for (const auto& [uid, evidence] : end.dra_mismatches) {
    out.push_back({"I1 DRA device", absl::StrCat("dra-device ", uid), evidence});
  }

  // I4 charged project: the extender charges a new pod to its namespace's project (either
  // side of a relabel that happened during the phase), never to another.
  for (const AuditHolder& h : end.holders) {
    if (!is_new(h)) continue;
    std::set<std::string> allowed;
    for (const AuditFacts* f : in_force) {
      auto it = f->project_of_namespace.find(h.namespace_name);
      allowed.insert(it != f->project_of_namespace.end() ? it->second : h.namespace_name);
    }
    if (allowed.count(h.project) == 0) {
      out.push_back({"I4 charged project", absl::StrCat("charge ", h.uid),
                     absl::StrCat(h.key, " is charged to ", h.project, ", its namespace's project was ",
                                  absl::StrJoin(allowed, " or "), ":", DescribeHolders({&h}))});
    }
  }

  // I4 quota. Usage may legitimately stand above a quota: a quota lowered under running pods,
  // or a namespace relabelled (its ResourceQuota then limits another project, while its running
  // pods stay charged to the project recorded on them). The extender can only be blamed for
  // what it added. A project's usage at the end above both its quota (the largest of the
  // quotas in force during the phase: a bind may have seen any) and its usage at the start
  // means that some bind of this phase took the project from at most its quota to above it, or
  // added to it while it was above: each is a bind the extender should have refused. The usage
  // at the start is the larger of the previous phase's end and this phase's start (after its
  // first changes): a bind may have seen either, as with the quotas. Deletions at the start
  // that the extender has not seen yet (a lagging watch) leave it the project's old slices: it
  // may rightly join one it still sees held, which re-opens it. This misses an excess that
  // deletions in the same phase hide; it never blames a lowered quota, a relabel, or a
  // deletion the extender could not see.
  for (const auto& [project_resource, used] : end.usage) {
    int64_t quota = 0;
    for (const AuditFacts* f : in_force) {
      auto it = f->quota.find(project_resource);
      quota = it == f->quota.end() ? -1 : std::max(quota, it->second);
      if (quota < 0) break;  // unlimited under one of them
    }
    if (quota < 0) continue;
    auto usage_in = [&](const AuditSnapshot& snapshot) {
      auto s = snapshot.usage.find(project_resource);
      return s == snapshot.usage.end() ? int64_t{0} : s->second;
    };
    const int64_t at_previous_end = usage_in(previous);
    const int64_t after_first_changes = usage_in(start);
    const int64_t at_start = std::max(at_previous_end, after_first_changes);
    // Time-sliced: over when the project would have opened even its largest slice with the
    // tickets of the others at or above the quota (a slice is opened whole).
    auto largest = end.largest_slice.find(project_resource);
    const bool over = largest != end.largest_slice.end() ? used - largest->second >= quota
                                                         : used > quota;
    if (over && used > at_start) {
      const auto& [project, resource] = project_resource;
      std::vector<const AuditHolder*> holders;
      for (const AuditHolder& h : end.holders) {
        if (h.project == project && h.resource == resource) holders.push_back(&h);
      }
      out.push_back({"I4 quota", absl::StrCat("quota ", project, " ", resource, " ", used),
                     absl::StrCat(project, " uses ", used, " (units, tickets or shares) of ", resource, ", quota ",
                                  quota, " (the largest in force during the phase), usage at the start ",
                                  at_start, " (", at_previous_end, " at the previous phase's end, ",
                                  after_first_changes, " after this phase's first changes):",
                                  DescribeHolders(holders))});
    }
  }
  return out;
}

}  // namespace gse::testing
