// ClusterState: the mirror's data — nodes and their units, pods holding units, projects and
// quotas — and every mutation of it, each of which keeps the invariants of DESIGN.md.
//
// Contract:
//  * Not thread-safe by itself. Mirror (mirror.h) owns one ClusterState behind a reader/writer
//    mutex; decisions read it under the reader lock, mutations run under the writer lock.
//    Tests and the in-process replayer may use a ClusterState directly from one thread.
//  * Facts from the API server (ApplyNode/ApplyPod/...) are recorded even when they disagree
//    with our rules (the API server is the truth); a unit that ends up over capacity is then
//    reported by Audit() and offers no free capacity, so it is never handed out again.
//  * Reserve() is the only way we hand out capacity. It re-checks capacity, owner and quota
//    and either commits the whole assignment or changes nothing.
//  * Pods are identified by UID (PodIdOf) everywhere: in records, holdings, Reserve, Confirm,
//    Release and RemovePod. A pod recreated with the same namespace/name and a new UID is
//    another pod (it holds its own units; a deletion of the old UID leaves it alone).
//  * Units are identified by (node, offering, index). A node offers allocatable / replicas
//    units (allocatable is the truth: the device plugin removes unhealthy devices there; the
//    `.count` labels only describe). A node whose count shrinks below what is held keeps the
//    held units, marked draining (no new holders), never drops them silently.
//  * The node agent's per-node gate (agent_gate.cc, docs/agent.md "Extender cooperation"): on
//    a node whose Node carries gpu.themelio.io/inventory, the pods bound there that the agent
//    has not confirmed yet (gpu.themelio.io/allocated) all wait, per offering, for the same
//    units and amount. Reserve enforces it; filter reads it (AgentGateOf); a wait ends with
//    the confirmation, a terminal phase, deletion or deletionTimestamp, or ExpireAgentWaits.
#ifndef GSE_STATE_CLUSTER_STATE_H_
#define GSE_STATE_CLUSTER_STATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/dra_objects.h"
#include "state/dra_state.h"
#include "state/k8s_objects.h"

namespace gse {

namespace cluster_state_internal {
class Auditor;
}  // namespace cluster_state_internal

using ProjectId = int32_t;
inline constexpr ProjectId kNoProject = -1;

struct MirrorOptions {
  // Namespace label whose value names the project; the namespace name when absent.
  std::string project_label = "gpu.themelio.io/project";
  // A project without any ResourceQuota entry for an offering: unlimited (true) or zero.
  bool unlimited_without_quota = true;
  // Quotas from a static quota file (state/static_quota.h): project -> spec.hard-style key ->
  // milli-units. A project's quota is the tighter of these and its ResourceQuotas.
  std::map<std::string, std::map<std::string, int64_t>> static_quotas;
  // DRA mode (docs/dra.md): the state mirrors DeviceClasses, ResourceSlices and
  // ResourceClaims (ApplyDeviceClass...), and an offering a DeviceClass maps on a node that
  // does not advertise it takes its units from the node's slice devices. Off: DRA objects
  // are ignored and nodes are what their allocatable says, as before DRA mode existed.
  bool dra = false;
  // The window of ClusterState::recent_host_demand: a pod weighs half as much after this many
  // newer pods (the service sets fgd's --fgd-half-life, so both windows see the same pods).
  double host_demand_half_life_pods = 2000;
};

// The mirror's identity of a pod (PodRecord::id, Holding::pod_id, Evictions): its UID; for a
// pod that has none (hand-written requests and snapshots) "\x01<namespace>/<name>". UIDs
// never contain a control character (the decoders refuse one), so the two never collide.
std::string PodIdOf(absl::string_view uid, absl::string_view key);

struct Holding {
  std::string pod_id;  // PodRecord::id of the holder
  int32_t amount = 1;  // tickets or shares (1 for exclusive)
};

struct Unit {
  int32_t index = 0;
  int32_t capacity = 1;  // 1 for exclusive; tickets or shares per unit for shared offerings
  int32_t used = 0;      // sum of holders' amounts (may exceed capacity only via API facts)
  // Exclusive and time-sliced: the project of the holders. MPS: the project when all holders
  // share one, else kNoProject. kNoProject when free.
  ProjectId owner = kNoProject;
  bool draining = false;  // beyond the node's advertised count: keeps holders, takes no new
  // The node agent's published inventory (when trusted, NodeOffering::inventory_problem
  // empty) says the device is unhealthy: keeps holders, takes no new ones. Health only.
  bool unhealthy = false;
  // A DRA-backed offering: a user-made ResourceClaim holds the device, not a pod the mirror
  // charges: keeps holders, takes no new ones.
  bool user_claimed = false;
  std::vector<Holding> holders;

