// Ledger: the independent record and audit of a replay's placements (replay_ledger.h).
#include "perf/replay_ledger.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "state/cluster_state.h"
#include "state/quantity.h"

namespace gse::replay {
namespace {


bool Matches(const SelectorRequirement& r, const std::map<std::string, std::string>& labels) {
  auto it = labels.find(r.key);
  if (r.op == "Exists") return it != labels.end();
  if (r.op == "DoesNotExist") return it == labels.end();
  const bool in = it != labels.end() &&
                  std::find(r.values.begin(), r.values.end(), it->second) != r.values.end();
  return r.op == "In" ? in : !in;
}

}  // namespace

Ledger::Ledger(std::shared_ptr<const Catalog> catalog,
               std::vector<std::pair<std::string, std::string>> twins)
    : catalog_(std::move(catalog)) {
  twin_of_.assign(catalog_->size(), kNoOffering);
  for (const auto& [a, b] : twins) {
    const Offering* oa = catalog_->Find(a);
    const Offering* ob = catalog_->Find(b);
    if (oa == nullptr || ob == nullptr) continue;
    twin_of_[static_cast<size_t>(oa->id)] = ob->id;
    twin_of_[static_cast<size_t>(ob->id)] = oa->id;
  }
}

int32_t Ledger::ResourceId(const std::string& name) {
  auto [it, inserted] = resource_ids_.emplace(name, static_cast<int32_t>(resource_names_.size()));
  if (inserted) resource_names_.push_back(name);
  return it->second;
}

void Ledger::RebuildNames() {
  names_.clear();
  for (const auto& [name, n] : nodes_) {
    if (!n.removed) names_.push_back(name);
  }
  std::sort(names_.begin(), names_.end());
  order_.clear();
  for (const std::string& name : names_) order_.push_back(&nodes_.find(name)->second);
}

// Units per offering from the Node object, by the device plugin's conventions (written here
// again rather than taken from the mirror, so that the audit is independent).
void Ledger::Derive(NodeFacts* n) {
  n->units.clear();
  n->alloc_cpu = n->alloc_memory = n->alloc_pods = 0;
  std::fill(n->alloc_ext.begin(), n->alloc_ext.end(), 0);
  for (const auto& [key, milli] : n->object.allocatable_milli) {
    if (key == "cpu") {
      n->alloc_cpu = milli;
    } else if (key == "memory") {
      n->alloc_memory = milli;
    } else if (key == "pods") {
      n->alloc_pods = milli;
    } else {
      const size_t id = static_cast<size_t>(ResourceId(key));
      if (n->alloc_ext.size() <= id) n->alloc_ext.resize(id + 1, 0);
      n->alloc_ext[id] = milli;
    }
    const Offering* o = catalog_->Find(key);
    if (o == nullptr) continue;
    absl::string_view base = key;
    absl::ConsumeSuffix(&base, ".shared");
    auto label = [&](absl::string_view suffix) -> int64_t {
      auto it = n->object.labels.find(absl::StrCat(base, ".", suffix));
      int64_t v = -1;
      if (it == n->object.labels.end() || !absl::SimpleAtoi(it->second, &v)) return -1;
      return v;
    };
    int64_t replicas = o->sharing == Sharing::kExclusive ? 1 : o->replicas;
    if (o->shared() && label("replicas") >= 1) replicas = label("replicas");
    int64_t count = label("count");
    if (count < 0) count = milli / 1000 / std::max<int64_t>(1, replicas);
    n->units[o->id] = {static_cast<int32_t>(count), static_cast<int32_t>(replicas)};
  }
}

void Ledger::ApplyBatch(const ObjectBatch& batch) {
  for (const NamespaceObject& ns : batch.namespaces) {
    auto it = ns.labels.find(MirrorOptions().project_label);
    namespace_project_[ns.name] = it != ns.labels.end() && !it->second.empty() ? it->second : ns.name;
  }
  for (const ResourceQuotaObject& q : batch.quotas) {
    auto p = namespace_project_.find(q.namespace_name);
    const std::string project = p != namespace_project_.end() ? p->second : q.namespace_name;
    for (const Offering& o : catalog_->offerings()) {
      auto it = q.hard_milli.find(absl::StrCat("requests.", o.resource));
      if (it == q.hard_milli.end()) continue;
      int64_t v = it->second / 1000;
      if (o.sharing == Sharing::kTimeSliced) v = (v + o.replicas - 1) / std::max(1, o.replicas);
      quota_[project][o.id] = v;
    }
  }
  for (const NodeObject& n : batch.nodes) ApplyNode(n);
}

void Ledger::ApplyNode(const NodeObject& node) {
  auto [it, inserted] = nodes_.try_emplace(node.name);
  NodeFacts& n = it->second;
  const bool was_removed = n.removed;
  n.object = node;
  n.removed = false;
  Derive(&n);
  if (inserted || was_removed) RebuildNames();
}

void Ledger::RemoveNode(const std::string& name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  it->second.removed = true;
  it->second.object.unschedulable = true;
  it->second.object.allocatable_milli.clear();
  Derive(&it->second);
  RebuildNames();
}

bool Ledger::HasNode(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && !it->second.removed;
}

Ledger::Demand Ledger::DemandOf(const PodObject& pod) {
  Demand d;
  std::map<std::string, int64_t> req;
  for (const ContainerResources& c : pod.containers) {
    for (const auto& [k, v] : c.requests_milli) req[k] += v;
    for (const auto& [k, v] : c.limits_milli) {
      if (c.requests_milli.count(k) == 0 && k != "cpu" && k != "memory") req[k] += v;
    }
  }
  for (const auto& [k, v] : req) {
    if (v <= 0) continue;
    if (k == "cpu") {
      d.cpu = v;
    } else if (k == "memory") {
      d.memory = v;
    } else {
      d.ext.emplace_back(ResourceId(k), v);
    }
  }
  return d;
}

void Ledger::Bind(const PodObject& pod, const std::string& project, const std::string& node,
                  const Assignment* a, bool placeholder) {
  PodFacts f;
  f.node = node;
  f.project = project;
  f.placeholder = placeholder;
  f.demand = DemandOf(pod);
  NodeFacts& n = nodes_[node];
  n.used_cpu += f.demand.cpu;
  n.used_memory += f.demand.memory;
  n.used_pods += 1000;
  for (const auto& [id, v] : f.demand.ext) {
    if (n.used_ext.size() <= static_cast<size_t>(id)) n.used_ext.resize(static_cast<size_t>(id) + 1, 0);
    n.used_ext[static_cast<size_t>(id)] += v;
  }
  if (a != nullptr) {
    f.assignment = *a;
    f.has_assignment = true;
    for (int32_t i : a->units) {
      units_[UnitKey{node, a->offering, i}].push_back(Holder{pod.Key(), project, a->amount_per_unit, placeholder});
    }
  }
  pods_[pod.Key()] = std::move(f);
}

void Ledger::Delete(const std::string& pod_key) {
  auto it = pods_.find(pod_key);
  if (it == pods_.end()) return;
  const PodFacts& f = it->second;
  NodeFacts& n = nodes_[f.node];
  n.used_cpu -= f.demand.cpu;
  n.used_memory -= f.demand.memory;
  n.used_pods -= 1000;
  for (const auto& [id, v] : f.demand.ext) n.used_ext[static_cast<size_t>(id)] -= v;
  if (f.has_assignment) {
    for (int32_t i : f.assignment.units) {
      auto u = units_.find(UnitKey{f.node, f.assignment.offering, i});
      if (u == units_.end()) continue;
      auto& hs = u->second;
      hs.erase(std::remove_if(hs.begin(), hs.end(), [&](const Holder& h) { return h.pod_key == pod_key; }),
               hs.end());
      if (hs.empty()) units_.erase(u);
    }
  }
  pods_.erase(it);
}

int32_t Ledger::UnitCapacity(const std::string& node, OfferingId offering, int32_t index) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  auto u = it->second.units.find(offering);
  if (u == it->second.units.end() || index < 0 || index >= u->second.first) return 0;
  return u->second.second;
}

