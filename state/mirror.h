// Mirror: the thread-safe cluster mirror that every request and every watch event goes through.
//
// Locking: one absl::Mutex `mu_` guards `state_`. Decisions (filter, prioritize, preempt) run
// under the reader lock through Read(), so they see one consistent state and run in parallel;
// every mutation takes the writer lock, so a decision never sees a half-applied update. Bind
// uses ReserveWith(): the unit is chosen and committed under one writer lock, so two binds
// can never take the same capacity. No callback may call back into the Mirror.
// Threads that run at a lowered CPU priority (HttpServer's bind workers, --bind-nice) call
// YieldToReadersOnThisThread(): see there.
#ifndef GSE_STATE_MIRROR_H_
#define GSE_STATE_MIRROR_H_

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "state/cluster_state.h"

namespace gse {
class Mirror {
 public:
  Mirror(std::shared_ptr<const Catalog> catalog, MirrorOptions options)
      : state_(std::move(catalog), std::move(options)) {}

  // Runs `fn(const ClusterState&)` under the reader lock and returns its result.
  template <typename Fn>
  auto Read(Fn&& fn) const {
    absl::ReaderMutexLock lock(&mu_);
    return fn(static_cast<const ClusterState&>(state_));
  }

  // Runs `fn(ClusterState&)` under the writer lock (facts from Kubernetes, tests).
  template <typename Fn>
  auto Write(Fn&& fn) {
    WriterLock lock(&mu_);
    return fn(state_);
  }

  // For the calling thread, for its lifetime: its writes do not wait in the lock's queue at
  // first; for up to `budget` per writer section it takes the writer lock only while the lock
  // is free (TryLock, backing off between tries), then it waits in Lock() like any writer.
  // For threads whose CPU priority was lowered: a writer waiting on absl::Mutex holds back
  // every new reader, and once the lock is handed to it, a thread the scheduler weighs little
  // may wait long for a CPU while filter, prioritize and preempt wait for it (priority
  // inversion: bind_burst_bench measured the readers' wait at 356 us p99 with niced binds
  // waiting, 2 us without). Such a writer holds the lock only while it runs. It may wait
  // longer itself, as a lower priority implies, but not without bound: readers whose sections
  // overlap (several kube-scheduler clients, /debug/state, metrics scrapes) can keep the lock
  // held without a gap, and a bind would starve until its deadline. kYieldBudget (2 ms) is
  // long against one reader section (a filter at 5,000 nodes holds it ~0.2-0.5 ms), so a free
  // moment between ordinary readers is found well within it, and short against a bind's
  // deadline (kube-scheduler's httpTimeout, 5 s; --bind-timeout, 4 s): what a bind loses to a
  // continuously held lock is bounded. Tests pass a longer budget.
  static constexpr absl::Duration kYieldBudget = absl::Milliseconds(2);
  static void YieldToReadersOnThisThread(absl::Duration budget = kYieldBudget);
  static bool ThisThreadYieldsToReaders();

  // Bind's commit point: under one writer lock, `choose` picks an assignment on the current
  // state and ClusterState::Reserve re-checks and commits it (with the pod's `host` requests
  // for the host view, when known).
  using Chooser = std::function<absl::StatusOr<Assignment>(const ClusterState&)>;
  absl::StatusOr<Assignment> ReserveWith(const PodClaim& claim, const Chooser& choose,
                                         std::optional<HostRequest> host = std::nullopt);

  // ClusterState::Confirm / Release of the pod with that PodRecord::id (PodIdOf).
  absl::Status Confirm(absl::string_view pod_id);
  bool Release(absl::string_view pod_id);
  // ClusterState::ReleaseReservation / MarkUnconfirmed: Bind's reaction to a definite "not
  // bound" and to an unknown outcome of its Binder (issue 12, finding 1).
  bool ReleaseReservation(absl::string_view pod_id, const Assignment& a);
  void MarkUnconfirmed(absl::string_view pod_id);

  // ClusterState::ExpireAgentWaits under the writer lock (only when a wait is due: the scan
  // runs under the reader lock). Returns {waits ended, pods still waiting}.
  std::pair<int, int> ExpireAgentWaits(absl::Time now, absl::Duration timeout);

  // The node agents' liveness sweep (docs/agent.md "Agent liveness"): a node with an agent
  // whose `last_renewal(node)` (the agent's last heartbeat on our clock; InfinitePast: none)
  // is `timeout` or more before `now` becomes stale (ClusterState::SetAgentStale), any other
  // node live. Decided under the reader lock; the writer lock only when a node changes (rare:
  // every sweep of a steady cluster is read-only). `last_renewal` must not call the Mirror.
  // Returns the stale nodes with an agent.
  int SweepAgentLiveness(absl::FunctionRef<absl::Time(absl::string_view node)> last_renewal,
                         absl::Time now, absl::Duration timeout);

  // Replaces the whole state with one built from `batch` (a relist), listed at `listed_at`
  // (the time the list was requested: everything committed before it shows in the list).
  // Holdings the list cannot show are carried over as they are, without applying admission
  // rules again (ClusterState::CarryOver): reservations of binds in flight, and holdings our
  // binds confirmed after `listed_at` (or that the list shows still pending). Holdings the
  // list should show and does not (deleted pods) are dropped. See mirror.cc.
  // DRA mode (MirrorOptions::dra): `dra`, listed with the batch, replaces the DRA objects;
  // nullptr keeps the mirrored ones (a relist that did not list them).
  void ReplaceAll(const ObjectBatch& batch, absl::Time listed_at,
                  const DraObjectBatch* dra = nullptr);
  // How long after a bind's unknown outcome a POST of it may still commit inside the API
  // server (kube-apiserver's default --request-timeout): a list requested later that does not
  // show the pod bound settles the reservation.
  static constexpr absl::Duration kInFlightBindGrace = absl::Minutes(1);

 private:
  // Every writer section: absl::MutexLock, or on threads that called
  // YieldToReadersOnThisThread() TryLock with back-off for up to the thread's budget, then
  // Lock().
  class ABSL_SCOPED_LOCKABLE WriterLock {
   public:
    explicit WriterLock(absl::Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu);
    ~WriterLock() ABSL_UNLOCK_FUNCTION();
    WriterLock(const WriterLock&) = delete;
    WriterLock& operator=(const WriterLock&) = delete;

   private:
    absl::Mutex* const mu_;
  };

  mutable absl::Mutex mu_;
  ClusterState state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse

#endif  // GSE_STATE_MIRROR_H_
