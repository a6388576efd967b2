// ClusterState, nodes: what a Node object says the node can hand out.
//
//  * A node's offerings come from its allocatable keys that the catalog resolves, and its GPU
//    feature discovery labels (PROTOCOL.md §5.2) under the base name of the key (the key with a
//    trailing ".shared" removed: renameByDefault keeps labels under the original name).
//  * Units = allocatable / replicas: allocatable is the truth for what can be handed out;
//    `<base>.replicas` sets the tickets or shares per unit, `.product` the product, and the
//    `.count` labels only describe.
//  * A holding may name a node, offering or unit the mirror does not (or no longer) see
//    advertised: the API server is the truth, so such units are created on demand as draining
//    (they keep holders, take no new ones). A node that exists only for such units is marked
//    removed; when its Node object arrives the units that it advertises become live again.
//  * An offering that a node no longer advertises is kept only while held; it is marked by an
//    empty advertised_name.
//  * Where a node agent publishes its inventory (gpu.themelio.io/inventory) and it agrees with
//    allocatable (healthy units = allocatable / replicas, same replicas), the published units
//    are the units: unit i gets the UUID of the agent's unit i, and unhealthy ones take no new
//    holders. An inventory that disagrees is flagged (NodeOffering::inventory_problem), not
//    trusted.
//  * DRA mode (docs/dra.md): a catalog offering the node does not advertise (allocatable 0 or
//    absent) while a DeviceClass maps its name is DRA-backed (KEP-5004's per-node rule): its
//    units are the class's devices on the node, in the allocator's walk order, named by
//    device and UUID; a device a user-made ResourceClaim holds takes no new holders.
#include "state/cluster_state.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "state/agent_inventory.h"
#include "state/cluster_state_internal.h"

namespace gse {
namespace {

// Unit indices are 0..9999 (assignment.h): a node cannot advertise more units of one offering,
// so hostile labels or allocatable values cannot make the mirror allocate without bound.
constexpr int32_t kMaxUnitsPerNodeOffering = 10000;

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
  // The node agent's published units, when they agree with allocatable and replicas
  // (count then is their number); else `inventory_problem` says why they are not used.
  std::vector<PublishedUnit> published;
  std::string inventory_problem;
  // DRA-backed (NodeOffering::dra): the class's devices on the node in walk order, whether a
  // user-made claim holds each, and what the model reported.
  bool dra = false;
  std::vector<DraUnit> dra_units;
  std::vector<bool> dra_user_claimed;
  std::string dra_problem;
  // DRA-backed offerings: the allocator's pick for one device (NodeOffering::dra_pick).
  bool dra_predicted = false;
  DraPrediction dra_prediction;
};

struct DerivedNode {
  std::string product;
  int32_t gpu_count = 0;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted, selector keys only
  std::vector<DerivedOffering> offerings;                    // sorted by id
  bool agent = false;  // the Node carries the agent's inventory annotation
  uint64_t fingerprint = 0;
};

// Label lookups on one Node object; GPU feature discovery labels of a resource sit under its
// base name ("<base>.<suffix>").
class NodeLabels {
 public:
  explicit NodeLabels(const NodeObject& node) : node_(node) {}
  const std::string* Find(absl::string_view name) const {
    auto it = node_.labels.find(std::string(name));
    return it == node_.labels.end() ? nullptr : &it->second;
  }
  const std::string* Of(absl::string_view base, absl::string_view suffix) {
    key_.assign(base.data(), base.size());  // reused buffer
    key_.push_back('.');
    key_.append(suffix.data(), suffix.size());
    auto it = node_.labels.find(key_);
    return it == node_.labels.end() ? nullptr : &it->second;
  }