int32_t Ledger::MaxUnitCapacity(OfferingId offering) const {
  int32_t best = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.removed) continue;
    auto u = n.units.find(offering);
    if (u != n.units.end() && u->second.first > 0) best = std::max(best, u->second.second);
  }
  return best;
}

bool Ledger::ProjectHoldsUnit(const UnitKey& key, const std::string& project) const {
  auto it = units_.find(key);
  if (it == units_.end()) return false;
  for (const Holder& h : it->second) {
    if (!h.placeholder && h.project == project) return true;
  }
  return false;
}

std::vector<std::string> Ledger::NodesWithOwnedFreeTicket(const std::string& project,
                                                          OfferingId offering) const {
  std::vector<std::string> out;
  for (const auto& [key, holders] : units_) {
    if (key.offering != offering || !HasNode(key.node)) continue;
    int32_t used = 0;
    bool mine = false;
    for (const Holder& h : holders) {
      used += h.amount;
      mine = mine || h.project == project;
    }
    if (mine && used < UnitCapacity(key.node, offering, key.index)) out.push_back(key.node);
  }
  return out;
}

bool Ledger::OwnsFreeTicket(const std::string& project, OfferingId offering) const {
  return !NodesWithOwnedFreeTicket(project, offering).empty();
}

std::string Ledger::OwnedFreeTicketNodeThatFits(const std::string& project, OfferingId offering,
                                                const Demand& d, const PodArrival& arrival) const {
  for (const std::string& node : NodesWithOwnedFreeTicket(project, offering)) {
    if (BuiltInFit(d, arrival, node).empty()) return node;
  }
  return "";
}

