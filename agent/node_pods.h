// NodePod: what the agent knows about one pod bound to its node, and PodSource, where the
// agent gets them from (the API server's pods with spec.nodeName = this node; tests give a
// fixed set).
//
// A NodePod keeps what identification needs: identity, phase, deletion, annotations, and how
// many devices of each requested extended resource the pod's containers need in total (what
// kubelet's device manager will allocate: the app containers' and sidecars' limits added up,
// or what an init container needs with the sidecars started before it if that is more, since
// other init containers' devices are reused; AggregatePodRequest).
#ifndef GSE_AGENT_NODE_PODS_H_
#define GSE_AGENT_NODE_PODS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rapidjson/document.h"

namespace gse::agent {

struct NodePod {
  std::string namespace_name;
  std::string name;
  std::string uid;
  std::string node;  // spec.nodeName
  std::string phase;
  bool terminating = false;         // metadata.deletionTimestamp set
  std::string creation_timestamp;   // RFC 3339, sorts as text
  std::map<std::string, std::string> annotations;
  // Extended resource (as the pod names it) -> devices needed in total.
  std::map<std::string, int64_t> device_needs;

  std::string Key() const { return namespace_name + "/" + name; }
  bool Terminal() const { return phase == "Succeeded" || phase == "Failed"; }
};

// Decodes a Pod object (list item or watch object). Errors name `path` and the field.
absl::StatusOr<NodePod> DecodeNodePod(const rapidjson::Value& value, absl::string_view path);

// Where pods come from. Thread-safe implementations only.
class PodSource {
 public:
  virtual ~PodSource() = default;
  // The pods of this node as currently known (may lag the API server).
  virtual std::vector<NodePod> Snapshot() const = 0;
  // Brings the view up to date (a fresh list), waiting at most `timeout`.
  virtual absl::Status Resync(absl::Duration timeout) = 0;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_NODE_PODS_H_