  // Draining, unhealthy or user-claimed: whatever its room, nothing new lands here.
  bool TakesNoNewHolders() const { return draining || unhealthy || user_claimed; }
  int32_t Free() const { return TakesNoNewHolders() || used >= capacity ? 0 : capacity - used; }
  bool Empty() const { return holders.empty(); }
};

// A project's units of one offering on one node (units with holders whose owner is the
// project).
struct OwnedUnits {
  ProjectId project = kNoProject;
  int32_t units = 0;       // owned units, full or not
  int32_t with_room = 0;   // of which Free() >= 1
  // Of those, the ones the project's next pod can be given: all of them on a device-plugin
  // node; on a DRA-backed one only the allocator's predicted pick (NodeOffering::dra_pick),
  // because kube-scheduler's allocator picks the device there, first fit in walk order,
  // whatever project holds it. The per-project index (OwnedUnitsWithRoom) counts these: an
  // own unit the allocator will not pick must not keep the project off every other node.
  int32_t reachable_with_room = 0;
  int32_t max_free = 0;    // largest Free() among them
  bool operator==(const OwnedUnits& o) const {
    return project == o.project && units == o.units && with_room == o.with_room &&
           reachable_with_room == o.reachable_with_room && max_free == o.max_free;
  }
};

// Counters derived from one NodeOffering's units. Filter and prioritize read these instead of
// scanning units (28 MIG slices on each of 5,000 candidates per request otherwise).
// ClusterState recomputes them from the units after every change of the node's units
// (Reindex), never patches them incrementally, and Audit() checks them against a recount.
struct OfferingSummary {
  // (Scalars first and the owner list last: with NodeOffering's id in front, everything a
  // filter reads of a node offering shares its first cache line.)
  // New holders may come: the node is not removed, advertises the offering, can serve it as
  // catalogued and matches its nodeSelector.
  bool open = false;
  int32_t live_units = 0;     // not draining
  int32_t live_capacity = 0;  // sum of the live units' capacity
  int32_t empty_units = 0;    // empty and Free() >= 1: a new holder may take the whole unit
  int32_t max_free = 0;       // largest Free() over all units
  int32_t max_free_empty = 0;  // largest Free() over empty units
  int32_t held_units = 0;     // units with holders
  // Holdings of pods that await the node agent (PodRecord::awaiting_agent), counted only on
  // nodes with an agent (NodeState::agent): the per-node gate is closed when > 0.
  int32_t agent_waiting = 0;
  // When agent_waiting > 0: the unit a new pod may still join — every waiting pod holds that
  // one unit with agent_join_amount per unit, of a shared offering (AgentGateOf's joinable
  // assignment, when it is one unit) — else -1: nothing may be bound here until the agent
  // confirms. Filter reads these instead of the holders (30 per node on a busy cluster).
  int32_t agent_join_unit = -1;
  int32_t agent_join_amount = 0;
  // The owners of `owned` whose project id is below 64, as bits (bit p: project p), and
  // those of them with a unit with room; `high_owners` says whether any owner is 64 or more.
  // A filter answers "does the project own a unit with room here" from these alone, without
  // touching `owned` (a cache miss per candidate node otherwise), in clusters of < 64 projects.
  uint64_t low_owners = 0;
  uint64_t low_with_room = 0;
  bool high_owners = false;
  // Units with holders of one project (owner != kNoProject), by project id ascending.
  std::vector<OwnedUnits> owned;

