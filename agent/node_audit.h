// NodeAudit: checks what kubelet actually handed out (pod-resources List) against the unit
// annotations, and finds the pods whose allocation can be confirmed to the extender.
//
// Rules (per served offering R), each violation one finding naming the pod and the rule:
//  * every device ID a running container holds of R is a device of R on this node;
//  * an annotated pod's IDs lie in its annotated units;
//  * no device ID is held by two pods (no oversubscription: an exclusive unit has one holder,
//    a time-sliced unit at most `replicas` tickets, since its IDs are its tickets);
//  * no time-sliced unit serves two projects (I2).
// A confirmation is an annotated pod whose IDs fit and whose gpu.themelio.io/allocated
// annotation does not yet say so: the extender's per-node gate waits for it
// (docs/agent.md, "Extender cooperation").
// AuditNode is a pure function; thread-safe.
#ifndef GSE_AGENT_NODE_AUDIT_H_
#define GSE_AGENT_NODE_AUDIT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "agent/node_pods.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "state/assignment.h"
#include "state/catalog.h"

namespace gse::agent {

// Written by the agent on a pod once kubelet's IDs for it are verified:
// gse::kAnnotationAllocated (state/assignment.h, shared with the extender).

struct AuditFinding {
  std::string pod_key;
  std::string resource;
  std::string message;
};

struct Confirmation {
  std::string pod_key;
  std::string resource;
  std::string ids;  // sorted, comma-separated: the annotation value
};

struct AuditReport {
  int containers_checked = 0;
  std::vector<AuditFinding> findings;
  std::vector<Confirmation> confirmations;
};

AuditReport AuditNode(absl::string_view node, const UnitMap& units, const Catalog& catalog,
                      const std::vector<NodePod>& pods,
                      const std::vector<ContainerDeviceIds>& view);

}  // namespace gse::agent

#endif  // GSE_AGENT_NODE_AUDIT_H_
