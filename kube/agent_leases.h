// The node agents' heartbeat Leases (docs/agent.md "Agent liveness"): their name and wire
// format, the extender's table of the last renewal of each, and its list/watch of them.
//
// Why a Lease: the agent writes its inventory annotation only when the inventory changes, so
// a Node cannot tell a dead agent from a quiet one. Every agent renews
// coordination.k8s.io/v1 Lease `gse-agent-<node>` in its namespace (holderIdentity
// "<node>/<pod>", renewTime = its clock) every --heartbeat-interval (agent/heartbeat.h).
//
// Clock choice: a renewal is a *change* of spec.renewTime that the extender receives; it is
// dated with the extender's own receive time, never with the agent's renewTime, so a skewed
// agent (or extender) clock cannot make nodes stale. Only a Lease first seen (the initial
// list, a relist, a new Lease) dates its renewal from renewTime, and then no later than it
// was received: at min(received, renewTime + margin) with margin = the heartbeat timeout, so
// an agent clock up to one timeout behind never makes its node stale, and a Lease that was
// left alone for long (its agent died before the extender started) is stale at once.
//
// Thread-safety: AgentLeaseTable is guarded by its own mutex (never the Mirror's: renewals
// arrive at nodes / interval per second and must not take the mirror's writer lock);
// AgentLeaseWatcher runs one thread that alone feeds it.
#ifndef GSE_KUBE_AGENT_LEASES_H_
#define GSE_KUBE_AGENT_LEASES_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "rapidjson/document.h"

namespace gse {

inline constexpr absl::string_view kAgentLeasePrefix = "gse-agent-";
// Node names longer than this have no Lease name (a Lease name is at most 253 characters).
inline constexpr size_t kMaxAgentLeaseNode = 253 - kAgentLeasePrefix.size();

// "gse-agent-<node>".
std::string AgentLeaseName(absl::string_view node);
// The node of an agent Lease name; nullopt for a name without the prefix (not an agent Lease:
// the namespace may hold others). A prefixed name whose rest is not a Node name is an error.
absl::StatusOr<std::optional<std::string>> NodeOfAgentLease(absl::string_view lease_name);

struct AgentLease {
  std::string node;       // from metadata.name
  std::string holder;     // spec.holderIdentity ("" when absent)
  std::string renew_text; // spec.renewTime as sent (a change of it is a renewal)
  absl::Time renew_time;  // spec.renewTime parsed (the agent's clock)
};

// Decodes a Lease object. nullopt: a Lease that is not an agent's (no prefix). Errors name
// `path` and the field: metadata.name (a prefixed name that is no Node name), spec.renewTime
// (missing, not a string, not an RFC 3339 time), spec.holderIdentity (not a string, over 1 KiB).
absl::StatusOr<std::optional<AgentLease>> DecodeAgentLease(const rapidjson::Value& object,
                                                           absl::string_view path);
// The agent's renewTime: RFC 3339 with microseconds (metav1.MicroTime), UTC.
std::string FormatLeaseTime(absl::Time t);

// The last renewal of each node's agent on the extender's clock.
class AgentLeaseTable {
 public:
  // `margin`: how far behind the extender an agent's clock may be before a Lease first seen
  // counts as old (the heartbeat timeout).
  explicit AgentLeaseTable(absl::Duration margin) : margin_(margin) {}

  // A full list received at `received`: replaces the table. A Lease listed with the renewTime
  // already known keeps its renewal time (a relist is no renewal).
  void Replace(const std::vector<AgentLease>& leases, absl::Time received);
  // A watch event (ADDED/MODIFIED) received at `received`.
  void Apply(const AgentLease& lease, absl::Time received);
  void Remove(absl::string_view node);
  // Whether the table reflects the API server now: a list was applied and the watch since
  // has not failed (a failure is followed by a re-watch or relist that sets it again). While
  // false the sweep judges nothing (a lost stream must not make every node stale).
  void SetCurrent(bool current);
  bool current() const;
  // The node's last renewal on our clock; for a node without a Lease the time the first list
  // was applied (the agent had that long to create it); InfinitePast before any list.
  absl::Time LastRenewal(absl::string_view node) const;

  struct Entry {
    std::string holder;
    std::string renew_text;
    absl::Time renewed_at;  // our clock
  };
  std::optional<Entry> Find(absl::string_view node) const;
  size_t size() const;

 private:
  Entry Fresh(const AgentLease& lease, absl::Time received) const;
  const absl::Duration margin_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by node
  absl::Time first_list_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool current_ ABSL_GUARDED_BY(mu_) = false;
};

struct AgentLeaseWatcherOptions {
  std::string lease_namespace = "gpu-slice-agent";
  absl::Duration watch_timeout = absl::Minutes(5);  // server-side, jittered to [t, 2t)
  absl::Duration backoff_initial = absl::Milliseconds(200);
  absl::Duration backoff_max = absl::Seconds(30);
  std::function<void(const std::string& json_line)> log;  // default: stderr
};

struct AgentLeaseCounters {
  int64_t lists = 0;          // full lists applied
  int64_t events = 0;         // watch events applied (not bookmarks)
  int64_t decode_errors = 0;  // Leases rejected (logged; nothing changed)
  int64_t api_errors = 0;     // failed lists and watches
};

// List, then watch, /apis/coordination.k8s.io/v1/namespaces/<ns>/leases into a table: a
// failed or corrupt watch re-watches from the last resourceVersion after a backoff, 410
// relists. One thread; Start/Stop from the owner.
class AgentLeaseWatcher {
 public:
  AgentLeaseWatcher(KubeClient* client, AgentLeaseTable* table, AgentLeaseWatcherOptions options);
  ~AgentLeaseWatcher();
  void Start();
  void Stop();
  AgentLeaseCounters counters() const;

 private:
  void Run();
  absl::StatusOr<std::string> List();
  // Handles one watch line; false ends the watch (`*relist` for 410, `*broken` otherwise).
  bool HandleLine(absl::string_view line, std::string* rv, bool* relist, bool* broken);
  void Log(absl::string_view event, absl::string_view detail) const;
  void Sleep(absl::Duration d);
  bool stopping() const;

  KubeClient* const client_;
  AgentLeaseTable* const table_;
  const AgentLeaseWatcherOptions options_;
  const std::string path_;
  mutable absl::Mutex mu_;
  AgentLeaseCounters counters_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  WatchStopper stopper_;
  std::thread thread_;
};

}  // namespace gse

#endif  // GSE_KUBE_AGENT_LEASES_H_
