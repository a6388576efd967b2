// ClusterState: nodes and units from Node objects, holders from pods, projects and quotas.
//
// How the facts map onto the mirror (DESIGN.md I1–I6):
//  * A node's offerings come from its allocatable keys that the catalog resolves, and its GPU
//    feature discovery labels (PROTOCOL.md §5.2) under the base name of the key (the key with a
//    trailing ".shared" removed: renameByDefault keeps labels under the original name).
//  * Holdings are indexed twice: by pod (pods_, the record) and by unit (Unit::holders,
//    Unit::used, Unit::owner) plus per-project usage. The unit side and usage are updated
//    incrementally in AddHolding/RemoveHolding; Audit() recounts them from pods_.
//  * A holding may name a node, offering or unit the mirror does not (or no longer) see
//    advertised: the API server is the truth, so such units are created on demand as draining
//    (they keep holders, take no new ones). A node that exists only for such units is marked
//    removed; when its Node object arrives the units that it advertises become live again.
//  * An offering that a node no longer advertises is kept only while held; it is marked by an
//    empty advertised_name.
//  * A bound pod without (a readable) assignment annotation is charged whole units, free ones
//    first; when the node has too little free capacity the rest is charged over capacity, so
//    Audit names the unit and the pods and nothing is handed out twice.
//  * Quotas: within a namespace every ResourceQuota applies (the tightest wins); a project's
//    quota is the sum over its namespaces. A pod's project is fixed when it is first
//    recorded: relabelling a namespace moves quotas at once, usage of running pods stays.
#include "state/cluster_state.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"

namespace gse {
namespace {

// Unit indices are 0..9999 (assignment.h): a node cannot advertise more units of one offering,
// so hostile labels or allocatable values cannot make the mirror allocate without bound.
constexpr int32_t kMaxUnitsPerNodeOffering = 10000;
constexpr size_t kMaxProblems = 100;

constexpr absl::string_view kReasonTimeSliced = "offering is time-sliced on node";
constexpr absl::string_view kReasonNotShared = "offering is not shared on node";
constexpr absl::string_view kReasonProduct = "GPU product does not match offering";
constexpr absl::string_view kSharedSuffix = ".shared";
constexpr absl::string_view kGpuProductLabel = "nvidia.com/gpu.product";
constexpr absl::string_view kGpuCountLabel = "nvidia.com/gpu.count";

// FNV-1a, 64 bit: deterministic across processes (absl::Hash is seeded per process), and
// every string is length-prefixed so that field boundaries cannot alias.
class Fingerprint {
 public:
  void Add(absl::string_view s) {
    Add(static_cast<int64_t>(s.size()));
    for (char c : s) Byte(static_cast<uint8_t>(c));
  }
  void Add(int64_t v) {
    for (int i = 0; i < 8; ++i) Byte(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * i)));
  }
  uint64_t value() const { return h_; }

 private:
  void Byte(uint8_t b) {
    h_ ^= b;
    h_ *= 1099511628211ull;
  }
  uint64_t h_ = 14695981039346656037ull;
};

// A label's value as a non-negative int32; -1 when absent or not such a number.
int64_t LabelInt(const std::string* value) {
  int64_t v = 0;
  if (value == nullptr || !absl::SimpleAtoi(*value, &v) || v < 0 ||
      v > std::numeric_limits<int32_t>::max()) {
    return -1;
  }
  return v;
}

// Everything the mirror derives from one Node object, computed without touching the mirror
// so that an unchanged node costs one derivation and one fingerprint comparison.
struct DerivedOffering {
  OfferingId id = kNoOffering;
  absl::string_view advertised;  // points into the NodeObject
  int32_t count = 0;
  int32_t replicas = 1;
  absl::string_view reason;  // one of the kReason* constants, or empty
};

struct DerivedNode {
  std::string product;
  int32_t gpu_count = 0;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted, selector keys only
  std::vector<DerivedOffering> offerings;                    // sorted by id
  uint64_t fingerprint = 0;
};

DerivedNode Derive(const Catalog& catalog, const NodeObject& node) {
  DerivedNode d;
  std::string key;  // reused buffer for label lookups
  auto label = [&](absl::string_view base, absl::string_view suffix) -> const std::string* {
    key.assign(base.data(), base.size());
    key.push_back('.');
    key.append(suffix.data(), suffix.size());
    auto it = node.labels.find(key);
    return it == node.labels.end() ? nullptr : &it->second;
  };
  auto find = [&](absl::string_view name) -> const std::string* {
    auto it = node.labels.find(std::string(name));
    return it == node.labels.end() ? nullptr : &it->second;
  };

  const std::string* gpu_product = find(kGpuProductLabel);
  if (gpu_product != nullptr) d.product = *gpu_product;
  d.gpu_count = static_cast<int32_t>(std::max<int64_t>(0, LabelInt(find(kGpuCountLabel))));

  for (const auto& [resource, milli] : node.allocatable_milli) {
    const Offering* offering = catalog.Find(resource);
    if (offering == nullptr) continue;
    // A node may advertise an offering under its name and an alias at once; the canonical
    // name wins, else the first key in name order.
    auto same = std::find_if(d.offerings.begin(), d.offerings.end(),
                             [&](const DerivedOffering& o) { return o.id == offering->id; });
    if (same != d.offerings.end() && resource != offering->resource) continue;

    DerivedOffering o;
    o.id = offering->id;
    o.advertised = resource;
    absl::string_view base = resource;
    absl::ConsumeSuffix(&base, kSharedSuffix);

    const int64_t replicas_label = LabelInt(label(base, "replicas"));
    const int32_t catalog_replicas = offering->shared() ? std::max(1, offering->replicas) : 1;
    o.replicas = replicas_label >= 1 ? static_cast<int32_t>(replicas_label) : catalog_replicas;

    int64_t count = LabelInt(label(base, "count"));
    if (count < 0) count = std::max<int64_t>(0, milli) / 1000 / o.replicas;
    o.count = static_cast<int32_t>(std::min<int64_t>(count, kMaxUnitsPerNodeOffering));

    const std::string* product_label = label(base, "product");
    absl::string_view product = product_label != nullptr ? absl::string_view(*product_label)
                                                         : absl::string_view(d.product);
    if (offering->sharing == Sharing::kExclusive && o.replicas > 1) {
      o.reason = kReasonTimeSliced;
    } else if (offering->shared() && replicas_label == 1) {
      o.reason = kReasonNotShared;
    } else if (!offering->product.empty() && !absl::StartsWith(product, offering->product)) {
      o.reason = kReasonProduct;
    }
    if (same != d.offerings.end()) {
      *same = o;
    } else {
      d.offerings.push_back(o);
    }
  }
  std::sort(d.offerings.begin(), d.offerings.end(),
            [](const DerivedOffering& a, const DerivedOffering& b) { return a.id < b.id; });

  // Scoring checks node selectors; keep only the labels some offering selects on.
  for (const Offering& offering : catalog.offerings()) {
    for (const auto& [k, v] : offering.node_selector) {
      if (const std::string* value = find(k)) d.labels.emplace_back(k, *value);
    }
  }
  std::sort(d.labels.begin(), d.labels.end());
  d.labels.erase(std::unique(d.labels.begin(), d.labels.end()), d.labels.end());

  Fingerprint fp;
  fp.Add(d.product);
  fp.Add(int64_t{d.gpu_count});
  fp.Add(static_cast<int64_t>(d.labels.size()));
  for (const auto& [k, v] : d.labels) {
    fp.Add(k);
    fp.Add(v);
  }
  fp.Add(static_cast<int64_t>(d.offerings.size()));
  for (const DerivedOffering& o : d.offerings) {
    fp.Add(int64_t{o.id});
    fp.Add(o.advertised);
    fp.Add(int64_t{o.count});
    fp.Add(int64_t{o.replicas});
    fp.Add(o.reason);
  }
  d.fingerprint = fp.value();
  return d;
}