 private:
  const NodeObject& node_;
  std::string key_;
};

// One advertised resource of the catalog's `offering`: replicas, unit count and whether the
// node can serve it as catalogued.
DerivedOffering DeriveOffering(const Offering& offering, const std::string& resource,
                               int64_t milli, absl::string_view node_product, NodeLabels& labels) {
  DerivedOffering o;
  o.id = offering.id;
  o.advertised = resource;
  absl::string_view base = resource;
  absl::ConsumeSuffix(&base, kSharedSuffix);

  const int64_t replicas_label = LabelInt(labels.Of(base, "replicas"));
  const int32_t catalog_replicas = offering.shared() ? std::max(1, offering.replicas) : 1;
  o.replicas = replicas_label >= 1 ? static_cast<int32_t>(replicas_label) : catalog_replicas;

  // Allocatable is what can be handed out: the device plugin takes unhealthy devices out of
  // it, and a mixed-MIG node advertises 0 whole GPUs however many it has. The `.count` label
  // only describes the hardware; held units beyond allocatable drain (ResizeUnits).
  const int64_t count = std::max<int64_t>(0, milli) / 1000 / o.replicas;
  o.count = static_cast<int32_t>(std::min<int64_t>(count, kMaxUnitsPerNodeOffering));

  const std::string* product_label = labels.Of(base, "product");
  absl::string_view product =
      product_label != nullptr ? absl::string_view(*product_label) : node_product;
  if (offering.sharing == Sharing::kExclusive && o.replicas > 1) {
    o.reason = kReasonTimeSliced;
  } else if (offering.shared() && replicas_label == 1) {
    o.reason = kReasonNotShared;
  } else if (!offering.product.empty() && !absl::StartsWith(product, offering.product)) {
    o.reason = kReasonProduct;
  }
  return o;
}

uint64_t FingerprintOf(const DerivedNode& d) {
  Fingerprint fp;
  fp.Add(d.product);
  fp.Add(int64_t{d.gpu_count});
  fp.Add(int64_t{d.agent});
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
    fp.Add(static_cast<int64_t>(o.published.size()));
    for (const PublishedUnit& u : o.published) {
      fp.Add(u.uuid);
      fp.Add(int64_t{u.healthy});
    }
    fp.Add(o.inventory_problem);
    fp.Add(int64_t{o.dra});
    fp.Add(static_cast<int64_t>(o.dra_units.size()));
    for (size_t i = 0; i < o.dra_units.size(); ++i) {
      fp.Add(o.dra_units[i].id.ToString());
      fp.Add(o.dra_units[i].uuid);
      fp.Add(int64_t{o.dra_user_claimed[i]});
    }
    fp.Add(o.dra_problem);
    // The pick changes with claims that change nothing else of the node: it must be part of
    // the fingerprint, or an unchanged fingerprint would keep a stale NodeOffering::dra_pick.
    fp.Add(int64_t{o.dra_predicted});
    fp.Add(static_cast<int64_t>(o.dra_prediction.kind));
    fp.Add(static_cast<int64_t>(o.dra_prediction.devices.size()));
    for (const DraDeviceId& id : o.dra_prediction.devices) fp.Add(id.ToString());
    fp.Add(o.dra_prediction.reason);
  }
  return fp.value();
}

// The node agent's inventory against what allocatable and the labels say: an offering's
// published units are used when the agent publishes it with the node's replicas and as many
// healthy units as allocatable advertises (kubelet takes unhealthy devices out of
// allocatable); otherwise, or when the annotation does not parse, the offering is flagged
// (inventory_problem) and its units come from allocatable alone.
void ApplyPublishedInventory(const Catalog& catalog, const std::string& json, DerivedNode& d) {
  absl::StatusOr<PublishedInventory> inventory = ParsePublishedInventory(json);
  for (DerivedOffering& o : d.offerings) {
    if (o.dra) continue;  // DRA-backed: the slices name the devices, not the agent
    if (!inventory.ok()) {
      o.inventory_problem = std::string(inventory.status().message());
      continue;
    }
    const Offering& offering = catalog.Get(o.id);
    auto it = inventory->find(offering.resource);
    if (it == inventory->end()) it = inventory->find(std::string(o.advertised));
    if (it == inventory->end()) continue;  // the agent does not serve it here
    const PublishedOffering& p = it->second;
    int32_t healthy = 0;
    for (const PublishedUnit& u : p.units) healthy += u.healthy ? 1 : 0;
    if (p.replicas != o.replicas || healthy != o.count ||
        p.units.size() > static_cast<size_t>(kMaxUnitsPerNodeOffering)) {
      o.inventory_problem = absl::StrCat(
          "the node agent publishes ", p.units.size(), " unit(s) (", healthy, " healthy) x ",
          p.replicas, " replicas; allocatable and labels say ", o.count, " unit(s) x ",
          o.replicas, " replicas");
      continue;
    }
    o.published = p.units;
    o.count = static_cast<int32_t>(p.units.size());
  }
}

