// Ledger: the replay's independent record of what was placed and the audit over it. It
// recounts every unit from the assignments the binds produced and the node facts of the
// trace, with its own rules (capacity, one owner per time-sliced unit, twins,
// cpu/memory/pods, quotas), never reading the mirror's counters; and it is kube-scheduler's
// own resource view for the driver (built-in fit, in-tree scores). Not thread-safe: the
// driver serialises access.
#ifndef GSE_PERF_REPLAY_LEDGER_H_
#define GSE_PERF_REPLAY_LEDGER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "perf/trace.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"

namespace gse::replay {

// The independent ledger of what was placed, and the audit over it.
class Ledger {
 public:
  explicit Ledger(std::shared_ptr<const Catalog> catalog,
                  std::vector<std::pair<std::string, std::string>> twins = {});

  // Facts (the same the Placer gets).
  void ApplyBatch(const ObjectBatch& batch);
  void ApplyNode(const NodeObject& node);
  void RemoveNode(const std::string& name);

  // Records a bound pod (its cpu/memory/extended requests and, when `a` names units, its
  // holdings). `placeholder` marks the node agent's twin pods (not workload).
  void Bind(const PodObject& pod, const std::string& project, const std::string& node,
            const Assignment* a, bool placeholder);
  void Delete(const std::string& pod_key);

  struct UnitKey {
    std::string node;
    OfferingId offering;
    int32_t index;
    bool operator<(const UnitKey& o) const {
      return std::tie(node, offering, index) < std::tie(o.node, o.offering, o.index);
    }
  };
  struct Holder {
    std::string pod_key;
    std::string project;
    int32_t amount;
    bool placeholder;
  };
  const std::map<UnitKey, std::vector<Holder>>& units() const { return units_; }
  // Test hook: adds a holder without any check (to corrupt the ledger on purpose).
  void AddHolderForTesting(const UnitKey& key, Holder holder) { units_[key].push_back(std::move(holder)); }

  // Capacity of a unit from the node facts: tickets/shares/1; 0 when the node does not
  // advertise that many units of the offering.
  int32_t UnitCapacity(const std::string& node, OfferingId offering, int32_t index) const;
  // The largest capacity a unit of `offering` has on any live node; 0 when none offers it.
  int32_t MaxUnitCapacity(OfferingId offering) const;
  // Does `project` hold (own) a time-sliced unit of `offering` with a free ticket?
  bool OwnsFreeTicket(const std::string& project, OfferingId offering) const;
  bool ProjectHoldsUnit(const UnitKey& key, const std::string& project) const;

  struct AuditResult {
    int64_t oversubscribed_units = 0;  // capacity, exclusivity, twins
    int64_t multi_owner_units = 0;
    int64_t over_capacity_nodes = 0;  // cpu, memory, pods
    int64_t over_quota = 0;
    std::vector<std::string> problems;  // first 50
  };
  AuditResult Audit() const;

  // What a pod asks of a node in kube-scheduler's resource view, computed once per pod.
  struct Demand {
    int64_t cpu = 0, memory = 0;
    std::vector<std::pair<int32_t, int64_t>> ext;  // (resource id, milli)
  };
  Demand DemandOf(const PodObject& pod);
  // Built-in fit (kube-scheduler's own filters). Returns "" when the pod fits, else a reason
  // label ("node_affinity", "too_many_pods", "insufficient_cpu", ...).
  std::string BuiltInFit(const Demand& d, const PodArrival& arrival, const std::string& node) const;
  // The same for NodeNames()[i] (no lookup by name: the hot loop).
  std::string BuiltInFitAt(const Demand& d, const PodArrival& arrival, size_t i) const;
  // kube-scheduler's in-tree scores of the node after placing the pod, 0..100 (integers, as
  // kube-scheduler computes them) over cpu and memory.
  int64_t LeastAllocated(const Demand& d, const std::string& node) const;
  int64_t MostAllocated(const Demand& d, const std::string& node) const;
  int64_t BalancedAllocation(const Demand& d, const std::string& node) const;
  // A node where `project` owns a time-sliced unit of `offering` with a free ticket and the
  // pod passes kube-scheduler's built-in fit (selector, pods, cpu, memory); "" when none. A
  // ticket that opened a new unit while such a node existed was an avoidable spill: joining
  // the project's own unit was possible for the pod, whatever the candidate list held.
  std::string OwnedFreeTicketNodeThatFits(const std::string& project, OfferingId offering,
                                          const Demand& d, const PodArrival& arrival) const;
  // Free cpu and memory (milli) of a node; false when unknown.
  bool FreeHost(absl::string_view node, int64_t* cpu, int64_t* memory) const;
  const std::vector<std::string>& NodeNames() const { return names_; }  // live nodes, sorted
  bool HasNode(const std::string& node) const;