  const OwnedUnits* Owned(ProjectId project) const;
  // Owned(project) != nullptr, and with with_room > 0; from the bits when they can tell.
  bool Owns(ProjectId project) const;
  bool OwnsWithRoom(ProjectId project) const;
  bool operator==(const OfferingSummary& o) const;
};

// Whether a node offering may take new holders, and if not the first reason, in the order
// the placement rules check them.
enum class Availability : uint8_t {
  kOpen,         // it may (OfferingSummary::open)
  kNodeUnknown,  // no such node, or deleted while pods still held units on it
  kNotOnNode,    // the node advertises no units of the offering
  kUnusable,     // advertised, but not as the catalog defines it (NodeOffering::unusable_reason)
  kNotSelected,  // the node does not match the offering's nodeSelector
  kAgentStale,   // the node's agent stopped renewing its heartbeat Lease (NodeState::agent_stale)
};

// RoomRow::dra: what filter's DRA check (scoring/feasibility.h DraPredictedVerdict) needs of a
// node offering's predicted pick (NodeOffering::dra_pick) and the units it names. Values from
// kNoProject up: every predicted unit that has holders is held by that one project (the check
// passes for it, fails for any other). Below it:
inline constexpr int32_t kDraRowNone = -2;      // not DRA-backed: nothing to check
inline constexpr int32_t kDraRowReadNode = -3;  // no pick kept, or no prediction: read the node
inline constexpr int32_t kDraRowFree = -4;      // the predicted units hold nobody
inline constexpr int32_t kDraRowTaken = -5;     // a user-made claim, or several owners, hold them
inline constexpr int32_t kDraRowNoDevice = -6;  // no device fits, or the pick has no room

// What a filter reads of one (node, offering) when nothing is evicted, and what the policies
// grade an exclusive or time-sliced placement by, packed into a dense table per offering with
// one row per node slot (NodeState::slot): a 5,000-name filter or prioritize reads 5,000 rows
// of 40 bytes one after the other instead of a node and its offering each (two cache misses
// per candidate). Copied from the summaries by Reindex; Audit() checks it.
struct RoomRow {
  Availability availability = Availability::kNodeUnknown;
  bool high_owners = false;  // as OfferingSummary: owners with ids >= 64 need the summary
  bool node_busy = false;    // NodeState::held_units > 0 (any offering)
  bool agent_gate = false;   // OfferingSummary::agent_waiting > 0: read its agent_join_unit
  int32_t empty_units = 0;
  int32_t max_free = 0;
  int32_t max_free_empty = 0;
  int32_t live_units = 0;
  // kDraRow* or the one owner of the predicted units (above). In what was the padding after
  // live_units: the row stays 40 bytes, and a DRA candidate costs no read of its node.
  int32_t dra = kDraRowNone;
  uint64_t low_owners = 0;
  uint64_t low_with_room = 0;
  // Whether the bits answer Owns/OwnsWithRoom for `project` (not for an id of 64 or more on
  // a node that has such owners: then ask the summary).
  bool Tells(ProjectId project) const { return project < 64 || !high_owners; }
  // As OfferingSummary's, valid where Tells(project).
  bool Owns(ProjectId project) const;
  bool OwnsWithRoom(ProjectId project) const;
  bool operator==(const RoomRow& o) const {
    return availability == o.availability && high_owners == o.high_owners &&
           node_busy == o.node_busy && agent_gate == o.agent_gate &&
           empty_units == o.empty_units && max_free == o.max_free &&
           max_free_empty == o.max_free_empty && live_units == o.live_units && dra == o.dra &&
           low_owners == o.low_owners && low_with_room == o.low_with_room;
  }
};

// The DRA allocator's predicted pick for one device of a DRA-backed offering on one
// node (DraState::PredictExtendedResourcePick, sorted walk, count 1), in the node offering's
// terms: filter checks it on every DRA candidate (DraPredictedVerdict), so it is derived with
// the units instead of walking the node's slices and claims per request.
struct DraPick {
  enum Kind : uint8_t {
    kNotDerived,    // not kept for this node offering: filter predicts it on the spot
    kUnits,         // the allocator picks the devices of `units`
    kNoDevice,      // no device fits
    kNoPrediction,  // not predicted: `reason`
  };
  Kind kind = kNotDerived;
  // kUnits: for each predicted device, the indexes i with unit_devices[i] naming it (none
  // when no unit is that device).
  std::vector<int32_t> units;
  std::string reason;
  bool operator==(const DraPick& o) const {
    return kind == o.kind && units == o.units && reason == o.reason;
  }
};

// One offering as one node provides it. Hot fields (read for every candidate node) first.
struct NodeOffering;
// RoomRow::dra of a node offering (kDraRowNone when it is not DRA-backed).
int32_t DraRowOf(const NodeOffering& no);

struct NodeOffering {
  OfferingId offering = kNoOffering;
  int32_t advertised_units = 0;  // units allocatable now: allocatable / replicas
  OfferingSummary summary;       // derived from units (see OfferingSummary)
  int32_t replicas = 1;          // tickets or shares per unit on this node
  std::string advertised_name;   // resource key in the node's allocatable (name or alias)
  // Non-empty when the node advertises the name but cannot serve it as the catalog defines it
  // (e.g. an exclusive offering that the node time-slices, or a product mismatch): a fixed,
  // short reason; such units are never chosen.
  std::string unusable_reason;
  std::vector<Unit> units;  // units[i].index == i
  // From the node agent's gpu.themelio.io/inventory (agent_inventory.h) when it agrees with
  // allocatable and replicas: units[i]'s device UUID (then advertised_units counts the
  // published units, unhealthy ones included, and those are Unit::unhealthy). Empty when the
  // node publishes nothing for the offering, or when it disagrees: then `inventory_problem`
  // says how, and units come from allocatable alone, as without an agent.
  std::vector<std::string> unit_uuids;
  std::string inventory_problem;
  // DRA-backed (docs/dra.md): the node advertises no allocatable for the name, a DeviceClass
  // maps it, and the units are the class's devices on the node in the allocator's walk order:
  // units[i] is the device unit_devices[i] ("driver/pool/device"), with UUID unit_uuids[i]
  // ("" when the device publishes none). dra_problem lists what the model reported
  // (incomplete pools, devices without UUID, selectors not understood), "" when nothing.
  bool dra = false;
  std::vector<std::string> unit_devices;
  std::string dra_problem;
  // DRA-backed shared offerings: the allocator's pick as of the last derivation. Every DRA
  // object change that may alter it derives the node again (dra_nodes.cc), and the node's
  // fingerprint covers the prediction, so it is never stale; Audit predicts again and compares.
  // kNotDerived elsewhere (exclusive offerings, units kept after the node stopped offering).
  // Written only under the writer lock (ApplyNode), as everything in ClusterState.
  DraPick dra_pick;
};

// A node's cpu, memory and pod slots: what status.allocatable offers, or what the pods bound
// there request. kHostUnknown (allocatable only): the Node lists no such key.
inline constexpr int64_t kHostUnknown = -1;
struct HostResources {
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  int64_t pods = 0;
  bool operator==(const HostResources& o) const {
    return cpu_milli == o.cpu_milli && memory_bytes == o.memory_bytes && pods == o.pods;
  }
  bool operator!=(const HostResources& o) const { return !(*this == o); }
};

struct NodeState {
  // (What a filter reads of every candidate comes first: one cache line.)
  std::vector<NodeOffering> offerings;
  bool removed = false;      // node object deleted while units were still held
  bool agent = false;        // the Node carries gpu.themelio.io/inventory: a node agent runs
  // With `agent`: the agent has not renewed its heartbeat Lease for --agent-heartbeat-timeout
  // (SetAgentStale, from the extender's sweep): every offering is kAgentStale. Not derived
  // from the Node object: ApplyNode keeps it, a relist inherits it (InheritAgentLiveness).
  bool agent_stale = false;
  int32_t held_units = 0;    // units with holders over all offerings (derived, like summary)
  int32_t gpu_count = 0;     // nvidia.com/gpu.count (physical GPUs), 0 when unlabelled
  uint64_t fingerprint = 0;  // of the fields derived from the Node object
  uint32_t slot = 0;         // its row in ClusterState::RoomRows, fixed while the node exists
  // Takes a new process-wide unique value (never 0) on every change of the node and of its
  // host view (ClusterState::Reindex, allocatable, the host requests counted on it), so a
  // policy may keep what it derived from the node under this value (fgd's prioritize). 0 until
  // the node is first indexed. Like every field here, written under the Mirror's writer lock
  // and read under its reader lock.
  uint64_t version = 0;
  std::string name;
  std::string gpu_product;  // nvidia.com/gpu.product
  std::map<std::string, std::string> labels;  // only keys some catalog nodeSelector uses
  // The agent's last heartbeat on the extender's clock when it last turned stale or live
  // (InfinitePast: none seen), for /debug/state and messages.
  absl::Time agent_last_renewal = absl::InfinitePast();
  // status.allocatable cpu (milli), memory (bytes, rounded up) and pods (whole); each
  // kHostUnknown when absent, all of them on a removed node.
  HostResources allocatable{kHostUnknown, kHostUnknown, kHostUnknown};

