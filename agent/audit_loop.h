// AuditLoop: acts on what kubelet really handed out, on a thread of its own.
//
// One round (RunOnce):
//  1. Reads kubelet's pod-resources (List, with a deadline) and the node's pods (PodSource),
//     and gives the fresh pod-resources view to the AdmissionGuard (which drops the bookings
//     it now shows).
//  2. AuditNode (agent/node_audit.h). Each finding that was not reported before for that pod
//     is reported once: a JSON log line ("audit_mismatch"), gse_agent_audit_mismatches_total,
//     and a Warning Event "GpuUnitMismatch" on the pod.
//  3. Each confirmation becomes the pod's gpu.themelio.io/allocated annotation (merge patch
//     with the pod's UID), which opens the extender's per-node gate for the next pod.
//  4. Publishes the Node's gpu.themelio.io/inventory when its value changed (first round,
//     health changes) or the last attempt failed, and refreshes the unhealthy-unit gauges.
// Rounds run every `interval`, and soon after Kick() (called when an Allocate was answered:
// pod-resources shows the IDs once kubelet has recorded them, so a kicked round repeats every
// `kick_retry` while the guard still holds bookings that pod-resources does not show, up to
// `kick_retries` times).
// Without an ApiWriter (no API server) steps 2-4 only log and count.
// Thread-safety: Start/Stop from one thread; Kick from any thread; RunOnce from the loop
// thread or, when the loop is not started, from a test. mu_ guards the kick flag, the stop
// flag and the remembered reports.
#ifndef GSE_AGENT_AUDIT_LOOP_H_
#define GSE_AGENT_AUDIT_LOOP_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/admission_guard.h"
#include "agent/agent_metrics.h"
#include "agent/api_writer.h"
#include "agent/device_health.h"
#include "agent/node_audit.h"
#include "agent/node_pods.h"
#include "agent/pod_resources.h"
#include "agent/unit_map.h"
#include "state/catalog.h"

namespace gse::agent {

inline constexpr absl::string_view kMismatchReason = "GpuUnitMismatch";

struct AuditLoopOptions {
  std::string node;
  absl::Duration interval = absl::Seconds(10);
  absl::Duration kick_retry = absl::Milliseconds(20);
  int kick_retries = 100;
  absl::Duration pod_resources_timeout = absl::Seconds(2);
};

// What one round did (tests and logs).
struct AuditRound {
  bool pod_resources_ok = false;
  AuditReport report;
  int new_findings = 0;
  int confirmed = 0;        // annotations written
  int write_errors = 0;     // failed patches and Event posts
  bool inventory_published = false;
};

class AuditLoop {
 public:
  // Pointers must outlive the loop; `writer` may be null.
  AuditLoop(const UnitMap* units, const Catalog* catalog, PodSource* pods,
            PodResourcesSource* pod_resources, AdmissionGuard* guard, const DeviceHealth* health,
            AgentMetrics* metrics, ApiWriter* writer, AuditLoopOptions options);
  ~AuditLoop();
  AuditLoop(const AuditLoop&) = delete;
  AuditLoop& operator=(const AuditLoop&) = delete;

  void Start();
  void Stop();
  void Kick();
  AuditRound RunOnce();
  int64_t rounds() const;

 private:
  void Loop();
  void ReportFindings(const std::vector<NodePod>& pods, AuditRound* round);
  void WriteConfirmations(const std::vector<NodePod>& pods, AuditRound* round);
  void PublishInventory(AuditRound* round);

  const UnitMap* units_;
  const Catalog* catalog_;
  PodSource* pods_;
  PodResourcesSource* pod_resources_;
  AdmissionGuard* guard_;
  const DeviceHealth* health_;
  AgentMetrics* metrics_;
  ApiWriter* writer_;
  const AuditLoopOptions options_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool kicked_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  // "<pod>\n<resource>\n<message>" already reported, per pod key (dropped when the pod goes).
  std::map<std::string, std::set<std::string>> reported_ ABSL_GUARDED_BY(mu_);
  // Annotations written, by pod key: not written again until the pod shows another value.
  std::map<std::string, std::string> confirmed_ ABSL_GUARDED_BY(mu_);
  std::string published_inventory_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_AUDIT_LOOP_H_