 private:
  struct NodeFacts {
    NodeObject object;
    bool removed = false;
    int64_t alloc_cpu = 0, alloc_memory = 0, alloc_pods = 0;
    int64_t used_cpu = 0, used_memory = 0, used_pods = 0;
    std::vector<int64_t> alloc_ext, used_ext;  // by resource id
    std::map<OfferingId, std::pair<int32_t, int32_t>> units;  // offering -> (count, capacity)
  };
  struct PodFacts {
    std::string node;
    std::string project;
    Demand demand;
    Assignment assignment;
    bool has_assignment = false;
    bool placeholder = false;
  };
  void Derive(NodeFacts* n);
  // Live nodes where `project` owns a time-sliced unit of `offering` with a free ticket, in
  // unit order (a node once per free unit it holds).
  std::vector<std::string> NodesWithOwnedFreeTicket(const std::string& project, OfferingId offering) const;
  std::string Fit(const Demand& d, const PodArrival& arrival, const NodeFacts& n) const;
  int32_t ResourceId(const std::string& name);
  void RebuildNames();

  std::shared_ptr<const Catalog> catalog_;
  std::vector<OfferingId> twin_of_;
  absl::node_hash_map<std::string, NodeFacts> nodes_;  // stable addresses (order_)
  std::vector<std::string> names_;
  std::vector<const NodeFacts*> order_;  // parallel to names_
  std::map<std::string, int32_t> resource_ids_;
  std::vector<std::string> resource_names_;
  std::map<std::string, PodFacts> pods_;
  std::map<UnitKey, std::vector<Holder>> units_;
  std::map<std::string, std::string> namespace_project_;
  // project -> offering -> quota in usage units (exclusive units, owned ts units, mps shares)
  std::map<std::string, std::map<OfferingId, int64_t>> quota_;
};

// The fewest new units any packing must open for the time-sliced tickets placed, the floor
// under which no policy can go (so 1 - floor / tickets placed is the ceiling of the affinity
// ratio). Tickets never move, and a unit no ticket holds is released; so between two moments
// at which a project holds no ticket of an offering, every packing opens at least
// ceil(peak live tickets / R) units, R being the most tickets any node gives one unit of the
// offering. The sum of those peaks over the project's busy periods is the floor.
class UnitOpeningFloor {
 public:
  // A ticket of `project` on a unit of `offering` with up to `max_replicas` tickets per unit.
  void Placed(const std::string& pod_key, const std::string& project, OfferingId offering,
              int32_t max_replicas);
  // The pod is gone (a no-op for pods Placed never saw).
  void Removed(const std::string& pod_key);
  int64_t openings() const { return openings_; }

 private:
  struct Busy {
    int64_t live = 0;       // tickets held now
    int64_t peak_units = 0;  // the most units the live tickets needed in this busy period
  };
  std::map<std::pair<std::string, OfferingId>, Busy> busy_;
  std::map<std::string, std::pair<std::string, OfferingId>> ticket_of_;  // pod key -> (project, offering)
  int64_t openings_ = 0;
};

}  // namespace gse::replay

#endif  // GSE_PERF_REPLAY_LEDGER_H_
