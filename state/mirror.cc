// Mirror: ClusterState behind one reader/writer mutex (see mirror.h for the locking contract).
#include "state/mirror.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"

namespace gse {

namespace {
thread_local bool t_yield_to_readers = false;
thread_local absl::Duration t_yield_budget = absl::ZeroDuration();
}  // namespace

void Mirror::YieldToReadersOnThisThread(absl::Duration budget) {
  t_yield_to_readers = true;
  t_yield_budget = budget;
}
bool Mirror::ThisThreadYieldsToReaders() { return t_yield_to_readers; }

Mirror::WriterLock::WriterLock(absl::Mutex* mu) : mu_(mu) {
  if (!t_yield_to_readers) {
    mu_->Lock();
    return;
  }
  // Not queued at first: a queued writer would hold back new readers until this thread runs.
  // Past the budget (kYieldBudget), queued like any writer: readers that keep the lock held
  // without a gap must not starve the bind.
  const absl::Time give_up = absl::Now() + t_yield_budget;
  absl::Duration pause = absl::Microseconds(20);
  for (int tries = 0; !mu_->TryLock(); ++tries) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      mu_->Lock();
      return;
    }
    if (tries < 4) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(std::min(pause, left));
      pause = std::min(pause * 2, absl::Microseconds(500));
    }
  }
}

Mirror::WriterLock::~WriterLock() { mu_->Unlock(); }

absl::StatusOr<Assignment> Mirror::ReserveWith(const PodClaim& claim, const Chooser& choose,
                                               std::optional<HostRequest> host) {
  WriterLock lock(&mu_);
  // Choice and commit under one writer lock: no other bind can take the chosen capacity in
  // between, and Reserve re-checks the choice anyway (a chooser is only a policy).
  absl::StatusOr<Assignment> chosen = choose(static_cast<const ClusterState&>(state_));
  if (!chosen.ok()) return chosen.status();
  absl::Status reserved = state_.Reserve(claim, *chosen, HoldingSource::kReserved, host);
  if (!reserved.ok()) return reserved;
  return chosen;
}

absl::Status Mirror::Confirm(absl::string_view pod_id) {
  WriterLock lock(&mu_);
  return state_.Confirm(pod_id);
}

bool Mirror::Release(absl::string_view pod_id) {
  WriterLock lock(&mu_);
  return state_.Release(pod_id);
}

bool Mirror::ReleaseReservation(absl::string_view pod_id, const Assignment& a) {
  WriterLock lock(&mu_);
  return state_.ReleaseReservation(pod_id, a);
}

void Mirror::MarkUnconfirmed(absl::string_view pod_id) {
  WriterLock lock(&mu_);
  state_.MarkUnconfirmed(pod_id);
}

namespace {

// What a relist shows of the pods, by PodRecord::id and by namespace/name.
struct ListedPods {
  explicit ListedPods(const ObjectBatch& batch) {
    for (const PodObject& pod : batch.pods) {
      const std::string id = PodIdOf(pod.uid, pod.Key());
      keys.insert(pod.Key());
      if (pod.node_name.empty() && !pod.Terminal() && !pod.terminating) pending.insert(id);
    }
  }
  absl::flat_hash_set<std::string> pending;  // ids of pods listed pending
  absl::flat_hash_set<std::string> keys;     // namespace/name of every listed pod
};

// Whether a holding that the relist does not show (as bound or charged) is carried over:
//  * kReserved: a bind in flight; its outcome confirms or releases it. One whose bind ended
//    with an unknown outcome (unconfirmed_since) is kept only while the list may predate a
//    late commit: a list requested more than kInFlightBindGrace after it that shows the pod
//    pending, or not at all, is the API's word that no binding of it committed.
//  * kConfirmed while the list shows the same pod (UID) still pending: bound after the list
//    was taken; the watch delivers the bound (or deleted) pod next.
//  * kConfirmed, not listed at all, bound by us after `listed_at`: the list may be older than
//    the pod or its binding. The watch resumes from the list's resourceVersion and replays
//    that pod's events (bound, or deleted). A pod bound before the list was requested that
//    the list does not show was deleted (even while the watch was down): dropped at once.
//    So is one whose name the list shows with another UID (names are unique in the API).
//  * Anything else the list does not show is gone.
bool CarriedOver(const PodRecord& pod, const ListedPods& listed, absl::Time listed_at) {
  switch (pod.source) {
    case HoldingSource::kReserved:
      return pod.unconfirmed_since == absl::InfinitePast() ||
             listed_at <= pod.unconfirmed_since + Mirror::kInFlightBindGrace;
    case HoldingSource::kConfirmed:
      return listed.pending.contains(pod.id) ||
             (!listed.keys.contains(pod.key) && pod.bound_by_us_at > listed_at);
    case HoldingSource::kCharged:
      return false;
  }
  return false;
}

}  // namespace