  const NodeOffering* Find(OfferingId id) const;
  NodeOffering* Find(OfferingId id);
};

enum class HoldingSource {
  kReserved,   // handed out by Reserve(), bind to the API server not yet confirmed
  kConfirmed,  // recorded on the pod (our annotation) or bind confirmed
  kCharged,    // bound by something else without an assignment: charged conservatively
};

struct PodRecord {
  std::string id;   // PodIdOf(uid, key): the record's key in ClusterState::pods()
  std::string key;  // namespace/name; a recreated pod's record may share it for a while
  std::string uid;
  std::string namespace_name;
  ProjectId project = kNoProject;
  Assignment assignment;
  HoldingSource source = HoldingSource::kConfirmed;
  // DRA: the pod's extended-resource claim (namespace/name) when it is known, from the pod's
  // status (PodObject::extended_resource_claim) or from our bind, which verified it. Only that
  // claim's devices are the pod's (DraChargedUnits): under a lagging claim watch a failed
  // attempt's claim of the same pod may still arrive, allocated, after the pod was bound
  // elsewhere. "": every live claim of the pod counts.
  std::string dra_claim;
  // When our own bind confirmed this holding (InfinitePast when learned from the API). A
  // relist listed before that bind cannot show the pod yet; Mirror::ReplaceAll carries such
  // holdings over instead of freeing a unit that the watch will show bound.
  absl::Time bound_by_us_at = absl::InfinitePast();
  // kReserved only: when its bind ended with an unknown outcome (a POST may have committed;
  // InfinitePast while the bind is in flight or was never ambiguous). The holding stays until
  // the API's objects settle it: the watch shows the pod bound (confirmed) or deleted
  // (released), or a relist listed after this time shows it not bound here (dropped).
  absl::Time unconfirmed_since = absl::InfinitePast();
  // kReserved only: Bind calls between their Reserve and their outcome. kube-scheduler may
  // bind the same pod twice at once (a retry while the first POST is still out): the retry
  // joins the reservation, and a definite "not bound" of one call must not free units that
  // the other's POST may still commit (ReleaseReservation).
  int32_t binds_in_flight = 0;
  // The per-node gate (agent_gate.cc): the pod holds units by our annotation (or our bind in
  // flight) on a node with an agent (pods bound before the agent published its inventory
  // start waiting when it does), is not terminating, and the node agent has not confirmed it
  // (gpu.themelio.io/allocated); it waits since `awaiting_agent_since` (its binding,
  // `agent_wait_from`); a wait that ExpireAgentWaits ended stays over
  // (`agent_wait_expired`) for this pod.
  bool awaiting_agent = false;
  bool agent_wait_expired = false;
  absl::Time awaiting_agent_since = absl::InfinitePast();
  // Whether the pod would await an agent on its node: it holds units by our annotation (or
  // our bind in flight), is not terminating and carries no gpu.themelio.io/allocated. A node
  // whose agent starts publishing its inventory later makes such pods wait (ApplyNode).
  bool agent_may_wait = false;
  // When the pod was bound, as the gate counts a wait from it: our Reserve, else the pod's
  // PodScheduled time (PodObject::scheduled_at, never later than its first sight), else its
  // first sight. A wait's timeout runs from here, so an extender restart or a take-over does
  // not restart it.
  absl::Time agent_wait_from = absl::InfinitePast();
};

struct ProjectState {
  std::string name;
  // What the project's quota is charged per offering (state/quota_charge.h): units held
  // (exclusive), the tickets of the slices it owns (time-sliced; each slice's real ticket
  // count) or shares held (mps).
  absl::flat_hash_map<OfferingId, int64_t> usage;
  // The hard value, in the same currency; absent = no ResourceQuota entry (MirrorOptions
  // decides).
  absl::flat_hash_map<OfferingId, int64_t> quota;
};

// What the caller wants reserved; the assignment says where.
struct PodClaim {
  std::string key;  // namespace/name
  std::string uid;
  std::string namespace_name;
  std::string project;  // project name (see ProjectOfNamespace)
  // DRA: the extended-resource claim (namespace/name) bind verified, kept as
  // PodRecord::dra_claim; "" elsewhere. The initializer lets the four-field aggregate
  // initializations elsewhere leave it out (-Wmissing-field-initializers).
  std::string dra_claim = "";
};

// Counters of facts that broke our rules, for metrics and alerts.
struct AuditReport {
  int64_t oversubscribed_units = 0;  // used > capacity, or holders' sum != used
  int64_t multi_owner_units = 0;     // time-sliced (or single-project mps) unit with 2+ projects
  int64_t over_quota_projects = 0;   // (project, offering) pairs over quota (WithinQuota)
  // Derived counters (OfferingSummary, the per-project index, the per-node host requests)
  // that disagree with a recount from the units or pods: a bug in the mirror, never caused by
  // API facts.
  int64_t stale_summaries = 0;
  std::vector<std::string> problems;  // human-readable, capped at 100 entries
};

// The offering's nodeSelector matches the node's labels (every key present with that value).
bool OfferingSelectsNode(const Offering& offering, const NodeState& node);

class ClusterState {
 public:
  ClusterState(std::shared_ptr<const Catalog> catalog, MirrorOptions options);

  // ---- facts from Kubernetes objects (API watch, snapshot files, extender requests) ----
  // Upserts a node; returns true when anything the mirror keeps changed.
  bool ApplyNode(const NodeObject& node);
  void RemoveNode(absl::string_view name);
  // Upserts a pod: bound pods with our assignment annotation become holders (kConfirmed);
  // bound pods without it that request a catalog resource are charged (kCharged); terminal,
  // terminating-and-unbound or pending pods release whatever they held. A bound pod is
  // charged to the project of its gpu.themelio.io/project annotation when it has a valid one
  // (authoritative: a relist or restart reads it back), else to the project it was first
  // recorded with, else to its namespace's.
  void ApplyPod(const PodObject& pod);
  // A pod deleted from the API server: releases the record of that UID (of the UID-less pod of
  // that name when `uid` is empty). A record of another UID under the same name stays.
  void RemovePod(absl::string_view uid, absl::string_view key);
  void ApplyNamespace(const NamespaceObject& ns);
  void RemoveNamespace(absl::string_view name);
  void ApplyQuota(const ResourceQuotaObject& quota);
  void RemoveQuota(absl::string_view namespace_name, absl::string_view name);
  // Applies a whole decoded document: namespaces and quotas first, then nodes, then pods.
  // With `dra` (DRA mode), its objects replace the mirrored DRA objects before the nodes.
  void ApplyBatch(const ObjectBatch& batch, const DraObjectBatch* dra = nullptr);

