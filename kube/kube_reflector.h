// KubeReflector: keeps the Mirror equal to what the API server holds, by list-then-watch of
// Nodes, Pods (all namespaces), Namespaces and ResourceQuotas, and in DRA mode
// (ReflectorOptions::dra, docs/dra.md) also resource.k8s.io/v1 DeviceClasses, ResourceSlices
// and ResourceClaims, listed and watched like the others (one full list of every kind, one
// watch per kind, 410 relists all). An object the decoders refuse is skipped and logged
// naming the field (decode_error); nothing of it reaches the mirror.
//
// Contract:
//  * The first full list of all four kinds is applied with one Mirror::ReplaceAll, so a
//    decision never sees a half-built mirror; synced() turns true only then and stays true.
//  * Then one watch per kind streams from its list's resourceVersion (allowWatchBookmarks,
//    timeoutSeconds with jitter) and applies each event under the mirror's writer lock. A
//    disconnect, a 5xx or a corrupt event line reconnects from the last resourceVersion seen,
//    with exponential backoff and jitter.
//  * 410 Gone (on the watch request or as an ERROR event) stops all watches, relists all four
//    kinds and replaces the mirror atomically (reservations of in-flight binds are kept by
//    ReplaceAll), then watches again from the new resourceVersions.
//  * Every `resync_period` (and on RequestResync) the same relist compares the mirror before
//    and after: each pod whose holding differs, each node whose fingerprint differs and each
//    project whose quota differs is a drift repair, counted and logged as one JSON line.
//  * Full lists are numbered in the order they are sent (1 = the initial one). RequestResync
//    returns the number of the first list sent after the request, which therefore shows every
//    write the API server committed before it; on_listed(n) says when list n has been applied
//    (a take-over waits for that: kube/leader_election.h, extender/live_cluster.h).
//  * A pod event or listed pod that shows a pod pending while the mirror holds that pod (same
//    UID) is older than our own bind (spec.nodeName never returns to empty) and is not
//    applied: a holding is never dropped by a stale view of the pod.
//  * Thread-safe; Start() spawns the threads, Stop() (or the destructor) joins them.
#ifndef GSE_KUBE_KUBE_REFLECTOR_H_
#define GSE_KUBE_KUBE_REFLECTOR_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "rapidjson/document.h"
#include "state/mirror.h"

namespace gse {

struct ReflectorOptions {
  // Server-side watch duration (timeoutSeconds); each watch picks a value in [t, 2t) as
  // client-go does, so that many clients do not reconnect in step.
  absl::Duration watch_timeout = absl::Minutes(5);
  // Periodic full relist with drift repair; zero disables it.
  absl::Duration resync_period = absl::Minutes(10);
  absl::Duration backoff_initial = absl::Milliseconds(200);
  absl::Duration backoff_max = absl::Seconds(30);
  // Called once, from the reflector's thread, right after the first full list was applied.
  std::function<void()> on_synced;
  // Called from the reflector's thread after each full list (initial, 410, resync) was
  // applied, with its number (see RequestResync); after on_synced for the first. May be empty.
  std::function<void(int64_t list)> on_listed;
  // DRA mode: list and watch the three resource.k8s.io/v1 kinds too (the Mirror must have
  // MirrorOptions::dra for them to count).
  bool dra = false;
  // Where one-line JSON logs go (drift repairs, errors); default: stderr.
  std::function<void(const std::string& json_line)> log;
};

// Counters for metrics and tests (a consistent copy).
struct ReflectorCounters {
  // Kinds, in this order, for the breakdowns below: nodes, pods, namespaces, resourcequotas,
  // then the DRA kinds (watched in DRA mode only).
  static constexpr const char* kKinds[] = {"nodes",         "pods",           "namespaces",
                                           "resourcequotas", "deviceclasses", "resourceslices",
                                           "resourceclaims"};
  int64_t watch_restarts = 0;  // watches opened again after the first one of a sync
  int64_t relists = 0;         // full relists after the initial one (410, resync)
  int64_t expired = 0;         // 410 Gone answers or ERROR events seen
  int64_t drift_repairs = 0;   // objects that a relist found different in the mirror
  int64_t api_errors = 0;      // failed list/watch calls and corrupt watch lines
  // The same, broken down (each sums to its total): restarts per watched kind (kKinds order),
  // API errors per call (list, or the watch of each kind), repairs per object kind.
  std::array<int64_t, 7> watch_restarts_by_kind{};
  int64_t list_errors = 0;
  int64_t watch_errors = 0;
  int64_t pod_repairs = 0;
  int64_t node_repairs = 0;
  int64_t project_quota_repairs = 0;
  int64_t decode_errors = 0;   // objects the decoders rejected (skipped, logged)
  int64_t events_applied = 0;  // watch events applied to the mirror (not bookmarks)
  // Pod states older than our own bind (pending, same UID, while the mirror holds the pod),
  // from the watch or a list: not applied, see IsStaleUnboundPod in kube_reflector.cc.
  int64_t stale_pod_events = 0;
  bool synced = false;
  absl::Time last_sync = absl::InfinitePast();   // last full list applied
  absl::Time last_event = absl::InfinitePast();  // last watch event or bookmark
};

class KubeReflector {
 public:
  KubeReflector(KubeClient* client, Mirror* mirror, ReflectorOptions options = {});
  ~KubeReflector();
  KubeReflector(const KubeReflector&) = delete;
  KubeReflector& operator=(const KubeReflector&) = delete;

