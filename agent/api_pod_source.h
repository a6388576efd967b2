// ApiPodSource: the pods bound to this node, from the API server (list + watch with
// fieldSelector=spec.nodeName=<node>, the same selector kubelet uses), for the AdmissionGuard
// and the audit (agent/node_pods.h's PodSource).
//
// Contract:
//  * One runner thread owns the view's updates: it lists (pages of `page_size`), replaces the
//    view, then watches from the list's resourceVersion (allowWatchBookmarks, timeoutSeconds)
//    and applies ADDED/MODIFIED (upsert) and DELETED events. A watch that ends cleanly is
//    resumed from the last resourceVersion seen; a failed or corrupt one after a backoff; a
//    410 Gone (answer or ERROR event) by a fresh list. ResourceVersions are opaque and never
//    compared: because only the runner writes, list and events apply in the server's order.
//  * Resync(timeout) is the "re-list on a miss": it asks the runner for a fresh list (ending
//    the current watch at once) and waits until a list that started after the call has been
//    applied, at most `timeout` (DeadlineExceeded otherwise; the old view stays). Concurrent
//    callers share one list.
//  * A pod the decoder rejects (state/k8s_objects.h validation) is left out of the view and
//    counted; a pod that is in the view and then fails to decode is removed (it could not be
//    judged, so it gets nothing).
// Thread-safety: every method may be called from any thread. mu_ guards the view, the
// counters and the runner's hand-shake fields; no I/O happens under mu_. Waits poll with
// plain locking (Debian's Abseil is not built with TSan; see cmake/tsan_absl_sync.cc).
#ifndef GSE_AGENT_API_POD_SOURCE_H_
#define GSE_AGENT_API_POD_SOURCE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/node_pods.h"
#include "kube/kube_client.h"

namespace gse::agent {

struct ApiPodSourceOptions {
  std::string node;
  // Server-side watch duration; each watch picks a value in [t, 2t) so nodes do not
  // reconnect in step.
  absl::Duration watch_timeout = absl::Minutes(5);
  absl::Duration backoff_initial = absl::Milliseconds(200);
  absl::Duration backoff_max = absl::Seconds(30);
};

struct PodSourceCounters {
  int64_t lists = 0;            // full lists applied (the first one included)
  int64_t watch_restarts = 0;   // watches opened after the first one of a list
  int64_t expired = 0;          // 410 Gone seen
  int64_t list_errors = 0;      // failed lists
  int64_t watch_errors = 0;     // failed watches and corrupt event lines
  int64_t decode_errors = 0;    // pods the decoder rejected
  int64_t events_applied = 0;   // ADDED/MODIFIED/DELETED events applied
  bool synced = false;          // the first list was applied
};

class ApiPodSource : public PodSource {
 public:
  // `client` must outlive the source.
  ApiPodSource(KubeClient* client, ApiPodSourceOptions options);
  ~ApiPodSource() override;
  ApiPodSource(const ApiPodSource&) = delete;
  ApiPodSource& operator=(const ApiPodSource&) = delete;

  void Start();
  void Stop();
  // Waits until the first list was applied; false on timeout.
  bool WaitForSync(absl::Duration timeout) const;

  std::vector<NodePod> Snapshot() const override;
  absl::Status Resync(absl::Duration timeout) override;

  PodSourceCounters counters() const;
  // "/api/v1/pods?fieldSelector=spec.nodeName%3D<node>" (exposed for tests).
  static std::string PodsPath(const std::string& node);

 private:
  void Run();
  // Lists every page; on success replaces the view and marks the Resync requests up to
  // `list_for` (the request count when the list started) as served. Returns the list's
  // resourceVersion.
  absl::StatusOr<std::string> ListAndReplace(int64_t list_for);
  // Watches until the stream ends, the stopper stops it, or a 410 (`*expired`).
  absl::Status WatchFrom(std::string* resource_version, WatchStopper* stopper, bool* expired);
  // One watch line; false ends the watch (corrupt line or ERROR event).
  bool HandleLine(absl::string_view line, std::string* resource_version, bool* expired,
                  bool* corrupt);
  bool Stopping() const;
  void SleepUnlessStopping(absl::Duration d) const;

  KubeClient* const client_;
  const ApiPodSourceOptions options_;
  const std::string path_;

  mutable absl::Mutex mu_;
  std::map<std::string, NodePod> pods_ ABSL_GUARDED_BY(mu_);  // by namespace/name
  PodSourceCounters counters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Resync hand-shake: callers raise `resync_wanted_`; the runner notes the value when a list
  // starts (`list_started_for_`) and publishes it once applied (`list_done_for_`).
  int64_t resync_wanted_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t list_done_for_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<WatchStopper> watch_stopper_ ABSL_GUARDED_BY(mu_);
  std::thread runner_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_API_POD_SOURCE_H_