std::string Ledger::BuiltInFit(const Demand& d, const PodArrival& arrival,
                               const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.removed) return "node_unknown";
  return Fit(d, arrival, it->second);
}

std::string Ledger::BuiltInFitAt(const Demand& d, const PodArrival& arrival, size_t i) const {
  return Fit(d, arrival, *order_[i]);
}

std::string Ledger::Fit(const Demand& d, const PodArrival& arrival, const NodeFacts& n) const {
  if (n.object.unschedulable) return "node_unschedulable";
  for (const auto& [k, v] : arrival.node_selector) {
    auto l = n.object.labels.find(k);
    if (l == n.object.labels.end() || l->second != v) return "node_affinity";
  }
  for (const SelectorRequirement& r : arrival.affinity) {
    if (!Matches(r, n.object.labels)) return "node_affinity";
  }
  if (n.used_pods + 1000 > n.alloc_pods) return "too_many_pods";
  if (d.cpu > 0 && n.used_cpu + d.cpu > n.alloc_cpu) return "insufficient_cpu";
  if (d.memory > 0 && n.used_memory + d.memory > n.alloc_memory) return "insufficient_memory";
  for (const auto& [id, v] : d.ext) {
    const size_t i = static_cast<size_t>(id);
    const int64_t alloc = i < n.alloc_ext.size() ? n.alloc_ext[i] : 0;
    const int64_t used = i < n.used_ext.size() ? n.used_ext[i] : 0;
    if (used + v > alloc) return absl::StrCat("insufficient_", resource_names_[i]);
  }
  return "";
}

// kube-scheduler's NodeResourcesFit scoring (resources cpu and memory, weight 1 each) and
// NodeResourcesBalancedAllocation, on the requests after placing the pod.
int64_t Ledger::LeastAllocated(const Demand& d, const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  const NodeFacts& n = it->second;
  auto one = [](int64_t used, int64_t alloc) -> int64_t {
    if (alloc <= 0 || used > alloc) return 0;
    return (alloc - used) * 100 / alloc;
  };
  return (one(n.used_cpu + d.cpu, n.alloc_cpu) + one(n.used_memory + d.memory, n.alloc_memory)) / 2;
}

int64_t Ledger::MostAllocated(const Demand& d, const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  const NodeFacts& n = it->second;
  auto one = [](int64_t used, int64_t alloc) -> int64_t {
    if (alloc <= 0) return 0;
    return std::min(used, alloc) * 100 / alloc;
  };
  return (one(n.used_cpu + d.cpu, n.alloc_cpu) + one(n.used_memory + d.memory, n.alloc_memory)) / 2;
}

int64_t Ledger::BalancedAllocation(const Demand& d, const std::string& node) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return 0;
  const NodeFacts& n = it->second;
  auto frac = [](int64_t used, int64_t alloc) {
    return alloc <= 0 ? 0.0 : std::min(1.0, static_cast<double>(used) / static_cast<double>(alloc));
  };
  const double c = frac(n.used_cpu + d.cpu, n.alloc_cpu), m = frac(n.used_memory + d.memory, n.alloc_memory);
  const double sd = std::abs(c - m) / 2;  // standard deviation of two fractions
  return static_cast<int64_t>((1 - sd) * 100);
}

bool Ledger::FreeHost(absl::string_view node, int64_t* cpu, int64_t* memory) const {
  auto it = nodes_.find(std::string(node));
  if (it == nodes_.end() || it->second.removed) return false;
  *cpu = it->second.alloc_cpu - it->second.used_cpu;
  *memory = it->second.alloc_memory - it->second.used_memory;
  return true;
}