constexpr absl::string_view kReasonDraNotShared =
    "offering is shared, the DRA device allows one allocation";
constexpr absl::string_view kReasonDraNotUnderstood = "DeviceClass selectors not understood";

// One DRA-backed offering: the devices of the class that maps the name, on this node, in the
// allocator's walk order. A shared offering needs devices that take several allocations (else
// each pod gets a whole device); an exclusive one takes any device (a MIG device with
// allowMultipleAllocations still takes one extended-resource claim, fact sheet section 5, and
// bind verifies the device). A product prefix must match each device's productName.
DerivedOffering DeriveDraOffering(const Offering& offering, const DraDeviceClass& cls,
                                  const DraState& dra, const NodeObject& node,
                                  const std::vector<DraHolder>& holders) {
  DerivedOffering o;
  o.id = offering.id;
  o.advertised = offering.resource;  // the catalog outlives the derivation
  o.dra = true;
  o.replicas = offering.shared() ? std::max(1, offering.replicas) : 1;
  DraNodeUnits units = dra.UnitsOf(cls.name, node.name);
  if (units.units.size() > static_cast<size_t>(kMaxUnitsPerNodeOffering)) {
    units.units.resize(static_cast<size_t>(kMaxUnitsPerNodeOffering));
  }
  for (const std::string& p : units.problems) {
    absl::StrAppend(&o.dra_problem, o.dra_problem.empty() ? "" : "; ", p);
  }
  if (!units.understood) o.reason = kReasonDraNotUnderstood;
  for (const DraUnit& u : units.units) {
    if (!o.reason.empty()) break;
    if (offering.shared() && !u.shared) o.reason = kReasonDraNotShared;
    if (!offering.product.empty() && !absl::StartsWith(u.product, offering.product)) {
      o.reason = kReasonProduct;
    }
  }
  o.count = static_cast<int32_t>(units.units.size());
  o.dra_units = std::move(units.units);
  o.dra_user_claimed.assign(o.dra_units.size(), false);
  for (const DraHolder& h : holders) {
    if (h.extended) continue;  // the scheduler's claim for a pod the mirror charges
    for (size_t i = 0; i < o.dra_units.size(); ++i) {
      if (o.dra_units[i].id == h.device) o.dra_user_claimed[i] = true;
    }
  }
  // What filter checks on every candidate (DraPredictedVerdict), predicted here once per
  // change of the node's DRA objects rather than once per request.
  o.dra_predicted = true;
  o.dra_prediction = dra.PredictExtendedResourcePick(cls.name, node.name, 1, DraPredictOptions{});
  return o;
}

// KEP-5004's per-node rule for every catalog offering the node does not advertise: where a
// DeviceClass maps the name and allocatable is 0 or absent, the offering is DRA-backed.
void DeriveDraOfferings(const Catalog& catalog, const DraState& dra, const NodeObject& node,
                        DerivedNode& d) {
  std::vector<DraHolder> holders;
  bool holders_read = false;
  for (const Offering& offering : catalog.offerings()) {
    auto same = std::find_if(d.offerings.begin(), d.offerings.end(),
                             [&](const DerivedOffering& o) { return o.id == offering.id; });
    if (same != d.offerings.end() && same->count > 0) continue;  // the device plugin serves it
    if (dra.KindOn(offering.resource, node.allocatable_milli) != DraNodeKind::kDra) continue;
    const DraDeviceClass* cls = dra.ClassForResource(offering.resource);
    if (cls == nullptr) continue;
    if (!holders_read) {
      holders = dra.HoldersOn(node.name);
      holders_read = true;
    }
    DerivedOffering o = DeriveDraOffering(offering, *cls, dra, node, holders);
    // No device of the class here and nothing to report: the node offers nothing of it (a
    // CPU node, or a device-plugin node without this name), as KEP-5004's "neither".
    if (o.count == 0 && o.reason.empty() && o.dra_problem.empty()) continue;
    if (same != d.offerings.end()) {
      *same = std::move(o);
    } else {
      d.offerings.push_back(std::move(o));
    }
  }
}