  // ---- our decisions ----
  // Re-checks `a` for `claim` (node known, offering usable, units exist and not draining,
  // free capacity, single owner, quota) and commits it, or returns FailedPrecondition with a
  // reason and changes nothing. The pod (its UID) that already holds exactly `a` succeeds
  // (a retried bind, idempotent); holding something else it fails with AlreadyExists. A pod
  // of the same namespace/name with another UID is another pod: it takes its own capacity.
  // With kReserved each success starts one bind of the pod (PodRecord::binds_in_flight, on a
  // reservation that is still kReserved); its outcome ends it: Confirm, ReleaseReservation or
  // MarkUnconfirmed. `host`: the pod's cpu/memory requests (PodHostRequest), when the caller
  // has the pod; they count in the host view on the reserved node from here until the API's
  // facts take over ("the host view" below).
  absl::Status Reserve(const PodClaim& claim, const Assignment& a,
                       HoldingSource source = HoldingSource::kReserved,
                       std::optional<HostRequest> host = std::nullopt);
  // Marks a reservation confirmed (bind succeeded at `bound_at`). NotFound if the pod (its
  // PodRecord::id) holds nothing.
  absl::Status Confirm(absl::string_view pod_id, absl::Time bound_at = absl::Now());
  // Releases everything the pod (its PodRecord::id) holds; false if it held nothing.
  bool Release(absl::string_view pod_id);
  // Ends one bind of a reservation that definitely did not commit. The units are released
  // only while the pod still holds exactly `a` as kReserved (a watch event may have confirmed
  // or replaced it), no other bind of it is in flight (its POST may still commit) and none
  // ended with an unknown outcome (it may have committed). False if nothing was released.
  bool ReleaseReservation(absl::string_view pod_id, const Assignment& a);
  // A bind of this reservation ended with an unknown outcome at `since`: it stays held
  // (PodRecord::unconfirmed_since, the first such time). No-op unless the pod holds a
  // kReserved record.
  void MarkUnconfirmed(absl::string_view pod_id, absl::Time since = absl::Now());
  // Records `rec` (a holding of another ClusterState: Mirror::ReplaceAll carries in-flight
  // binds across a relist) as it is, charged to `project`: no admission rule is applied
  // again. Units it names that this state lacks are created draining; capacity, owner or
  // quota it breaks here is an API fact for Audit(), as after a quota lowered under running
  // pods. Precondition: no record with rec.id.
  // The record's count in `from`'s host view (a reservation in flight, a bind the list
  // predates) comes along too.
  void CarryOver(const PodRecord& rec, absl::string_view project, const ClusterState& from);

  // ---- read access for decisions (scoring/) ----
  const Catalog& catalog() const { return *catalog_; }
  // The owning pointer, so that a fresh state sharing this catalog can be built (Mirror::ReplaceAll).
  const std::shared_ptr<const Catalog>& shared_catalog() const { return catalog_; }
  const MirrorOptions& options() const { return options_; }
  const NodeState* FindNode(absl::string_view name) const;
  // FindNode for many names, in order (nullptr for unknown ones). Overlaps the memory fetches
  // of the next names with the current lookup: a filter names up to 5,000 nodes.
  std::vector<const NodeState*> FindNodes(const std::vector<absl::string_view>& names) const;
  // Changes whenever a node is added to or erased from nodes() (never otherwise), and is
  // unique across every ClusterState of the process: NodeState pointers obtained at one value
  // stay valid while it is unchanged (callers may cache name -> pointer lookups on it).
  uint64_t node_set_version() const { return node_set_version_; }
  const absl::flat_hash_map<std::string, std::unique_ptr<NodeState>>& nodes() const {
    return nodes_;
  }
  // The pod recorded last under namespace/name `key` (a recreated pod and the old one may
  // both be recorded for a while); nullptr when none.
  const PodRecord* FindPod(absl::string_view key) const;
  const PodRecord* FindPodById(absl::string_view id) const;
  const PodRecord* FindPodByUid(absl::string_view uid) const;  // nullptr for ""
  // Every record, by PodRecord::id.
  const absl::flat_hash_map<std::string, PodRecord>& pods() const { return pods_; }
  // Project name of a namespace: its project label, else the namespace name.
  std::string ProjectOfNamespace(absl::string_view namespace_name) const;
  ProjectId FindProject(absl::string_view name) const;  // kNoProject if never seen
  const ProjectState& project(ProjectId id) const { return projects_[static_cast<size_t>(id)]; }
  size_t project_count() const { return projects_.size(); }
  // The project's charge for `offering` (ProjectState::usage; 0 for kNoProject).
  int64_t Usage(ProjectId project, OfferingId offering) const;
  // Quota in the same currency; -1 = unlimited. quota_charge.h says what a project may take.
  int64_t Quota(ProjectId project, OfferingId offering) const;
  // The room table of `offering`: the row of a node is at its NodeState::slot, the row at
  // kUnknownSlot stands for a node the state does not know (Availability::kNodeUnknown).
  // Rows change with the state; the table may move when a node is added.
  static constexpr uint32_t kUnknownSlot = 0;
  const RoomRow* RoomRows(OfferingId offering) const {
    return room_rows_[static_cast<size_t>(offering)].data();
  }
  // NodeState::version of the node in `slot`; 0 for a free slot or kUnknownSlot. The same
  // value in a dense array, so that a policy keyed by it (fgd's score cache) reads 8 bytes
  // next to its neighbours' instead of a node per candidate.
  uint64_t SlotVersion(uint32_t slot) const {
    return slot < slot_versions_.size() ? slot_versions_[slot] : 0;
  }
  // Units of `offering` the project owns with room for another holder (Free() >= 1) on open
  // node offerings (OfferingSummary::open) that its next pod can be given
  // (OwnedUnits::reachable_with_room: on DRA-backed ones, the allocator's predicted pick
  // only), cluster-wide: the spill check of I3 without a scan of every node.
  int32_t OwnedUnitsWithRoom(ProjectId project, OfferingId offering) const;
  // Live units of each offering (by OfferingId) on the node offerings open to new holders
  // (OfferingSummary::open, live_units), cluster-wide: the capacity of each pool that pods can
  // still be placed on, which fgd weighs its expected demand against.
  const std::vector<int64_t>& open_units() const { return open_units_; }

