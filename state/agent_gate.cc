// ClusterState, the node agent's per-node gate (docs/agent.md, "Extender cooperation").
//
// Why: kubelet's device-plugin calls carry no pod identity. The agent can tell which pod
// kubelet admits only while every pod bound to the node and not yet admitted waits for the
// same unit(s) (one equivalence group per node and offering); otherwise it refuses the
// admission (fail closed). So on a node with an agent, a pod may be bound for an offering only
// if every pod there that the agent has not confirmed yet waits for exactly the units and
// amount the new pod would get: for a time-sliced or MPS offering the waiting group's unit,
// for an exclusive one nothing (its units are held).
//
// A pod awaits the agent from its bind (Reserve) or from the first sight of it bound with our
// annotation (ApplyPod) until gpu.themelio.io/allocated appears, it turns terminal or
// terminating, is deleted, or its wait expires (ExpireAgentWaits). Waits are counted in the
// node's summaries (OfferingSummary::agent_waiting, RoomRow::agent_gate), so that a filter of
// an ungated node pays one flag, and the summary keeps the one unit a new pod may join
// (agent_join_unit), so that a gated one pays no walk of its holders either; Reserve's check
// reads the group from the units' holders here.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "state/cluster_state.h"
#include "state/cluster_state_internal.h"

namespace gse {

void ClusterState::SetAwaitingAgent(PodRecord& rec, bool awaiting, absl::Time now) {
  if (rec.awaiting_agent == awaiting) return;
  rec.awaiting_agent = awaiting;
  if (awaiting) {
    rec.awaiting_agent_since = now;
    agent_waiting_.insert(rec.id);
  } else {
    agent_waiting_.erase(rec.id);
  }
  Reindex(rec.assignment.node);
}

ClusterState::AgentGate ClusterState::AgentGateOf(const NodeState& node,
                                                  OfferingId offering) const {
  AgentGate gate;
  const NodeOffering* no = node.Find(offering);
  if (!node.agent || no == nullptr || no->summary.agent_waiting == 0) return gate;
  gate.closed = true;
  cluster_state_internal::AgentWaitingGroup group(catalog_->Get(offering).shared());
  for (const Unit& unit : no->units) {
    for (const Holding& h : unit.holders) {
      auto it = pods_.find(h.pod_id);
      if (it != pods_.end() && it->second.awaiting_agent) group.Add(it->second);
    }
  }
  const PodRecord* first = group.first;
  const bool one_group = group.one_group;
  if (first == nullptr) return gate;  // not reached: agent_waiting counts these holders
  gate.waiting_pod = first->key;
  if (one_group) {
    Assignment a;
    a.node = node.name;
    a.offering = offering;
    a.units = first->assignment.units;
    a.amount_per_unit = first->assignment.amount_per_unit;
    gate.joinable = std::move(a);
  }
  return gate;
}

absl::Status ClusterState::CheckAgentGate(const PodClaim& claim, const Assignment& a) const {
  const NodeState* node = FindNode(a.node);
  if (node == nullptr) return absl::OkStatus();  // CheckUnitsExist refuses it
  if (node->agent && node->agent_stale) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reserve ", claim.key, ": node ", a.node,
        ": node agent not renewing its heartbeat Lease (last renewal seen ",
        node->agent_last_renewal == absl::InfinitePast()
            ? std::string("never")
            : absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", node->agent_last_renewal,
                               absl::UTCTimeZone()),
        "): a dead agent cannot admit the pod"));
  }
  const AgentGate gate = AgentGateOf(*node, a.offering);
  if (!gate.closed) return absl::OkStatus();
  if (gate.joinable && gate.joinable->units == a.units &&
      gate.joinable->amount_per_unit == a.amount_per_unit) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "reserve ", claim.key, ": waiting for the node agent: pod ", gate.waiting_pod,
      " bound to node ", a.node, " for ", catalog_->Get(a.offering).resource,
      " is not confirmed by the node's agent yet",
      gate.joinable ? absl::StrCat(" (only unit(s) ", absl::StrJoin(gate.joinable->units, ","),
                                   " may be bound there until then)")
                    : std::string()));
}

int ClusterState::ExpireAgentWaits(absl::Time now, absl::Duration timeout) {
  std::vector<std::string> expired;
  for (const std::string& id : agent_waiting_) {
    auto it = pods_.find(id);
    if (it != pods_.end() && now - it->second.awaiting_agent_since >= timeout) {
      expired.push_back(id);
    }
  }
  for (const std::string& id : expired) {
    PodRecord& rec = pods_.find(id)->second;
    rec.agent_wait_expired = true;
    SetAwaitingAgent(rec, false, now);
  }
  return static_cast<int>(expired.size());
}

void ClusterState::InheritAgentWaits(const ClusterState& old) {
  std::vector<std::string> ended;
  for (auto& [id, rec] : pods_) {
    const PodRecord* before = old.FindPodById(id);
    if (before == nullptr) continue;
    if (before->agent_wait_expired) {
      rec.agent_wait_expired = true;
      if (rec.awaiting_agent) ended.push_back(id);
    } else if (rec.awaiting_agent && before->awaiting_agent) {
      rec.awaiting_agent_since = before->awaiting_agent_since;
    }
  }
  for (const std::string& id : ended) SetAwaitingAgent(pods_.find(id)->second, false, absl::Now());
}

bool ClusterState::SetAgentStale(absl::string_view name, bool stale, absl::Time last_renewal) {
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return false;
  NodeState& node = *it->second;
  node.agent_last_renewal = last_renewal;
  if (node.agent_stale == stale) return false;
  node.agent_stale = stale;
  // Availability (hence every room row and summary's `open`) depends on it.
  Reindex(node.name);
  return true;
}

void ClusterState::InheritAgentLiveness(const ClusterState& old) {
  for (const auto& [name, node] : old.nodes()) {
    if (node->agent_stale) SetAgentStale(name, true, node->agent_last_renewal);
  }
}

int ClusterState::AgentStaleNodes() const {
  int n = 0;
  for (const auto& [name, node] : nodes_) n += node->agent && node->agent_stale && !node->removed ? 1 : 0;
  return n;
}

}  // namespace gse
