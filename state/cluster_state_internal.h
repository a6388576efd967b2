// Helpers shared by the files that implement ClusterState (cluster_state.h); not part of its
// interface. Each file of ClusterState holds one concept:
//   cluster_state.cc   construction, lookups, whole documents (ApplyBatch)
//   node_units.cc      Node objects -> offerings and units (capacity, draining)
//   pod_holdings.cc    pods -> holdings on units (annotated, charged), owners and usage
//   project_quotas.cc  namespaces -> projects, ResourceQuotas and the quota file -> quotas
//   room_index.cc      what decisions read instead of units: summaries, room rows, the
//                      per-project index of owned units with room
//   reservation.cc     the commit point: Reserve, Confirm, Release
//   audit.cc           the independent recount of I1, I2, I4 and of the derived indexes
//   agent_gate.cc      the node agent's per-node gate: which pods await it, what it admits
#ifndef GSE_STATE_CLUSTER_STATE_INTERNAL_H_
#define GSE_STATE_CLUSTER_STATE_INTERNAL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "state/catalog.h"
#include "state/cluster_state.h"

namespace gse {
namespace cluster_state_internal {

using NodeMap = absl::flat_hash_map<std::string, std::unique_ptr<NodeState>>;

// Inserts `no` into the node's offerings, which stay sorted by offering id.
NodeOffering* InsertOffering(NodeState& node, NodeOffering no);

// The unit a fact (annotation or charge) names, created as draining when the mirror does not
// have it: the API server is the truth, so such units keep holders and take no new ones. A
// node that exists only for such units is created marked removed.
Unit& EnsureUnit(NodeMap& nodes, const Catalog& catalog, const std::string& node_name,
                 OfferingId offering, int32_t index);

// After holders left: drops free draining units at the tail, offerings that are neither
// advertised nor held, and a removed node that holds nothing any more.
void TrimNode(NodeMap& nodes, const std::string& node_name);

// The pods awaiting the node agent on one node offering, met in unit and holder order
// (AgentGateOf and Summarise both walk them): the first, and whether all hold the same units
// with the same amount per unit. Only shared offerings (time-sliced, MPS) form a group a new
// pod may join; an exclusive unit has one holder.
struct AgentWaitingGroup {
  explicit AgentWaitingGroup(bool shared) : one_group(shared) {}
  void Add(const PodRecord& rec) {
    if (first == nullptr) {
      first = &rec;
    } else if (rec.assignment.units != first->assignment.units ||
               rec.assignment.amount_per_unit != first->assignment.amount_per_unit) {
      one_group = false;
    }
  }
  const PodRecord* first = nullptr;
  bool one_group;
};

}  // namespace cluster_state_internal
}  // namespace gse

#endif  // GSE_STATE_CLUSTER_STATE_INTERNAL_H_