  // ---- DRA mode (dra_nodes.cc, docs/dra.md); no-ops unless MirrorOptions::dra ----
  // Turns DRA mode on (--dra-mode resolved after the mirror was made); meant for an empty
  // state: nodes applied before keep their device-plugin view until their next update.
  void EnableDra() {
    options_.dra = true;
    RefreshDraDrift();
  }
  // The mirrored DRA objects. A change re-derives the nodes it may affect (their DRA-backed
  // offerings, from the Node objects kept for that); a claim's change also moves the charge
  // of the pod it belongs to onto the device the claim allocated.
  void ApplyDeviceClass(DraDeviceClass c);
  void RemoveDeviceClass(absl::string_view name);
  void ApplyResourceSlice(DraResourceSlice s);
  void RemoveResourceSlice(absl::string_view name);
  void ApplyResourceClaim(DraResourceClaim c);
  void RemoveResourceClaim(absl::string_view key);  // namespace/name
  // A whole list of the three kinds (a relist): replaces every DRA object, then re-derives
  // every node once.
  void ReplaceDra(const DraObjectBatch& batch);
  // Takes over `dra` as it is (Mirror::ReplaceAll when the relist carried no DRA objects).
  void ReplaceDra(DraState dra);
  const DraState& dra() const { return dra_; }
  // DRA mode: the node's last Node object, labels included (nullptr otherwise).
  const NodeObject* DraNodeObject(absl::string_view name) const {
    auto it = dra_node_objects_.find(name);
    return it == dra_node_objects_.end() ? nullptr : &it->second;
  }
  // The node's kind for the offering (KEP-5004's per-node rule as the mirror applied it):
  // kDra for a DRA-backed NodeOffering, kDevicePlugin for one the node advertises, kNone when
  // it offers nothing of it.
  static DraNodeKind KindOf(const NodeState& node, OfferingId offering);
  // The units of a DRA-backed offering that the pod's (`pod_uid`) allocated claims hold on
  // the node, sorted; empty when the node offering is not DRA-backed or no claim names its
  // devices. Charged pods and bind read the real devices from it.
  // With `claim_key` (PodRecord::dra_claim): that claim's units only, when the mirror has it
  // live for that pod; empty otherwise.
  std::vector<int32_t> DraChargedUnits(const NodeOffering& no, absl::string_view node,
                                       absl::string_view pod_uid,
                                       absl::string_view claim_key = "") const;
  // The units of a DRA-backed offering that one claim (namespace/name) holds on the node,
  // sorted (bind: the verified claim's devices, and no other claim's).
  std::vector<int32_t> DraUnitsOfClaim(const NodeOffering& no, absl::string_view node,
                                       absl::string_view claim_key) const;
  // The units of `no` that allocation results name (admin access left out), sorted: a claim
  // that need not be mirrored (bind's read of it from the API).
  static std::vector<int32_t> DraUnitsOfResults(const NodeOffering& no,
                                                const std::vector<DraAllocationResult>& results);
  // The key (namespace/name) of the scheduler's allocated extended-resource claim of the pod
  // (`pod_uid`) on `node`, "" when the mirror has none that is not terminating, or several.
  // With `claim_key` (the pod's status.extendedResourceClaimStatus, read at bind): that claim,
  // when the mirror has it allocated on `node` for that pod and not terminating, else "".
  std::string DraExtendedClaimOf(absl::string_view node, absl::string_view pod_uid,
                                 absl::string_view claim_key = "") const;
  // The DRA allocator's pick for one device of `no` (a DRA-backed offering of `node`) from the
  // mirrored DRA objects now, as NodeOffering::dra_pick keeps it: what filter falls back to
  // when none is kept, and what Audit compares the kept one with.
  DraPick DraPickNow(const NodeState& node, const NodeOffering& no) const;
  // A prediction in a node offering's terms (NodeOffering::dra_pick).
  static DraPick DraPickOf(const DraPrediction& p, const std::vector<std::string>& unit_devices);
  // Catalog drift (DraState::Drift) against this state's catalog, as of the last DeviceClass
  // change (it depends on the classes and the catalog alone): filters with decision-log notes
  // and /debug/state read it without recomputing. Audit recomputes and compares.
  const std::vector<std::string>& DraDrift() const { return dra_drift_; }