  void Start();
  void Stop();

  bool synced() const;
  // Blocks until synced (true) or until `timeout` passes (false).
  bool WaitForSync(absl::Duration timeout) const;
  // Asks for a relist with drift repair now (asynchronous). Returns the number of the list
  // that will answer it: the next one sent (a list already under way may predate the request).
  int64_t RequestResync();
  // Blocks until `n` relists have completed since start (tests), false on timeout.
  bool WaitForRelists(int64_t n, absl::Duration timeout) const;
  ReflectorCounters counters() const;

  // The watched kinds: the first four always, the DRA kinds in DRA mode.
  enum Kind {
    kNodes = 0,
    kPods,
    kNamespaces,
    kQuotas,
    kDeviceClasses,
    kResourceSlices,
    kResourceClaims,
    kKindCount
  };

 private:
  struct Listed;
  void Run();
  absl::Status ListAll(Listed* out);
  void ApplyList(const Listed& listed, absl::string_view cause);
  void WatchLoop(Kind kind, std::string resource_version, WatchStopper* stopper);
  // Handles one watch line; false ends the watch (`*relist` set for 410, `*corrupt` for a
  // line that is not a JSON event).
  bool HandleLine(Kind kind, absl::string_view line, std::string* resource_version, bool* relist,
                  bool* corrupt);
  // The kinds this reflector lists and watches (the DRA ones in DRA mode only).
  int KindCount() const { return options_.dra ? kKindCount : kDeviceClasses; }
  // A DRA kind's watch event (ADDED/MODIFIED/DELETED) applied to the mirror; the decoder's
  // error when the object is refused (nothing applied then).
  absl::Status ApplyDraEvent(Kind kind, bool deleted, const rapidjson::Value& object,
                             absl::string_view name, absl::string_view namespace_name,
                             absl::string_view path);
  void Log(const std::string& json_line) const;
  void Count(int64_t ReflectorCounters::*field, int64_t n = 1);
  void SleepUnlessStopped(absl::Duration d, const WatchStopper* stopper);
  // Polls `pred` under mu_ until it holds or `deadline` passes. (Debian's Abseil is not built
  // with TSan and cmake/tsan_absl_sync.cc wraps Lock/Unlock/Await but not the timed waits, so
  // timed waits here use plain locking.)
  bool WaitUntil(const std::function<bool()>& pred, absl::Time deadline) const;

  KubeClient* const client_;
  Mirror* const mirror_;
  const ReflectorOptions options_;

  mutable absl::Mutex mu_;
  ReflectorCounters counters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool relist_needed_ ABSL_GUARDED_BY(mu_) = false;  // a watch saw 410
  bool resync_requested_ ABSL_GUARDED_BY(mu_) = false;
  int64_t lists_sent_ ABSL_GUARDED_BY(mu_) = 0;  // full lists started (numbers handed out)
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  std::thread runner_;
};

}  // namespace gse

#endif  // GSE_KUBE_KUBE_REFLECTOR_H_
