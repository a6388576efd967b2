// ApiWriter: the node agent's writes to the API server, and the bodies it sends.
//
//  * ConfirmAllocation: a JSON merge patch of the pod's gpu.themelio.io/allocated annotation
//    (docs/agent.md, "Extender cooperation"). The patch carries the pod's metadata.uid, so it
//    fails (the API server refuses to change a UID) instead of confirming a newer pod that
//    reuses the name.
//  * PublishInventory: a merge patch of the Node's gpu.themelio.io/inventory annotation
//    (agent/published_inventory.h).
//  * PostPodEvent: a core/v1 Event on a pod (type Warning), as kubelet's and the scheduler's
//    event recorders write them (name "<pod>.<unique hex>", source component and host).
// The body builders are pure functions (tests check them); the writer only sends.
// Thread-safe (KubeClient is).
#ifndef GSE_AGENT_API_WRITER_H_
#define GSE_AGENT_API_WRITER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace gse::agent {

inline constexpr absl::string_view kAgentComponent = "gpu-slice-agent";
// Longest Event message sent (events.k8s.io limits notes to 1 KiB; core/v1 follows suit).
inline constexpr size_t kMaxEventMessage = 1024;

// {"metadata":{"uid":"<uid>","annotations":{"<key>":"<value>"}}} (uid left out when empty).
std::string AnnotationPatch(absl::string_view key, absl::string_view value, absl::string_view uid);

struct PodRef {
  std::string namespace_name;
  std::string name;
  std::string uid;
};

// A core/v1 Event on `pod`; `unique` makes the name unique (e.g. the time in nanoseconds).
std::string PodEventJson(const PodRef& pod, absl::string_view node, absl::string_view type,
                         absl::string_view reason, absl::string_view message, absl::Time now,
                         uint64_t unique);

class ApiWriter {
 public:
  // `client` must outlive the writer.
  ApiWriter(KubeClient* client, std::string node);

  absl::Status ConfirmAllocation(const PodRef& pod, absl::string_view ids);
  absl::Status PublishInventory(absl::string_view inventory_json);
  absl::Status PostPodEvent(const PodRef& pod, absl::string_view reason, absl::string_view message);

 private:
  KubeClient* const client_;
  const std::string node_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_API_WRITER_H_