  // ---- the host view: cpu, memory and pods per node (host_requests.cc) ----
  // Kept from API facts (ApplyPod/RemovePod) and from our own binds in flight: every pod
  // bound to a node (spec.nodeName) and not terminal counts there, whether or not it asks for
  // a catalog resource, with PodHostRequest(pod) and one pod slot; a terminating pod counts
  // until its deletion (as kube-scheduler counts it). A pod's update replaces its
  // contribution, so watch replays, relists and rebinds count it once.
  // A reservation (Reserve with `host`) counts on its node from the commit point,
  // as kube-scheduler's assume cache counts a pod it is binding: the next decision must not
  // hand out the cpu/memory of a bind the watch has not shown yet. The watch's bound pod then
  // replaces it (same id), a pending event of the pod leaves it, and a released reservation
  // (ReleaseReservation) takes it back. Non-GPU pods that we bind without a reservation count
  // when the watch shows them.
  // The summed requests of the pods bound to `node_name` (zero when none).
  HostResources HostRequested(absl::string_view node_name) const;
  // allocatable - requested for the node: false (outputs untouched) when the node is removed
  // or any of its allocatable cpu, memory or pods is unknown. The results may be negative
  // (pods bound beyond allocatable: API facts). Any output may be nullptr.
  bool HostFree(const NodeState& node, int64_t* cpu_milli, int64_t* memory_bytes,
                int64_t* pods) const;
  // Per node name with bound pods: their summed requests.
  const absl::node_hash_map<std::string, HostResources>& host_requested() const {
    return host_requested_;
  }
  // The bound, non-terminal pods the host view counts (by PodRecord id).
  size_t host_pod_count() const { return host_pods_.size(); }
  // What recently arrived pods ask of the hosts, split by whether they ask for a catalog
  // resource: decayed sums of the cpu and memory requests of each pod as the host view first
  // counts it bound (from the watch, a list, or our reservation), the newest weighing 1 and
  // each earlier one 2^(-1/MirrorOptions::host_demand_half_life_pods) less per newer pod.
  // fgd reads the ratio: the pods that take no GPU land on the GPU nodes too (placed by
  // kube-scheduler's own scores where the extender only sees GPU pods), and eat the cpu and
  // memory that idle GPUs need (docs/fgd.md, "Pods beside the GPUs").
  struct RecentHostDemand {
    double gpu_cpu_milli = 0, gpu_memory_bytes = 0;      // pods asking for a catalog resource
    double other_cpu_milli = 0, other_memory_bytes = 0;  // every other pod
    int64_t arrivals = 0;  // pods counted so far: the newest one's index
  };
  const RecentHostDemand& recent_host_demand() const { return recent_host_demand_; }
  // Keeps the window of `old` (the state before a relist): a list shows the pods in no
  // arrival order, so the window it builds says less about what is recent. Unless `old`
  // counted nothing (the first list, at start): then the pods bound now are the best guess.
  void InheritRecentHostDemand(const ClusterState& old);

  // Recounts every unit from the pod records (not from the units' own counters) and checks
  // I1 (capacity), I2 (one owner) and I4 (quota).
  AuditReport Audit() const;

  // ---- the node agent's per-node gate (agent_gate.cc) ----
  // The gate of one offering on one node, as filter and bind read it.
  struct AgentGate {
    bool closed = false;  // pods on the node await its agent for this offering
    // When closed: the one assignment a new pod may still take, the waiting pods' units and
    // amount (a time-sliced or MPS offering whose waiting pods all wait for the same); else
    // nullopt: nothing may be bound there for the offering until the agent confirms.
    std::optional<Assignment> joinable;
    std::string waiting_pod;  // namespace/name of one waiting pod (messages)
  };
  AgentGate AgentGateOf(const NodeState& node, OfferingId offering) const;
  // Reserve's gate check: FailedPrecondition naming the waiting pod when the gate of `a`'s
  // node and offering does not admit `a`, or naming the node when its agent is stale.
  absl::Status CheckAgentGate(const PodClaim& claim, const Assignment& a) const;
  // Ends the wait of every pod that has awaited the agent for `timeout` or longer at `now`,
  // counted from its binding (PodRecord::agent_wait_from; the agent may be down, or kubelet
  // never admitted the pod); returns how many.
  int ExpireAgentWaits(absl::Time now, absl::Duration timeout);
  // Keeps the waits of pods that `old` (the state before a relist) knew: their start and
  // whether they expired, so that a relist neither restarts nor reopens a wait.
  void InheritAgentWaits(const ClusterState& old);
  // Pods (PodRecord::id) awaiting their node's agent (PodRecord::awaiting_agent).
  const absl::flat_hash_set<std::string>& agent_waiting_pods() const { return agent_waiting_; }
  // The agent's liveness (docs/agent.md "Agent liveness"): marks the node's agent stale (its
  // heartbeat Lease not renewed for --agent-heartbeat-timeout: filter and Reserve refuse the
  // node while it has an agent) or live again, with its last renewal on our clock. Returns
  // whether the flag changed; an unknown node is a no-op.
  bool SetAgentStale(absl::string_view node, bool stale, absl::Time last_renewal);
  // Keeps the staleness of the nodes that `old` (the state before a relist) knew.
  void InheritAgentLiveness(const ClusterState& old);
  // Nodes with an agent (NodeState::agent) marked stale.
  int AgentStaleNodes() const;

 private:
  friend class cluster_state_internal::Auditor;  // Audit()'s steps (audit.cc)