DerivedNode Derive(const Catalog& catalog, const NodeObject& node, const DraState* dra) {
  DerivedNode d;
  NodeLabels labels(node);
  const std::string* gpu_product = labels.Find(kGpuProductLabel);
  if (gpu_product != nullptr) d.product = *gpu_product;
  d.gpu_count = static_cast<int32_t>(std::max<int64_t>(0, LabelInt(labels.Find(kGpuCountLabel))));
  d.agent = node.agent_inventory.has_value();

  for (const auto& [resource, milli] : node.allocatable_milli) {
    const Offering* offering = catalog.Find(resource);
    if (offering == nullptr) continue;
    // A node may advertise an offering under its name and an alias at once; the canonical
    // name wins, else the first key in name order.
    auto same = std::find_if(d.offerings.begin(), d.offerings.end(),
                             [&](const DerivedOffering& o) { return o.id == offering->id; });
    if (same != d.offerings.end() && resource != offering->resource) continue;
    const DerivedOffering o = DeriveOffering(*offering, resource, milli, d.product, labels);
    if (same != d.offerings.end()) {
      *same = o;
    } else {
      d.offerings.push_back(o);
    }
  }
  if (dra != nullptr) DeriveDraOfferings(catalog, *dra, node, d);
  std::sort(d.offerings.begin(), d.offerings.end(),
            [](const DerivedOffering& a, const DerivedOffering& b) { return a.id < b.id; });
  if (node.agent_inventory.has_value()) ApplyPublishedInventory(catalog, *node.agent_inventory, d);

  // Scoring checks node selectors; keep only the labels some offering selects on.
  for (const Offering& offering : catalog.offerings()) {
    for (const auto& [k, v] : offering.node_selector) {
      if (const std::string* value = labels.Find(k)) d.labels.emplace_back(k, *value);
    }
  }
  std::sort(d.labels.begin(), d.labels.end());
  d.labels.erase(std::unique(d.labels.begin(), d.labels.end()), d.labels.end());
  d.fingerprint = FingerprintOf(d);
  return d;
}

// status.allocatable cpu, memory and pods as NodeState keeps them (kHostUnknown when absent),
// each capped at 2^62 so that allocatable - requested never wraps (requests: kMaxHostRequest).
HostResources HostAllocatableOf(const NodeObject& node) {
  constexpr int64_t kCap = int64_t{1} << 62;
  auto milli = [&](const char* key) -> int64_t {
    auto it = node.allocatable_milli.find(key);
    return it == node.allocatable_milli.end() ? kHostUnknown : it->second;
  };
  HostResources r;
  r.cpu_milli = milli("cpu");
  const int64_t memory = milli("memory");
  r.memory_bytes = memory == kHostUnknown ? kHostUnknown : memory / 1000 + (memory % 1000 != 0);
  const int64_t pods = milli("pods");
  r.pods = pods == kHostUnknown ? kHostUnknown : pods / 1000;  // whole pod slots
  for (int64_t* v : {&r.cpu_milli, &r.memory_bytes, &r.pods}) *v = std::min(*v, kCap);
  return r;
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

}  // namespace