bool HasHolders(const NodeOffering& no) {
  return std::any_of(no.units.begin(), no.units.end(), [](const Unit& u) { return !u.Empty(); });
}

// Sets the advertised count: units below it are live, units at or above it are draining and
// kept only up to the last held one (indices must stay dense: units[i].index == i).
void ResizeUnits(NodeOffering& no, int32_t count, int32_t replicas) {
  size_t keep = static_cast<size_t>(count);
  for (size_t i = no.units.size(); i > keep; --i) {
    if (!no.units[i - 1].Empty()) {
      keep = i;
      break;
    }
  }
  if (no.units.size() > keep) no.units.resize(keep);
  no.units.reserve(keep);
  while (no.units.size() < keep) {
    Unit u;
    u.index = static_cast<int32_t>(no.units.size());
    no.units.push_back(std::move(u));
  }
  for (Unit& u : no.units) {
    u.capacity = replicas;
    u.draining = u.index >= count;
  }
}

NodeOffering* InsertOffering(NodeState& node, NodeOffering no) {
  auto pos = std::lower_bound(
      node.offerings.begin(), node.offerings.end(), no.offering,
      [](const NodeOffering& a, OfferingId id) { return a.offering < id; });
  return &*node.offerings.insert(pos, std::move(no));
}

// The unit a fact (annotation or charge) names, created as draining when the mirror does not
// have it (see the file comment).
Unit& EnsureUnit(absl::flat_hash_map<std::string, std::unique_ptr<NodeState>>& nodes,
                 const Catalog& catalog, const std::string& node_name, OfferingId offering,
                 int32_t index) {
  auto it = nodes.find(node_name);
  if (it == nodes.end()) {
    auto node = std::make_unique<NodeState>();
    node->name = node_name;
    node->removed = true;
    it = nodes.emplace(node_name, std::move(node)).first;
  }
  NodeState& node = *it->second;
  NodeOffering* no = node.Find(offering);
  if (no == nullptr) {
    NodeOffering fresh;
    fresh.offering = offering;
    const Offering& o = catalog.Get(offering);
    fresh.replicas = o.shared() ? std::max(1, o.replicas) : 1;
    no = InsertOffering(node, std::move(fresh));
  }
  while (no->units.size() <= static_cast<size_t>(index)) {
    Unit u;
    u.index = static_cast<int32_t>(no->units.size());
    u.capacity = no->replicas;
    u.draining = true;
    no->units.push_back(std::move(u));
  }
  return no->units[static_cast<size_t>(index)];
}

// After holders left: drops free draining units at the tail, offerings that are neither
// advertised nor held, and a removed node that holds nothing any more.
void TrimNode(absl::flat_hash_map<std::string, std::unique_ptr<NodeState>>& nodes,
              const std::string& node_name) {
  auto it = nodes.find(node_name);
  if (it == nodes.end()) return;
  NodeState& node = *it->second;
  for (NodeOffering& no : node.offerings) {
    while (!no.units.empty() && no.units.back().index >= no.advertised_units &&
           no.units.back().Empty()) {
      no.units.pop_back();
    }
  }
  node.offerings.erase(std::remove_if(node.offerings.begin(), node.offerings.end(),
                                      [](const NodeOffering& no) {
                                        return no.advertised_name.empty() && no.units.empty();
                                      }),
                       node.offerings.end());
  if (node.removed && node.offerings.empty()) nodes.erase(it);
}

// What a pod asks of the catalog, as kube-scheduler counts it: per resource, max(sum over
// containers, max over init containers) of the request, or the limit where no request is
// given. Kept here (not scoring/) because state/ must not depend on scoring/.
struct CatalogRequest {
  OfferingId offering = kNoOffering;
  int64_t amount = 0;  // whole units, tickets or shares
};

CatalogRequest ResolveCatalogRequest(const Catalog& catalog, const PodObject& pod) {
  auto add = [](int64_t a, int64_t b) {
    return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max()
                                                        : a + b;
  };
  // Per offering, milli-units; one container may name an offering twice (name and alias).
  auto per_container = [&](const ContainerResources& c, std::vector<int64_t>& out) {
    out.assign(catalog.size(), 0);
    for (const auto& [name, milli] : c.requests_milli) {
      if (const Offering* o = catalog.Find(name)) out[o->id] = add(out[o->id], std::max<int64_t>(0, milli));
    }
    for (const auto& [name, milli] : c.limits_milli) {
      if (c.requests_milli.count(name) != 0) continue;
      if (const Offering* o = catalog.Find(name)) out[o->id] = add(out[o->id], std::max<int64_t>(0, milli));
    }
  };
  std::vector<int64_t> sum(catalog.size(), 0), init_max(catalog.size(), 0), one;
  for (const ContainerResources& c : pod.containers) {
    per_container(c, one);
    for (size_t i = 0; i < one.size(); ++i) sum[i] = add(sum[i], one[i]);
  }
  for (const ContainerResources& c : pod.init_containers) {
    per_container(c, one);
    for (size_t i = 0; i < one.size(); ++i) init_max[i] = std::max(init_max[i], one[i]);
  }
  CatalogRequest r;
  for (size_t i = 0; i < sum.size(); ++i) {
    const int64_t milli = std::max(sum[i], init_max[i]);
    if (milli <= 0) continue;
    // A pod naming two offerings cannot be placed by us; if something else bound it, the
    // lowest offering id is charged (one PodRecord holds one assignment).
    r.offering = static_cast<OfferingId>(i);
    r.amount = milli / 1000 + (milli % 1000 != 0 ? 1 : 0);
    break;
  }
  return r;
}

