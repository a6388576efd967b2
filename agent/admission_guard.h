// AdmissionGuard: answers kubelet's anonymous GetPreferredAllocation and Allocate calls with
// the devices of the pod being admitted, and refuses when it cannot know which pod that is.
// This is the crux of the node agent; docs/agent.md states the kubelet behaviour it relies on.
//
// How a call is attributed (per served offering R):
//  1. Pending pods: live pods on this node (not terminal, not being deleted) that request R
//     and hold fewer IDs of R than they need. Held IDs are what kubelet's pod-resources last
//     showed, plus the allocations this guard answered since (its book).
//  2. Pending pods are grouped by equivalence (agent/entitlement.h). Exactly one group: the
//     call is for one of its pods, and any of them is a right answer. GetPreferredAllocation
//     groups the watch's view and, with none or several groups, refreshes once (a fresh list
//     of the node's pods from the API server and a fresh pod-resources List, each with a
//     short deadline) and groups again. Allocate always decides on a refreshed view: the
//     agent's watch may lag kubelet's, and a view that misses the pod being admitted can show
//     exactly one group of other pods (a fresh list is a consistent read and holds every
//     binding kubelet can have seen). No fresh list: Allocate refuses.
//  3. Still none or several: GetPreferredAllocation answers only must_include (kubelet fills
//     the rest) and Allocate fails with a message naming the candidates: the pod is rejected
//     visibly (UnexpectedAdmissionError) and recreated by its controller, rather than given
//     another project's unit.
//  4. One group: GetPreferredAllocation returns free IDs of its unit(s) (PreferredIds);
//     Allocate checks kubelet's IDs against the entitlement (CheckIdsFit) and books them.
//  5. PreStartContainer (VerifyPreStart) looks the IDs up in pod-resources, which names the
//     pod exactly, and refuses the container start if they lie outside that pod's units.
// No call blocks longer than the refresh deadlines (kubelet sets none on these RPCs).
//
// Thread-safety: all methods may be called concurrently (kubelet serialises admission, but
// re-allocations on container restart may overlap it). mu_ guards the book and the cached
// pod-resources view; a decision and its booking happen under one lock hold, so two calls
// never hand out the same entitlement twice. No I/O happens under mu_.
#ifndef GSE_AGENT_ADMISSION_GUARD_H_
#define GSE_AGENT_ADMISSION_GUARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/entitlement.h"
#include "agent/node_pods.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "state/catalog.h"

namespace gse::agent {

enum class AdmissionOutcome {
  kAllocated,    // IDs fit the identified pod's entitlement
  kNoCandidate,  // no pending pod requests this resource (even after a refresh)
  kAmbiguous,    // pending pods of several non-equivalent entitlements
  kRefused,      // the identified pod may not receive these IDs (or nothing at all)
};
const char* AdmissionOutcomeName(AdmissionOutcome outcome);  // "allocated", "ambiguous", ...

struct AdmissionResult {
  AdmissionOutcome outcome = AdmissionOutcome::kRefused;
  absl::Status status;  // OK iff kAllocated; otherwise the message kubelet shows on the pod
  std::string pod_key;  // the identified pod (a representative of its equivalence group)
  std::vector<DeviceRef> refs;  // the IDs' units and tickets (kAllocated)
  bool refreshed = false;       // the view had to be refreshed to decide
};

struct AdmissionOptions {
  std::string node;
  absl::Duration resync_timeout = absl::Seconds(2);
  absl::Duration pod_resources_timeout = absl::Seconds(1);
  absl::Duration prestart_timeout = absl::Seconds(5);  // kubelet allows PreStartContainer 30 s
  // Kubelet records an allocation in its pod book (which pod-resources lists) as soon as the
  // Allocate RPC returns. A booking that a view listed this long after it still does not show
  // was never recorded, or its pod is gone (killed before the agent ever saw it listed).
  absl::Duration booking_grace = absl::Seconds(5);
};

class AdmissionGuard {
 public:
  // All pointers must outlive the guard.
  AdmissionGuard(const Catalog* catalog, PodSource* pods, PodResourcesSource* pod_resources,
                 AdmissionOptions options);

  std::vector<std::string> PreferredAllocation(const ServedOffering& offering,
                                               const std::vector<std::string>& available,
                                               const std::vector<std::string>& must_include,
                                               int32_t size);
  AdmissionResult Allocate(const ServedOffering& offering, const std::vector<std::string>& ids);
  // OK with the pod's key when pod-resources shows `ids` on a pod they fit.
  AdmissionResult VerifyPreStart(const ServedOffering& offering,
                                 const std::vector<std::string>& ids);

  // A fresh pod-resources view (from the audit loop): replaces the cached one and drops the
  // bookings it now shows, and those older than booking_grace that it does not show.
  void UpdatePodResources(std::vector<ContainerDeviceIds> view);
  size_t bookings() const;

 private:
  struct Booking {
    std::string pod_key;
    std::string resource;
    std::vector<std::string> ids;
    absl::Time made;
  };
  struct Decision;

  Decision Decide(const ServedOffering& offering, const std::vector<NodePod>& pods) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One refresh of both views (no lock held), from an admission call (GetPreferredAllocation
  // or Allocate) that began at `call_started`. The status of the pod list: not OK when no
  // fresh list of the node's pods came within resync_timeout.
  absl::Status Refresh(absl::Time call_started);
  // Replaces the cached view. Bookings it shows are recorded by kubelet now; bookings made
  // before `unrecorded_before` that it does not show never will be.
  void ApplyView(std::vector<ContainerDeviceIds> view, absl::Time unrecorded_before);

  const Catalog* catalog_;
  PodSource* pods_;
  PodResourcesSource* pod_resources_;
  const AdmissionOptions options_;

  mutable absl::Mutex mu_;
  std::vector<ContainerDeviceIds> view_ ABSL_GUARDED_BY(mu_);
  std::vector<Booking> bookings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse::agent

#endif  // GSE_AGENT_ADMISSION_GUARD_H_