Ledger::AuditResult Ledger::Audit() const {
  AuditResult r;
  auto problem = [&](std::string s) {
    if (r.problems.size() < 50) r.problems.push_back(std::move(s));
  };
  // Units: capacity, exclusivity, one owner for time-sliced units.
  for (const auto& [key, holders] : units_) {
    const Offering& o = catalog_->Get(key.offering);
    const std::string id = UnitId(key.node, o.resource, key.index);
    const int32_t cap = UnitCapacity(key.node, key.offering, key.index);
    int64_t used = 0;
    std::vector<std::string> projects;
    for (const Holder& h : holders) {
      used += h.amount;
      if (std::find(projects.begin(), projects.end(), h.project) == projects.end()) projects.push_back(h.project);
    }
    bool bad = false;
    if (cap == 0) {
      bad = true;
      problem(absl::StrCat(id, ": held but the node does not advertise it"));
    } else if (used > cap) {
      bad = true;
      problem(absl::StrCat(id, ": ", used, " used of capacity ", cap));
    }
    if (o.sharing == Sharing::kExclusive && holders.size() > 1) {
      bad = true;
      problem(absl::StrCat(id, ": exclusive unit with ", holders.size(), " holders"));
    }
    if (bad) ++r.oversubscribed_units;
    if (o.sharing == Sharing::kTimeSliced && projects.size() > 1) {
      ++r.multi_owner_units;
      problem(absl::StrCat(id, ": time-sliced unit of ", projects.size(), " projects"));
    }
    // Twins: one GPU may not serve workload through both of its halves.
    const OfferingId twin = twin_of_[static_cast<size_t>(key.offering)];
    if (twin != kNoOffering && key.offering < twin) {
      auto other = units_.find(UnitKey{key.node, twin, key.index});
      auto real = [](const std::vector<Holder>& hs) {
        return std::any_of(hs.begin(), hs.end(), [](const Holder& h) { return !h.placeholder; });
      };
      if (other != units_.end() && real(holders) && real(other->second)) {
        ++r.oversubscribed_units;
        problem(absl::StrCat(id, ": the same GPU also serves ", catalog_->Get(twin).resource, " pods"));
      }
    }
  }
  // Nodes: cpu, memory, pods, extended resources against allocatable.
  for (size_t k = 0; k < names_.size(); ++k) {
    const std::string& name = names_[k];
    const NodeFacts& n = *order_[k];
    std::vector<std::tuple<std::string, int64_t, int64_t>> checks = {
        {"cpu", n.used_cpu, n.alloc_cpu}, {"memory", n.used_memory, n.alloc_memory}, {"pods", n.used_pods, n.alloc_pods}};
    for (size_t i = 0; i < n.used_ext.size(); ++i) {
      checks.emplace_back(resource_names_[i], n.used_ext[i], i < n.alloc_ext.size() ? n.alloc_ext[i] : 0);
    }
    for (const auto& [k, used, alloc] : checks) {
      if (used > 0 && used > alloc) {
        ++r.over_capacity_nodes;
        problem(absl::StrCat("node ", name, ": ", k, " requested ", used, "m of ", alloc, "m allocatable"));
      }
    }
  }
  // Quotas: exclusive units held, time-sliced units owned, mps shares.
  std::map<std::pair<std::string, OfferingId>, int64_t> usage;
  for (const auto& [key, holders] : units_) {
    const Offering& o = catalog_->Get(key.offering);
    std::map<std::string, int64_t> per_project;
    for (const Holder& h : holders) {
      if (h.placeholder) continue;
      per_project[h.project] += o.sharing == Sharing::kMps ? h.amount : 1;
    }
    for (const auto& [p, v] : per_project) usage[{p, key.offering}] += o.sharing == Sharing::kTimeSliced ? 1 : v;
  }
  for (const auto& [pk, v] : usage) {
    auto q = quota_.find(pk.first);
    if (q == quota_.end()) continue;
    auto lim = q->second.find(pk.second);
    if (lim != q->second.end() && v > lim->second) {
      ++r.over_quota;
      problem(absl::StrCat("project ", pk.first, ": ", v, " of ", catalog_->Get(pk.second).resource,
                           " over its quota ", lim->second));
    }
  }
  return r;
}


void UnitOpeningFloor::Placed(const std::string& pod_key, const std::string& project, OfferingId offering,
                              int32_t max_replicas) {
  if (max_replicas <= 0 || !ticket_of_.emplace(pod_key, std::make_pair(project, offering)).second) return;
  Busy& b = busy_[{project, offering}];
  ++b.live;
  const int64_t units = (b.live + max_replicas - 1) / max_replicas;
  if (units > b.peak_units) {
    openings_ += units - b.peak_units;
    b.peak_units = units;
  }
}

void UnitOpeningFloor::Removed(const std::string& pod_key) {
  auto t = ticket_of_.find(pod_key);
  if (t == ticket_of_.end()) return;
  auto b = busy_.find(t->second);
  ticket_of_.erase(t);
  if (b == busy_.end()) return;
  if (--b->second.live <= 0) busy_.erase(b);  // every unit released: the busy period ends
}

}  // namespace gse::replay