std::pair<int, int> Mirror::ExpireAgentWaits(absl::Time now, absl::Duration timeout) {
  {
    absl::ReaderMutexLock lock(&mu_);
    bool due = false;
    for (const std::string& id : state_.agent_waiting_pods()) {
      const PodRecord* rec = state_.FindPodById(id);
      due = due || (rec != nullptr && now - rec->awaiting_agent_since >= timeout);
    }
    if (!due) return {0, static_cast<int>(state_.agent_waiting_pods().size())};
  }
  WriterLock lock(&mu_);
  const int ended = state_.ExpireAgentWaits(now, timeout);
  return {ended, static_cast<int>(state_.agent_waiting_pods().size())};
}

int Mirror::SweepAgentLiveness(absl::FunctionRef<absl::Time(absl::string_view)> last_renewal,
                               absl::Time now, absl::Duration timeout) {
  struct Change {
    std::string node;
    bool stale;
    absl::Time last;
  };
  std::vector<Change> changes;
  int stale = 0;
  {
    absl::ReaderMutexLock lock(&mu_);
    for (const auto& [name, node] : state_.nodes()) {
      if (node->removed) continue;
      if (!node->agent) {
        if (node->agent_stale) changes.push_back({name, false, node->agent_last_renewal});
        continue;
      }
      const absl::Time last = last_renewal(name);
      const bool is_stale = now - last >= timeout;
      stale += is_stale ? 1 : 0;
      // Only flips are written: a steady cluster's sweep stays read-only.
      if (is_stale != node->agent_stale) {
        changes.push_back({name, is_stale, last});
      }
    }
  }
  if (changes.empty()) return stale;
  absl::MutexLock lock(&mu_);
  for (const Change& c : changes) state_.SetAgentStale(c.node, c.stale, c.last);
  return state_.AgentStaleNodes();
}

void Mirror::ReplaceAll(const ObjectBatch& batch, absl::Time listed_at,
                        const DraObjectBatch* dra) {
  std::shared_ptr<const Catalog> catalog;
  MirrorOptions options;
  DraState kept_dra;
  {
    absl::ReaderMutexLock lock(&mu_);
    catalog = state_.shared_catalog();
    options = state_.options();
    if (options.dra && dra == nullptr) kept_dra = state_.dra();
  }
  // Build outside the lock: a relist of 150,000 pods must not stall every decision. (A DRA
  // event applied between the copy above and the swap below is lost with a kept DraState:
  // the reflector lists the DRA kinds with every relist, so only callers without DRA lists
  // take that copy.)
  ClusterState fresh(std::move(catalog), std::move(options));
  if (fresh.options().dra && dra == nullptr) fresh.ReplaceDra(std::move(kept_dra));
  fresh.ApplyBatch(batch, dra);
  const ListedPods listed(batch);

  WriterLock lock(&mu_);
  for (const auto& [id, pod] : state_.pods()) {
    if (fresh.FindPodById(id) != nullptr) continue;  // the list shows it: the list wins
    if (!CarriedOver(pod, listed, listed_at)) continue;
    // As it is: the admission rules (quota, owner, capacity) applied when it was reserved; a
    // bind that commits must find its units held. What the list shows beyond the rules is an
    // API fact for Audit, never a reason to hand the units out again.
    fresh.CarryOver(pod, state_.project(pod.project).name, state_);
  }
  fresh.InheritAgentWaits(state_);
  fresh.InheritAgentLiveness(state_);
  fresh.InheritRecentHostDemand(state_);
  std::swap(state_, fresh);
  // `fresh` now holds the old state; it is destroyed after the lock is released (the lock
  // guard was declared later, so it is destroyed first).
}

}  // namespace gse