namespace cluster_state_internal {

NodeOffering* InsertOffering(NodeState& node, NodeOffering no) {
  auto pos = std::lower_bound(
      node.offerings.begin(), node.offerings.end(), no.offering,
      [](const NodeOffering& a, OfferingId id) { return a.offering < id; });
  return &*node.offerings.insert(pos, std::move(no));
}

Unit& EnsureUnit(NodeMap& nodes, const Catalog& catalog, const std::string& node_name,
                 OfferingId offering, int32_t index) {
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

void TrimNode(NodeMap& nodes, const std::string& node_name) {
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

}  // namespace cluster_state_internal

using cluster_state_internal::InsertOffering;

bool ClusterState::ApplyNode(const NodeObject& object) {
  if (options_.dra) {
    // Kept to derive the node again when DRA objects change (RederiveDraNodes).
    auto kept = dra_node_objects_.find(object.name);
    if (kept == dra_node_objects_.end()) {
      dra_node_objects_.emplace(object.name, object);
    } else if (&kept->second != &object) {
      kept->second = object;
    }
  }
  DerivedNode d = Derive(*catalog_, object, options_.dra ? &dra_ : nullptr);
  const HostResources allocatable = HostAllocatableOf(object);
  auto it = nodes_.find(object.name);
  if (it != nodes_.end() && !it->second->removed && it->second->fingerprint == d.fingerprint) {
    // The common refresh: nothing the mirror keeps changed, unless the host view did.
    if (it->second->allocatable == allocatable) return false;
    it->second->allocatable = allocatable;
    TouchNode(*it->second);  // the host view changed (Reindex is not called here)
    return true;
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
  const bool agent_started = d.agent && !node.agent;
  node.agent = d.agent;
  node.labels.clear();
  for (auto& [k, v] : d.labels) node.labels.emplace(std::move(k), std::move(v));
  node.fingerprint = d.fingerprint;
  node.allocatable = allocatable;

  // A slice's charge is its ticket count (quota_charge.h), which the new replicas label may
  // change: take the holdings' charges off here and put them back once the units are resized.
  for (const NodeOffering& no : node.offerings) ChargeHoldings(no, -1);
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
    no.unit_uuids.clear();
    for (size_t i = 0; i < no.units.size(); ++i) {
      no.units[i].unhealthy = i < o.published.size() && !o.published[i].healthy;
      no.units[i].user_claimed = false;  // DRA-backed units: set below
    }
    for (const PublishedUnit& u : o.published) no.unit_uuids.push_back(u.uuid);
    no.inventory_problem = o.inventory_problem;
    no.dra = o.dra;
    no.dra_problem = o.dra_problem;
    no.unit_devices.clear();
    for (size_t i = 0; i < o.dra_units.size(); ++i) {
      no.unit_devices.push_back(o.dra_units[i].id.ToString());
      no.unit_uuids.push_back(o.dra_units[i].uuid);
      no.units[i].user_claimed = o.dra_user_claimed[i];
    }
    no.dra_pick = o.dra_predicted ? DraPickOf(o.dra_prediction, no.unit_devices) : DraPick{};
    node.offerings.push_back(std::move(no));
  }
  // Offerings the node stopped advertising: held units stay, draining, until released.
  for (NodeOffering& prev : old) {
    if (prev.offering == kNoOffering || !HasHolders(prev)) continue;
    prev.advertised_name.clear();
    prev.advertised_units = 0;
    prev.dra_pick = DraPick{};  // no longer derived: filter would predict on the spot
    ResizeUnits(prev, 0, prev.replicas);
    InsertOffering(node, std::move(prev));
  }
  for (const NodeOffering& no : node.offerings) ChargeHoldings(no, +1);
  Reindex(object.name);
  if (agent_started) {
    // The agent published its inventory only now: the pods bound here before it did, that it
    // has not confirmed, wait for it too (it must tell them apart from the next binds), from
    // their binding (agent_gate.cc).
    std::vector<std::string> unconfirmed;
    for (const NodeOffering& no : node.offerings) {
      for (const Unit& unit : no.units) {
        for (const Holding& h : unit.holders) {
          auto rec = pods_.find(h.pod_id);
          if (rec == pods_.end() || rec->second.awaiting_agent || !rec->second.agent_may_wait ||
              rec->second.agent_wait_expired || rec->second.source == HoldingSource::kCharged) {
            continue;
          }
          unconfirmed.push_back(h.pod_id);
        }
      }
    }
    for (const std::string& id : unconfirmed) {
      PodRecord& rec = pods_.find(id)->second;
      const absl::Time from =
          rec.agent_wait_from == absl::InfinitePast() ? absl::Now() : rec.agent_wait_from;
      if (!rec.awaiting_agent) SetAwaitingAgent(rec, true, from);
    }
  }
  return true;
}

void ClusterState::RemoveNode(absl::string_view name) {
  dra_node_objects_.erase(name);
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
  node.allocatable = HostResources{kHostUnknown, kHostUnknown, kHostUnknown};
  for (NodeOffering& no : node.offerings) {
    no.advertised_name.clear();
    no.advertised_units = 0;
    no.dra_pick = DraPick{};  // the node is gone: nothing derives it any more
    ResizeUnits(no, 0, no.replicas);
  }
  node.offerings.erase(std::remove_if(node.offerings.begin(), node.offerings.end(),
                                      [](const NodeOffering& no) { return no.units.empty(); }),
                       node.offerings.end());
  Reindex(name);
}

}  // namespace gse