// The quota of one ResourceQuota object for one offering, in usage units; -1 when the object
// has no key for the offering. Kubernetes enforces requests.<name> for the name a pod uses,
// so the quota key, the canonical name and every alias count; the tightest one applies.
int64_t QuotaOfObject(const Offering& offering, const ResourceQuotaObject& quota) {
  std::vector<std::string> keys;
  keys.push_back(offering.quota_key.empty() ? absl::StrCat("requests.", offering.resource)
                                            : offering.quota_key);
  keys.push_back(absl::StrCat("requests.", offering.resource));
  for (const std::string& alias : offering.aliases) keys.push_back(absl::StrCat("requests.", alias));
  int64_t best = -1;
  for (const std::string& key : keys) {
    auto it = quota.hard_milli.find(key);
    if (it == quota.hard_milli.end()) continue;
    const int64_t whole = std::max<int64_t>(0, it->second) / 1000;
    int64_t units = whole;
    if (offering.sharing == Sharing::kTimeSliced) {
      // The hard value counts tickets; a project owns whole units.
      const int64_t replicas = std::max(1, offering.replicas);
      units = whole / replicas + (whole % replicas != 0 ? 1 : 0);
    }
    best = best < 0 ? units : std::min(best, units);
  }
  return best;
}

std::string HolderList(const Unit& unit) {
  return absl::StrJoin(unit.holders, ",", [](std::string* out, const Holding& h) {
    absl::StrAppend(out, h.pod_key, "x", h.amount);
  });
}

}  // namespace

namespace {
bool LowBit(uint64_t bits, ProjectId project) {
  return ((bits >> static_cast<uint32_t>(project)) & 1) != 0;
}
}  // namespace

bool OfferingSummary::Owns(ProjectId project) const {
  if (project < 0) return false;
  if (project < 64) return LowBit(low_owners, project);
  return high_owners && Owned(project) != nullptr;
}

bool OfferingSummary::OwnsWithRoom(ProjectId project) const {
  if (project < 0) return false;
  if (project < 64) return LowBit(low_with_room, project);
  const OwnedUnits* o = high_owners ? Owned(project) : nullptr;
  return o != nullptr && o->with_room > 0;
}

bool RoomRow::Owns(ProjectId project) const {
  return project >= 0 && project < 64 && LowBit(low_owners, project);
}

bool RoomRow::OwnsWithRoom(ProjectId project) const {
  return project >= 0 && project < 64 && LowBit(low_with_room, project);
}

const OwnedUnits* OfferingSummary::Owned(ProjectId project) const {
  if (project < 0 || (project < 64 ? !LowBit(low_owners, project) : !high_owners)) {
    return nullptr;
  }
  // Sorted by project: a node of 7 slices x 4 tickets may have a dozen owners.
  auto it = std::lower_bound(owned.begin(), owned.end(), project,
                             [](const OwnedUnits& o, ProjectId p) { return o.project < p; });
  return it != owned.end() && it->project == project ? &*it : nullptr;
}

bool OfferingSummary::operator==(const OfferingSummary& o) const {
  return open == o.open && live_units == o.live_units && live_capacity == o.live_capacity &&
         empty_units == o.empty_units && max_free == o.max_free &&
         max_free_empty == o.max_free_empty && held_units == o.held_units && owned == o.owned &&
         low_owners == o.low_owners && low_with_room == o.low_with_room &&
         high_owners == o.high_owners;
}