  ProjectId InternProject(absl::string_view name);
  void RecomputeQuotas();
  // The host view's steps (host_requests.cc): counts `pod` (by id) where it is bound now, or
  // nowhere when it is pending or terminal; UncountHostPod forgets it.
  void CountHostPod(const std::string& id, const PodObject& pod);
  // Counts `request` (by id) on `node_name`, replacing any earlier count of the id.
  void CountHost(const std::string& id, const std::string& node_name, const HostRequest& request);
  // Adds a newly counted pod's request to recent_host_demand_, after decaying the window;
  // returns its index there (RecentHostDemand::arrivals).
  int64_t NoteHostArrival(const HostRequest& request, bool asks_for_units);
  // Takes back what our reservation added to the window at `index` (its bind was refused: the
  // pod has not arrived, and the reservation that binds it after all counts it then).
  void ForgetReservedArrival(const HostRequest& request, int64_t index);
  void UncountHostPod(absl::string_view id);
  // Inserts the record (by its id, indexed under its key) and adds its holdings.
  void AddPodRecord(PodRecord rec);
  void AddHolding(const PodRecord& pod);
  void RemoveHolding(const PodRecord& pod);
  // Adds `sign` times the quota charge of every holding on the offering's units to the
  // holders' usage: -1 before a node update may change the units' capacity, +1 after.
  void ChargeHoldings(const NodeOffering& no, int sign);
  // Holders and their summed amount that `pod`'s project has on `unit`, `pod` not counted.
  std::pair<int64_t, int64_t> ProjectOnUnit(const Unit& unit, const PodRecord& pod) const;
  void AddUsage(ProjectId project, OfferingId offering, int64_t delta);
  void RecomputeOwner(Unit& unit, const Offering& offering);
  // Recomputes the summaries of every offering of the node (and its held_units) from the
  // units, and moves the per-project index from the old summaries to the new ones. Called
  // after every change of a node's units; a name no longer in nodes_ is a no-op.
  void Reindex(absl::string_view node_name);
  // Takes the node's offerings out of the per-project index (before offerings are replaced or
  // the node is erased); Reindex puts them back.
  void Unindex(NodeState& node);
  OfferingSummary Summarise(const NodeState& node, const NodeOffering& no) const;
  Availability AvailabilityOf(const NodeState& node, const NodeOffering& no) const;
  // The node's rows in every room table, from its summaries (kNotOnNode for offerings it
  // lacks, kNodeUnknown for all when it is removed).
  std::vector<RoomRow> RoomRowsOf(const NodeState& node) const;
  uint32_t AllocateSlot();
  void FreeSlot(uint32_t slot);
  void AddToIndex(const NodeOffering& no, int32_t sign);
  int64_t UsageDelta(const Offering& offering, const NodeOffering& no, const Assignment& a,
                     ProjectId project) const;
  // Reserve's checks, in order: the assignment names live units of a usable offering in a
  // shape its sharing allows; then they have room for it (capacity, owner, quota).
  absl::Status CheckUnitsExist(const PodClaim& claim, const Assignment& a) const;
  absl::Status CheckRoom(const PodClaim& claim, const std::string& project_name,
                         const Assignment& a) const;
  // The units charged to a pod bound without our annotation (pod_holdings.cc). On a
  // DRA-backed offering, the devices the pod's (by `pod_uid`) allocated claims hold, when the
  // mirror has them all (DraChargedUnits); else conservatively.
  // `claim_key`: PodRecord::dra_claim ("" = every live claim of the pod).
  Assignment ChargedUnits(const std::string& node_name, OfferingId offering, size_t need,
                          ProjectId project, absl::string_view pod_uid,
                          absl::string_view claim_key = "") const;
  // DRA mode: re-applies the kept Node object of `node` ("" = every node) so that its
  // DRA-backed offerings follow the DRA objects; then moves the charge of charged pods on
  // them onto their claims' devices (RechargeDraPods).
  void RederiveDraNodes(absl::string_view node);
  void RechargeDraPods(absl::string_view node);

  std::shared_ptr<const Catalog> catalog_;
  MirrorOptions options_;
  absl::flat_hash_map<std::string, std::unique_ptr<NodeState>> nodes_;
  absl::flat_hash_map<std::string, PodRecord> pods_;  // by PodRecord::id
  // namespace/name -> ids of the records under it, oldest first (almost always one).
  absl::flat_hash_map<std::string, absl::InlinedVector<std::string, 1>> ids_by_key_;
  absl::flat_hash_map<std::string, std::map<std::string, std::string>> namespace_labels_;
  // namespace/name -> spec.hard
  std::map<std::string, ResourceQuotaObject> quotas_;
  std::vector<ProjectState> projects_;
  absl::flat_hash_map<std::string, ProjectId> project_ids_;
  void BumpNodeSetVersion();
  // Gives the node (by name; no-op for an unknown one) a new NodeState::version.
  void TouchNode(NodeState& node);
  void TouchNode(absl::string_view name);
  uint64_t node_set_version_ = 0;
  // [offering][slot] (see RoomRows); slot kUnknownSlot is never handed out, the slots of
  // erased nodes are reused.
  std::vector<std::vector<RoomRow>> room_rows_;
  std::vector<uint64_t> slot_versions_ = std::vector<uint64_t>(1, 0);  // [slot], SlotVersion
  uint32_t slot_count_ = 1;
  std::vector<uint32_t> free_slots_;
  // Records with awaiting_agent set, by id (ExpireAgentWaits scans these, not every pod).
  absl::flat_hash_set<std::string> agent_waiting_;
  // Sets rec.awaiting_agent (keeping agent_waiting_ and, on a change, the node's summaries
  // right); the wait starts at `now` when it was not waiting.
  void SetAwaitingAgent(PodRecord& rec, bool awaiting, absl::Time now);
  // The host view. A counted pod keeps only a pointer to its node's entry (entries of
  // node_hash_map do not move; one is erased when its last pod leaves) and its request.
  // Sums are kept modulo 2^64 (exact: each request <= kMaxHostRequest, see k8s_objects.h).
  struct HostPod {
    std::pair<const std::string, HostResources>* node = nullptr;
    HostRequest request;
    // Its index in recent_host_demand_ when our reservation counted it there (-1: counted
    // by the watch or a list, or before this process's window), so a refused bind can take it back.
    int64_t reserved_arrival = -1;
  };
  absl::node_hash_map<std::string, HostResources> host_requested_;  // by node name
  absl::flat_hash_map<std::string, HostPod> host_pods_;             // by PodRecord id
  RecentHostDemand recent_host_demand_;
  // DRA mode only: the mirrored DRA objects, and each node's last Node object (to derive the
  // node again when DRA objects change; a Node event does not come with those changes).
  DraState dra_;
  // dra_.Drift(*catalog_), renewed by RefreshDraDrift on every class change (DraDrift).
  std::vector<std::string> dra_drift_;
  void RefreshDraDrift() { dra_drift_ = options_.dra ? dra_.Drift(*catalog_) : std::vector<std::string>(); }
  absl::flat_hash_map<std::string, NodeObject> dra_node_objects_;
  // (project, offering) -> OwnedUnits::with_room summed over open node offerings.
  absl::flat_hash_map<std::pair<ProjectId, OfferingId>, int32_t> owned_with_room_;
  // open_units(): OfferingSummary::live_units summed over open node offerings.
  std::vector<int64_t> open_units_;
};

}  // namespace gse

#endif  // GSE_STATE_CLUSTER_STATE_H_