bool OfferingSelectsNode(const Offering& offering, const NodeState& node) {
  for (const auto& [key, value] : offering.node_selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  return true;
}

const NodeOffering* NodeState::Find(OfferingId id) const {
  for (const NodeOffering& no : offerings) {
    if (no.offering == id) return &no;
  }
  return nullptr;
}

NodeOffering* NodeState::Find(OfferingId id) {
  for (NodeOffering& no : offerings) {
    if (no.offering == id) return &no;
  }
  return nullptr;
}

ClusterState::ClusterState(std::shared_ptr<const Catalog> catalog, MirrorOptions options)
    : catalog_(std::move(catalog)),
      options_(std::move(options)),
      room_rows_(catalog_->size(), std::vector<RoomRow>(1)) {
  BumpNodeSetVersion();
  RecomputeQuotas();  // the static quotas apply before any ResourceQuota arrives
}

void ClusterState::BumpNodeSetVersion() {
  // Process-wide, so that a fresh state (Mirror::ReplaceAll) never repeats an old value.
  static std::atomic<uint64_t> next{1};
  node_set_version_ = next.fetch_add(1, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------------------------
// Nodes

bool ClusterState::ApplyNode(const NodeObject& object) {
  DerivedNode d = Derive(*catalog_, object);
  auto it = nodes_.find(object.name);
  if (it != nodes_.end() && !it->second->removed && it->second->fingerprint == d.fingerprint) {
    return false;  // the common refresh: nothing the mirror keeps changed
  }
  if (it == nodes_.end()) {
    auto node = std::make_unique<NodeState>();
    node->name = object.name;
    node->slot = AllocateSlot();
    it = nodes_.emplace(object.name, std::move(node)).first;
    BumpNodeSetVersion();
  }
  NodeState& node = *it->second;
  Unindex(node);
  node.removed = false;
  node.gpu_product = std::move(d.product);
  node.gpu_count = d.gpu_count;
  node.labels.clear();
  for (auto& [k, v] : d.labels) node.labels.emplace(std::move(k), std::move(v));
  node.fingerprint = d.fingerprint;

  std::vector<NodeOffering> old = std::move(node.offerings);
  node.offerings.clear();
  node.offerings.reserve(d.offerings.size());
  for (const DerivedOffering& o : d.offerings) {
    NodeOffering no;
    for (NodeOffering& prev : old) {
      if (prev.offering == o.id) {
        no = std::move(prev);
        prev.offering = kNoOffering;  // consumed
        break;
      }
    }
    no.offering = o.id;
    no.advertised_name = std::string(o.advertised);
    no.advertised_units = o.count;
    no.replicas = o.replicas;
    no.unusable_reason = std::string(o.reason);
    ResizeUnits(no, o.count, o.replicas);
    node.offerings.push_back(std::move(no));
  }
  // Offerings the node stopped advertising: held units stay, draining, until released.
  for (NodeOffering& prev : old) {
    if (prev.offering == kNoOffering || !HasHolders(prev)) continue;
    prev.advertised_name.clear();
    prev.advertised_units = 0;
    ResizeUnits(prev, 0, prev.replicas);
    InsertOffering(node, std::move(prev));
  }
  Reindex(object.name);
  return true;
}

void ClusterState::RemoveNode(absl::string_view name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return;
  NodeState& node = *it->second;
  Unindex(node);
  const bool held = std::any_of(node.offerings.begin(), node.offerings.end(), HasHolders);
  if (!held) {
    FreeSlot(node.slot);
    nodes_.erase(it);
    BumpNodeSetVersion();
    return;
  }
  // Pods still hold units here (their deletions have not arrived yet): keep those units,
  // draining, so the holdings stay counted and nothing is handed out on this node.
  node.removed = true;
  node.fingerprint = 0;
  for (NodeOffering& no : node.offerings) {
    no.advertised_name.clear();
    no.advertised_units = 0;
    ResizeUnits(no, 0, no.replicas);
  }
  node.offerings.erase(std::remove_if(node.offerings.begin(), node.offerings.end(),
                                      [](const NodeOffering& no) { return no.units.empty(); }),
                       node.offerings.end());
  Reindex(name);
}

const NodeState* ClusterState::FindNode(absl::string_view name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : it->second.get();
}

std::vector<const NodeState*> ClusterState::FindNodes(
    const std::vector<absl::string_view>& names) const {
  // Hash-table slots are fetched kAhead names early, each found node as it is found (the
  // caller reads it next), so that the lookups overlap their cache misses.
  constexpr size_t kAhead = 8;
  std::vector<const NodeState*> out(names.size(), nullptr);
  for (size_t i = 0; i < names.size() && i < kAhead; ++i) nodes_.prefetch(names[i]);
  for (size_t i = 0; i < names.size(); ++i) {
    if (i + kAhead < names.size()) nodes_.prefetch(names[i + kAhead]);
    auto it = nodes_.find(names[i]);
    if (it == nodes_.end()) continue;
    const NodeState* node = it->second.get();
    __builtin_prefetch(node);
    out[i] = node;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Holdings

void ClusterState::RecomputeOwner(Unit& unit, const Offering& offering) {
  if (unit.holders.empty()) {
    unit.owner = kNoProject;
    return;
  }
  auto project_of = [&](const Holding& h) {
    auto it = pods_.find(h.pod_key);
    return it == pods_.end() ? kNoProject : it->second.project;
  };
  const ProjectId first = project_of(unit.holders.front());
  if (offering.sharing == Sharing::kMps) {
    for (const Holding& h : unit.holders) {
      if (project_of(h) != first) {
        unit.owner = kNoProject;
        return;
      }
    }
  }
  // Exclusive and time-sliced: the holders' project. Should API facts put two projects on one
  // unit (Audit reports it), the first holder's project stays the owner.
  unit.owner = first;
}

void ClusterState::AddHolding(const PodRecord& pod) {
  const Assignment& a = pod.assignment;
  const Offering& offering = catalog_->Get(a.offering);
  ProjectState& project = projects_[static_cast<size_t>(pod.project)];
  for (int32_t index : a.units) {
    const size_t nodes_before = nodes_.size();
    Unit& unit = EnsureUnit(nodes_, *catalog_, a.node, a.offering, index);
    if (nodes_.size() != nodes_before) {  // a node created for the fact
      nodes_.find(a.node)->second->slot = AllocateSlot();
      BumpNodeSetVersion();
    }
    bool project_holds = false;
    for (const Holding& h : unit.holders) {
      auto it = pods_.find(h.pod_key);
      if (it != pods_.end() && it->second.project == pod.project) project_holds = true;
    }
    unit.holders.push_back(Holding{pod.key, a.amount_per_unit});
    unit.used += a.amount_per_unit;
    switch (offering.sharing) {
      case Sharing::kExclusive:
        project.usage[a.offering] += 1;
        break;
      case Sharing::kTimeSliced:
        if (!project_holds) project.usage[a.offering] += 1;
        break;
      case Sharing::kMps:
        project.usage[a.offering] += a.amount_per_unit;
        break;
    }
    RecomputeOwner(unit, offering);
  }
  Reindex(a.node);
}

void ClusterState::RemoveHolding(const PodRecord& pod) {
  const Assignment& a = pod.assignment;
  auto node_it = nodes_.find(a.node);
  if (node_it == nodes_.end()) return;
  NodeOffering* no = node_it->second->Find(a.offering);
  if (no == nullptr) return;
  const Offering& offering = catalog_->Get(a.offering);
  ProjectState& project = projects_[static_cast<size_t>(pod.project)];
  for (int32_t index : a.units) {
    if (index < 0 || static_cast<size_t>(index) >= no->units.size()) continue;
    Unit& unit = no->units[static_cast<size_t>(index)];
    auto h = std::find_if(unit.holders.begin(), unit.holders.end(),
                          [&](const Holding& x) { return x.pod_key == pod.key; });
    if (h == unit.holders.end()) continue;
    const int32_t amount = h->amount;
    unit.holders.erase(h);
    unit.used -= amount;
    bool project_holds = false;
    for (const Holding& other : unit.holders) {
      auto it = pods_.find(other.pod_key);
      if (it != pods_.end() && it->second.project == pod.project) project_holds = true;
    }
    int64_t delta = 0;
    switch (offering.sharing) {
      case Sharing::kExclusive:
        delta = 1;
        break;
      case Sharing::kTimeSliced:
        delta = project_holds ? 0 : 1;
        break;
      case Sharing::kMps:
        delta = amount;
        break;
    }
    if (delta != 0) {
      auto u = project.usage.find(a.offering);
      if (u != project.usage.end() && (u->second -= delta) == 0) project.usage.erase(u);
    }
    RecomputeOwner(unit, offering);
  }
  // Trimming drops only free draining units and empty offerings, which the index does not
  // count; a node it erases had nothing indexed.
  const size_t nodes_before = nodes_.size();
  const uint32_t slot = node_it->second->slot;
  TrimNode(nodes_, a.node);
  if (nodes_.size() != nodes_before) {  // a removed node left
    FreeSlot(slot);
    BumpNodeSetVersion();
  }
  Reindex(a.node);
}

// ---------------------------------------------------------------------------------------------
// Summaries and the per-project index

Availability ClusterState::AvailabilityOf(const NodeState& node, const NodeOffering& no) const {
  if (node.removed) return Availability::kNodeUnknown;
  if (no.advertised_units == 0) return Availability::kNotOnNode;  // draining held units only
  if (!no.unusable_reason.empty()) return Availability::kUnusable;
  if (!OfferingSelectsNode(catalog_->Get(no.offering), node)) return Availability::kNotSelected;
  return Availability::kOpen;
}

std::vector<RoomRow> ClusterState::RoomRowsOf(const NodeState& node) const {
  std::vector<RoomRow> rows(catalog_->size());
  if (node.removed) return rows;  // kNodeUnknown everywhere
  for (RoomRow& row : rows) row.availability = Availability::kNotOnNode;
  for (const NodeOffering& no : node.offerings) {
    RoomRow& row = rows[static_cast<size_t>(no.offering)];
    row.availability = AvailabilityOf(node, no);
    row.high_owners = no.summary.high_owners;
    row.node_busy = node.held_units > 0;
    row.empty_units = no.summary.empty_units;
    row.max_free = no.summary.max_free;
    row.max_free_empty = no.summary.max_free_empty;
    row.live_units = no.summary.live_units;
    row.low_owners = no.summary.low_owners;
    row.low_with_room = no.summary.low_with_room;
  }
  return rows;
}

uint32_t ClusterState::AllocateSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  for (std::vector<RoomRow>& table : room_rows_) table.emplace_back();
  return slot_count_++;
}

void ClusterState::FreeSlot(uint32_t slot) {
  for (std::vector<RoomRow>& table : room_rows_) table[slot] = RoomRow{};
  free_slots_.push_back(slot);
}

OfferingSummary ClusterState::Summarise(const NodeState& node, const NodeOffering& no) const {
  OfferingSummary s;
  s.open = AvailabilityOf(node, no) == Availability::kOpen;
  for (const Unit& unit : no.units) {
    const int32_t free = unit.Free();
    s.max_free = std::max(s.max_free, free);
    if (!unit.draining) {
      ++s.live_units;
      s.live_capacity += unit.capacity;
    }
    if (unit.Empty()) {
      if (free >= 1) ++s.empty_units;
      s.max_free_empty = std::max(s.max_free_empty, free);
      continue;
    }
    ++s.held_units;
    if (unit.owner == kNoProject) continue;
    auto pos = std::lower_bound(s.owned.begin(), s.owned.end(), unit.owner,
                                [](const OwnedUnits& o, ProjectId p) { return o.project < p; });
    if (pos == s.owned.end() || pos->project != unit.owner) {
      OwnedUnits fresh;
      fresh.project = unit.owner;
      pos = s.owned.insert(pos, fresh);
    }
    ++pos->units;
    if (free >= 1) ++pos->with_room;
    if (unit.owner < 64) {
      const uint64_t bit = uint64_t{1} << static_cast<uint32_t>(unit.owner);
      s.low_owners |= bit;
      if (free >= 1) s.low_with_room |= bit;
    } else {
      s.high_owners = true;
    }
    pos->max_free = std::max(pos->max_free, free);
  }
  return s;
}

void ClusterState::AddToIndex(const NodeOffering& no, int32_t sign) {
  if (!no.summary.open) return;
  for (const OwnedUnits& o : no.summary.owned) {
    if (o.with_room == 0) continue;
    auto key = std::make_pair(o.project, no.offering);
    int32_t& count = owned_with_room_[key];
    count += sign * o.with_room;
    if (count == 0) owned_with_room_.erase(key);
  }
}

void ClusterState::Unindex(NodeState& node) {
  for (NodeOffering& no : node.offerings) {
    AddToIndex(no, -1);
    no.summary = OfferingSummary{};
  }
  node.held_units = 0;
}

void ClusterState::Reindex(absl::string_view node_name) {
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) return;
  NodeState& node = *it->second;
  node.held_units = 0;
  for (NodeOffering& no : node.offerings) {
    AddToIndex(no, -1);
    no.summary = Summarise(node, no);
    AddToIndex(no, +1);
    node.held_units += no.summary.held_units;
  }
  const std::vector<RoomRow> rows = RoomRowsOf(node);
  for (size_t o = 0; o < rows.size(); ++o) room_rows_[o][node.slot] = rows[o];
}

int32_t ClusterState::OwnedUnitsWithRoom(ProjectId project, OfferingId offering) const {
  auto it = owned_with_room_.find(std::make_pair(project, offering));
  return it == owned_with_room_.end() ? 0 : it->second;
}

// ---------------------------------------------------------------------------------------------
// Pods

void ClusterState::ApplyPod(const PodObject& pod) {
  const std::string key = pod.Key();
  auto it = pods_.find(key);
  if (it != pods_.end() && !pod.uid.empty() && !it->second.uid.empty() &&
      it->second.uid != pod.uid) {
    // A new pod with the old one's name: whatever the old one held went with it.
    Release(key);
    it = pods_.end();
  }
  PodRecord* existing = it == pods_.end() ? nullptr : &it->second;
  if (pod.Terminal()) {
    if (existing != nullptr) Release(key);
    return;
  }
  if (pod.node_name.empty()) {
    // Pending: our reservation is a bind in flight; anything else is stale.
    if (existing != nullptr && existing->source == HoldingSource::kReserved && !pod.terminating) {
      return;
    }
    if (existing != nullptr) Release(key);
    return;
  }

  // A pod's project is fixed when it is first recorded: relabelling a namespace moves new
  // pods only (usage already counted stays where it was counted).
  ProjectId project = existing != nullptr ? existing->project : kNoProject;
  auto record = [&](Assignment a, HoldingSource source) {
    if (project == kNoProject) project = InternProject(ProjectOfNamespace(pod.namespace_name));
    PodRecord rec;
    rec.key = key;
    rec.uid = pod.uid;
    rec.namespace_name = pod.namespace_name;
    rec.project = project;
    rec.assignment = std::move(a);
    rec.source = source;
    if (!rec.uid.empty()) uid_to_key_[rec.uid] = key;
    auto [pos, inserted] = pods_.insert_or_assign(key, std::move(rec));
    AddHolding(pos->second);
  };

  absl::StatusOr<Assignment> parsed =
      ParseAssignmentAnnotations(pod.annotations, pod.node_name, *catalog_);
  if (parsed.ok()) {
    if (existing != nullptr && existing->assignment == *parsed) {
      existing->source = HoldingSource::kConfirmed;
      if (existing->uid.empty() && !pod.uid.empty()) {
        existing->uid = pod.uid;
        uid_to_key_[pod.uid] = key;
      }
      return;
    }
    if (existing != nullptr) Release(key);
    record(*std::move(parsed), HoldingSource::kConfirmed);
    return;
  }

  // Bound without (a readable) assignment: by another scheduler, by hand, or before us.
  const CatalogRequest request = ResolveCatalogRequest(*catalog_, pod);
  if (request.offering == kNoOffering) {
    if (existing != nullptr) Release(key);  // I6: nothing of ours
    return;
  }
  const Offering& offering = catalog_->Get(request.offering);
  const size_t need =
      offering.sharing == Sharing::kExclusive
          ? static_cast<size_t>(std::min<int64_t>(request.amount, kMaxUnitsPerPod))
          : 1;
  if (existing != nullptr && existing->source == HoldingSource::kCharged &&
      existing->assignment.node == pod.node_name &&
      existing->assignment.offering == request.offering &&
      existing->assignment.units.size() == need) {
    return;  // already charged; status updates must not move the charge around
  }
  if (existing != nullptr) Release(key);
  if (project == kNoProject) project = InternProject(ProjectOfNamespace(pod.namespace_name));

  // Charge conservatively: which device the pod got is unknown, so whole units are charged,
  // free ones first (lowest index). If the node has too little free capacity the rest is
  // charged anyway, over capacity (the pod does run there): Audit reports those units and
  // they stay full until the facts clear up, instead of being handed out twice.
  Assignment a;
  a.node = pod.node_name;
  a.offering = request.offering;
  const NodeState* node = FindNode(pod.node_name);
  const NodeOffering* no = node != nullptr ? node->Find(request.offering) : nullptr;
  int32_t replicas = offering.shared() ? std::max(1, offering.replicas) : 1;
  if (no != nullptr) {
    replicas = no->replicas;
    // rank: 0 free, 1 held by the same project, 2 held by others, 3 draining
    std::vector<std::pair<int, int32_t>> ranked;
    ranked.reserve(no->units.size());
    for (const Unit& u : no->units) {
      int rank = u.draining ? 3 : u.Empty() ? 0 : u.owner == project ? 1 : 2;
      ranked.emplace_back(rank, u.index);
    }
    std::sort(ranked.begin(), ranked.end());
    for (size_t i = 0; i < ranked.size() && a.units.size() < need; ++i) {
      a.units.push_back(ranked[i].second);
    }
  }
  // Not even that many units known: charge placeholder units beyond the known ones.
  int32_t next = no != nullptr ? static_cast<int32_t>(no->units.size()) : 0;
  while (a.units.size() < need) a.units.push_back(next++);
  std::sort(a.units.begin(), a.units.end());
  a.amount_per_unit = offering.sharing == Sharing::kExclusive ? 1 : replicas;
  record(std::move(a), HoldingSource::kCharged);
}

void ClusterState::RemovePod(absl::string_view key) { Release(key); }

const PodRecord* ClusterState::FindPod(absl::string_view key) const {
  auto it = pods_.find(key);
  return it == pods_.end() ? nullptr : &it->second;
}

const PodRecord* ClusterState::FindPodByUid(absl::string_view uid) const {
  auto it = uid_to_key_.find(uid);
  return it == uid_to_key_.end() ? nullptr : FindPod(it->second);
}

// ---------------------------------------------------------------------------------------------
// Namespaces, projects and quotas

std::string ClusterState::ProjectOfNamespace(absl::string_view namespace_name) const {
  auto it = namespace_labels_.find(namespace_name);
  if (it != namespace_labels_.end()) {
    auto label = it->second.find(options_.project_label);
    if (label != it->second.end() && !label->second.empty()) return label->second;
  }
  return std::string(namespace_name);
}

void ClusterState::ApplyNamespace(const NamespaceObject& ns) {
  const std::string before = ProjectOfNamespace(ns.name);
  // Only the project label matters to the mirror.
  std::map<std::string, std::string> kept;
  auto label = ns.labels.find(options_.project_label);
  if (label != ns.labels.end()) kept.emplace(label->first, label->second);
  namespace_labels_[ns.name] = std::move(kept);
  if (ProjectOfNamespace(ns.name) != before) RecomputeQuotas();
}

void ClusterState::RemoveNamespace(absl::string_view name) {
  const std::string before = ProjectOfNamespace(name);
  namespace_labels_.erase(name);
  if (ProjectOfNamespace(name) != before) RecomputeQuotas();
}

void ClusterState::ApplyQuota(const ResourceQuotaObject& quota) {
  quotas_[absl::StrCat(quota.namespace_name, "/", quota.name)] = quota;
  RecomputeQuotas();
}

void ClusterState::RemoveQuota(absl::string_view namespace_name, absl::string_view name) {
  if (quotas_.erase(absl::StrCat(namespace_name, "/", name)) != 0) RecomputeQuotas();
}

void ClusterState::RecomputeQuotas() {
  for (ProjectState& p : projects_) p.quota.clear();
  // Kubernetes enforces every ResourceQuota of a namespace, so within a namespace the tightest
  // object applies; a project spanning several namespaces gets the sum of theirs.
  std::map<std::string, absl::flat_hash_map<OfferingId, int64_t>> per_namespace;
  for (const auto& [key, quota] : quotas_) {
    auto& limits = per_namespace[quota.namespace_name];
    for (const Offering& offering : catalog_->offerings()) {
      const int64_t units = QuotaOfObject(offering, quota);
      if (units < 0) continue;
      auto [it, inserted] = limits.emplace(offering.id, units);
      if (!inserted) it->second = std::min(it->second, units);
    }
  }
  for (const auto& [ns, limits] : per_namespace) {
    if (limits.empty()) continue;
    const ProjectId id = InternProject(ProjectOfNamespace(ns));
    for (const auto& [offering, units] : limits) {
      projects_[static_cast<size_t>(id)].quota[offering] += units;
    }
  }
  // The static quota file names projects directly; where a ResourceQuota also limits the
  // project, both apply, so the tighter one counts.
  for (const auto& [project, hard] : options_.static_quotas) {
    ResourceQuotaObject object;
    object.hard_milli = hard;
    const ProjectId id = InternProject(project);
    auto& quota = projects_[static_cast<size_t>(id)].quota;
    for (const Offering& offering : catalog_->offerings()) {
      const int64_t units = QuotaOfObject(offering, object);
      if (units < 0) continue;
      auto [it, inserted] = quota.emplace(offering.id, units);
      if (!inserted) it->second = std::min(it->second, units);
    }
  }
}

ProjectId ClusterState::InternProject(absl::string_view name) {
  auto it = project_ids_.find(name);
  if (it != project_ids_.end()) return it->second;
  const ProjectId id = static_cast<ProjectId>(projects_.size());
  ProjectState p;
  p.name = std::string(name);
  projects_.push_back(std::move(p));
  project_ids_.emplace(std::string(name), id);
  return id;
}

ProjectId ClusterState::FindProject(absl::string_view name) const {
  auto it = project_ids_.find(name);
  return it == project_ids_.end() ? kNoProject : it->second;
}

int64_t ClusterState::Usage(ProjectId project, OfferingId offering) const {
  if (project < 0 || static_cast<size_t>(project) >= projects_.size()) return 0;
  const auto& usage = projects_[static_cast<size_t>(project)].usage;
  auto it = usage.find(offering);
  return it == usage.end() ? 0 : it->second;
}

int64_t ClusterState::Quota(ProjectId project, OfferingId offering) const {
  if (project >= 0 && static_cast<size_t>(project) < projects_.size()) {
    const auto& quota = projects_[static_cast<size_t>(project)].quota;
    auto it = quota.find(offering);
    if (it != quota.end()) return it->second;
  }
  return options_.unlimited_without_quota ? -1 : 0;
}

void ClusterState::ApplyBatch(const ObjectBatch& batch) {
  // Namespaces and quotas first (projects and quotas are then right for the pods), with one
  // quota recomputation instead of one per object.
  for (const NamespaceObject& ns : batch.namespaces) {
    std::map<std::string, std::string> kept;
    auto label = ns.labels.find(options_.project_label);
    if (label != ns.labels.end()) kept.emplace(label->first, label->second);
    namespace_labels_[ns.name] = std::move(kept);
  }
  for (const ResourceQuotaObject& quota : batch.quotas) {
    quotas_[absl::StrCat(quota.namespace_name, "/", quota.name)] = quota;
  }
  RecomputeQuotas();
  for (const NodeObject& node : batch.nodes) ApplyNode(node);
  for (const PodObject& pod : batch.pods) ApplyPod(pod);
}

// ---------------------------------------------------------------------------------------------
// Decisions

int64_t ClusterState::UsageDelta(const Offering& offering, const NodeOffering& no,
                                 const Assignment& a, ProjectId project) const {
  switch (offering.sharing) {
    case Sharing::kExclusive:
      return static_cast<int64_t>(a.units.size());
    case Sharing::kTimeSliced: {
      int64_t delta = 0;
      for (int32_t index : a.units) {
        const Unit& unit = no.units[static_cast<size_t>(index)];
        bool holds = false;
        for (const Holding& h : unit.holders) {
          auto it = pods_.find(h.pod_key);
          if (project != kNoProject && it != pods_.end() && it->second.project == project) {
            holds = true;
          }
        }
        if (!holds) ++delta;
      }
      return delta;
    }
    case Sharing::kMps:
      return static_cast<int64_t>(a.units.size()) * a.amount_per_unit;
  }
  return 0;
}

absl::Status ClusterState::Reserve(const PodClaim& claim, const Assignment& a,
                                   HoldingSource source) {
  if (claim.key.empty()) return absl::InvalidArgumentError("reserve: pod key is empty");
  if (auto it = pods_.find(claim.key); it != pods_.end()) {
    if (it->second.assignment == a) return absl::OkStatus();  // a retried bind
    return absl::AlreadyExistsError(
        absl::StrCat("pod ", claim.key, " already holds units on node ", it->second.assignment.node));
  }
  const std::string project_name =
      claim.project.empty() ? ProjectOfNamespace(claim.namespace_name) : claim.project;
  if (project_name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve ", claim.key, ": no project and no namespace"));
  }
  auto fail = [&](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat("reserve ", claim.key, ": ", parts...));
  };

  const NodeState* node = FindNode(a.node);
  if (node == nullptr || node->removed) return fail("node ", a.node, " unknown");
  if (a.offering < 0 || static_cast<size_t>(a.offering) >= catalog_->size()) {
    return fail("offering ", a.offering, " not in the catalog");
  }
  const Offering& offering = catalog_->Get(a.offering);
  const NodeOffering* no = node->Find(a.offering);
  if (no == nullptr || no->advertised_name.empty()) {
    return fail("offering ", offering.resource, " not on node ", a.node);
  }
  if (!no->unusable_reason.empty()) {
    return fail("offering ", offering.resource, " unusable on node ", a.node, ": ",
                no->unusable_reason);
  }
  if (a.units.empty()) return fail("no unit index given");
  if (a.units.size() > static_cast<size_t>(kMaxUnitsPerPod)) {
    return fail(a.units.size(), " units, at most ", kMaxUnitsPerPod);
  }
  for (size_t i = 0; i < a.units.size(); ++i) {
    const int32_t index = a.units[i];
    if (index < 0 || static_cast<size_t>(index) >= no->units.size()) {
      return fail("unit index ", index, " out of range on node ", a.node, " (",
                  no->advertised_units, " units of ", offering.resource, ")");
    }
    if (i > 0 && index <= a.units[i - 1]) return fail("unit indices not sorted and distinct");
  }
  for (int32_t index : a.units) {
    if (no->units[static_cast<size_t>(index)].draining) {
      return fail("unit ", UnitId(a.node, offering.resource, index), " is draining");
    }
  }
  switch (offering.sharing) {
    case Sharing::kExclusive:
      if (a.amount_per_unit != 1) return fail("exclusive units take amount 1");
      break;
    case Sharing::kTimeSliced:
      if (a.amount_per_unit != 1 || a.units.size() != 1) {
        return fail("time-sliced takes one ticket of one unit");
      }
      break;
    case Sharing::kMps:
      if (a.units.size() != 1) return fail("mps takes shares of one unit");
      if (a.amount_per_unit < 1 || a.amount_per_unit > no->replicas) {
        return fail("mps amount ", a.amount_per_unit, " outside 1..", no->replicas);
      }
      break;
  }
  for (int32_t index : a.units) {
    const Unit& unit = no->units[static_cast<size_t>(index)];
    if (unit.Free() < a.amount_per_unit) {
      return fail("not enough free capacity on unit ", UnitId(a.node, offering.resource, index),
                  " (", unit.Free(), " free, ", a.amount_per_unit, " wanted)");
    }
  }
  const ProjectId project = FindProject(project_name);
  const bool single_owner = offering.sharing == Sharing::kTimeSliced ||
                            (offering.sharing == Sharing::kMps && offering.mps_single_project);
  if (single_owner) {
    for (int32_t index : a.units) {
      const Unit& unit = no->units[static_cast<size_t>(index)];
      if (!unit.Empty() && (project == kNoProject || unit.owner != project)) {
        return fail("unit ", UnitId(a.node, offering.resource, index),
                    " is owned by another project");
      }
    }
  }
  const int64_t delta = UsageDelta(offering, *no, a, project);
  const int64_t quota = Quota(project, a.offering);
  const int64_t usage = Usage(project, a.offering);
  // Only new usage is checked: joining a unit the project already owns adds none, and stays
  // allowed even after the quota was lowered below what the project holds (the filter's rule).
  if (quota >= 0 && delta > 0 && usage + delta > quota) {
    return fail("quota of project ", project_name, " for ", offering.resource, " exceeded (",
                usage, " used + ", delta, " > ", quota, ")");
  }

  // Every check passed: commit (nothing below can fail).
  PodRecord rec;
  rec.key = claim.key;
  rec.uid = claim.uid;
  rec.namespace_name = claim.namespace_name;
  rec.project = InternProject(project_name);
  rec.assignment = a;
  rec.source = source;
  if (!rec.uid.empty()) uid_to_key_[rec.uid] = rec.key;
  auto [pos, inserted] = pods_.emplace(claim.key, std::move(rec));
  AddHolding(pos->second);
  return absl::OkStatus();
}

absl::Status ClusterState::Confirm(absl::string_view pod_key, absl::Time bound_at) {
  auto it = pods_.find(pod_key);
  if (it == pods_.end()) {
    return absl::NotFoundError(absl::StrCat("confirm: pod ", pod_key, " holds nothing"));
  }
  if (it->second.source == HoldingSource::kReserved) {
    it->second.source = HoldingSource::kConfirmed;
    it->second.bound_by_us_at = bound_at;
  }
  return absl::OkStatus();
}

bool ClusterState::Release(absl::string_view pod_key) {
  auto it = pods_.find(pod_key);
  if (it == pods_.end()) return false;
  RemoveHolding(it->second);
  if (!it->second.uid.empty()) {
    auto u = uid_to_key_.find(it->second.uid);
    if (u != uid_to_key_.end() && u->second == it->second.key) uid_to_key_.erase(u);
  }
  pods_.erase(it);
  return true;
}

// ---------------------------------------------------------------------------------------------
// Audit

AuditReport ClusterState::Audit() const {
  AuditReport report;
  auto problem = [&](auto&&... parts) {
    if (report.problems.size() < kMaxProblems) report.problems.push_back(absl::StrCat(parts...));
  };

  // Recount every unit from the pod records alone.
  struct Count {
    int64_t used = 0;
    int64_t holders = 0;
    // project -> (holdings, amount); inline for the usual single project (no allocation)
    absl::InlinedVector<std::pair<ProjectId, std::pair<int64_t, int64_t>>, 1> projects;
  };
  absl::flat_hash_map<const Unit*, Count> counts;
  counts.reserve(pods_.size());
  for (const auto& [key, pod] : pods_) {
    const Assignment& a = pod.assignment;
    const NodeState* node = FindNode(a.node);
    const NodeOffering* no = node != nullptr ? node->Find(a.offering) : nullptr;
    for (int32_t index : a.units) {
      if (no == nullptr || index < 0 || static_cast<size_t>(index) >= no->units.size()) {
        const bool known = a.offering >= 0 && static_cast<size_t>(a.offering) < catalog_->size();
        problem("pod ", key, " holds unit ",
                UnitId(a.node, known ? catalog_->Get(a.offering).resource : "?", index),
                " that the mirror does not have");
        continue;
      }
      Count& c = counts[&no->units[static_cast<size_t>(index)]];
      c.used += a.amount_per_unit;
      c.holders += 1;
      const ProjectId project = pod.project;
      auto p = std::find_if(c.projects.begin(), c.projects.end(),
                            [&](const auto& e) { return e.first == project; });
      if (p == c.projects.end()) {
        c.projects.push_back({project, {1, a.amount_per_unit}});
      } else {
        p->second.first += 1;
        p->second.second += a.amount_per_unit;
      }
    }
  }

  absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int64_t> usage;
  auto project_name = [&](ProjectId id) {
    return id >= 0 && static_cast<size_t>(id) < projects_.size()
               ? projects_[static_cast<size_t>(id)].name
               : std::string("<none>");
  };
  const Count empty{};
  // The derived counters, recomputed from the units (Reindex must have kept them current).
  absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int32_t> with_room;
  for (const auto& entry : nodes_) {
    const std::string& name = entry.first;
    int32_t held_units = 0;
    for (const NodeOffering& no : entry.second->offerings) {
      const OfferingSummary fresh = Summarise(*entry.second, no);
      held_units += fresh.held_units;
      if (!(fresh == no.summary)) {
        ++report.stale_summaries;
        problem("summary of ", catalog_->Get(no.offering).resource, " on node ", name,
                " disagrees with its units");
      }
      if (fresh.open) {
        for (const OwnedUnits& o : fresh.owned) {
          if (o.with_room > 0) with_room[{o.project, no.offering}] += o.with_room;
        }
      }
    }
    if (held_units != entry.second->held_units) {
      ++report.stale_summaries;
      problem("node ", name, " counts ", entry.second->held_units, " held units, its units ",
              held_units);
    }
    const uint32_t slot = entry.second->slot;
    const std::vector<RoomRow> rows = RoomRowsOf(*entry.second);
    for (size_t o = 0; o < rows.size(); ++o) {
      if (slot == kUnknownSlot || slot >= slot_count_ || !(room_rows_[o][slot] == rows[o])) {
        ++report.stale_summaries;
        problem("room row ", slot, " of ", catalog_->Get(static_cast<OfferingId>(o)).resource,
                " for node ", name, " disagrees with its summary");
        break;
      }
    }
  }
  // Rows no node owns (the unknown node's, and freed slots) must say so.
  std::vector<bool> owned_slot(slot_count_, false);
  for (const auto& entry : nodes_) {
    const uint32_t slot = entry.second->slot;
    if (slot >= slot_count_) continue;  // reported above
    if (owned_slot[slot]) {
      ++report.stale_summaries;
      problem("room row ", slot, " belongs to two nodes, one of them ", entry.first);
    }
    owned_slot[slot] = true;
  }
  for (uint32_t slot = 0; slot < slot_count_; ++slot) {
    if (owned_slot[slot]) continue;
    for (const std::vector<RoomRow>& table : room_rows_) {
      if (!(table[slot] == RoomRow{})) {
        ++report.stale_summaries;
        problem("room row ", slot, " belongs to no node but is not empty");
        break;
      }
    }
  }
  if (with_room != owned_with_room_) {
    ++report.stale_summaries;
    problem("the per-project index of owned units with room disagrees with the nodes' units");
  }
  for (const auto& entry : nodes_) {
    const std::string& name = entry.first;
    for (const NodeOffering& no : entry.second->offerings) {
      const Offering& offering = catalog_->Get(no.offering);
      for (const Unit& unit : no.units) {
        auto found = counts.find(&unit);
        const Count& c = found == counts.end() ? empty : found->second;
        // Built only for a problem line: 280,000 clean units must not cost 280,000 strings.
        auto id = [&] { return UnitId(name, offering.resource, unit.index); };
        bool bad = false;
        if (c.used > unit.capacity) {
          bad = true;
          problem("unit ", id(), " oversubscribed: ", c.used, " used of capacity ", unit.capacity,
                  " (holders ", HolderList(unit), ")");
        }
        if (c.used != unit.used || c.holders != static_cast<int64_t>(unit.holders.size())) {
          bad = true;
          problem("unit ", id(), " counters disagree with pod records: used ", unit.used, " vs ",
                  c.used, ", holders ", unit.holders.size(), " vs ", c.holders);
        }
        if (bad) ++report.oversubscribed_units;
        const bool single_owner =
            offering.sharing != Sharing::kMps || offering.mps_single_project;
        if (c.projects.size() >= 2 && single_owner) {
          ++report.multi_owner_units;
          std::vector<std::string> names;
          for (const auto& p : c.projects) names.push_back(project_name(p.first));
          problem("unit ", id(), " has holders of ", c.projects.size(), " projects: ",
                  absl::StrJoin(names, ","));
        }
        // The owner field must agree with the recount.
        bool owner_ok;
        if (c.projects.empty()) {
          owner_ok = unit.owner == kNoProject;
        } else if (c.projects.size() == 1) {
          owner_ok = unit.owner == c.projects[0].first;
        } else if (offering.sharing == Sharing::kMps) {
          owner_ok = unit.owner == kNoProject;
        } else {
          owner_ok = std::any_of(c.projects.begin(), c.projects.end(),
                                 [&](const auto& p) { return p.first == unit.owner; });
        }
        if (!owner_ok) {
          problem("unit ", id(), " owner ", project_name(unit.owner),
                  " disagrees with its holders");
        }
        for (const auto& [project, held] : c.projects) {
          int64_t& u = usage[{project, no.offering}];
          switch (offering.sharing) {
            case Sharing::kExclusive:
              u += held.first;
              break;
            case Sharing::kTimeSliced:
              u += 1;
              break;
            case Sharing::kMps:
              u += held.second;
              break;
          }
        }
      }
    }
  }

  for (size_t p = 0; p < projects_.size(); ++p) {
    for (const auto& [offering, value] : projects_[p].usage) {
      auto it = usage.find({static_cast<ProjectId>(p), offering});
      const int64_t recount = it == usage.end() ? 0 : it->second;
      if (recount != value) {
        problem("project ", projects_[p].name, " usage of ", catalog_->Get(offering).resource,
                " is ", value, " but pod records give ", recount);
      }
    }
  }
  for (const auto& [pair, value] : usage) {
    const auto& [project, offering] = pair;
    if (Usage(project, offering) != value && Usage(project, offering) == 0) {
      problem("project ", project_name(project), " usage of ", catalog_->Get(offering).resource,
              " is 0 but pod records give ", value);
    }
    const int64_t quota = Quota(project, offering);
    if (quota >= 0 && value > quota) {
      ++report.over_quota_projects;
      problem("project ", project_name(project), " holds ", value, " of ",
              catalog_->Get(offering).resource, ", over its quota ", quota);
    }
  }
  return report;
}

}  // namespace gse
