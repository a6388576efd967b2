// Mirror: ClusterState behind one reader/writer mutex (see mirror.h for the locking contract).
#include "state/mirror.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"

namespace gse {

absl::StatusOr<Assignment> Mirror::ReserveWith(const PodClaim& claim, const Chooser& choose) {
  absl::MutexLock lock(&mu_);
  // Choice and commit under one writer lock: no other bind can take the chosen capacity in
  // between, and Reserve re-checks the choice anyway (a chooser is only a policy).
  absl::StatusOr<Assignment> chosen = choose(static_cast<const ClusterState&>(state_));
  if (!chosen.ok()) return chosen.status();
  absl::Status reserved = state_.Reserve(claim, *chosen, HoldingSource::kReserved);
  if (!reserved.ok()) return reserved;
  return chosen;
}

absl::Status Mirror::Confirm(absl::string_view pod_id) {
  absl::MutexLock lock(&mu_);
  return state_.Confirm(pod_id);
}

bool Mirror::Release(absl::string_view pod_id) {
  absl::MutexLock lock(&mu_);
  return state_.Release(pod_id);
}

void Mirror::ReplaceAll(const ObjectBatch& batch) {
  std::shared_ptr<const Catalog> catalog;
  MirrorOptions options;
  {
    absl::ReaderMutexLock lock(&mu_);
    catalog = state_.shared_catalog();
    options = state_.options();
  }
  // Build outside the lock: a relist of 150,000 pods must not stall every decision.
  ClusterState fresh(std::move(catalog), std::move(options));
  fresh.ApplyBatch(batch);
  // Pods (by PodRecord::id) the list shows, and of those the ones it shows pending: a bind
  // confirmed after the list was taken.
  absl::flat_hash_set<std::string> pending;
  absl::flat_hash_set<std::string> listed;
  // namespace/name of every listed pod: a pod of ours whose name the list shows with another
  // UID no longer exists (names are unique in the API server at any moment).
  absl::flat_hash_set<std::string> listed_keys;
  for (const PodObject& pod : batch.pods) {
    const std::string id = PodIdOf(pod.uid, pod.Key());
    listed.insert(id);
    listed_keys.insert(pod.Key());
    if (pod.node_name.empty() && !pod.Terminal() && !pod.terminating) pending.insert(id);
  }

  absl::MutexLock lock(&mu_);
  // Holdings the list cannot show yet are carried over, unless the list already shows the pod
  // (bound or charged) or they no longer fit (the node shrank; the bind's own re-check then
  // fails and releases):
  //  * kReserved: a bind in flight; its outcome releases or confirms it.
  //  * kConfirmed while the list still shows the same pod pending: bound after the list was
  //    taken; the watch delivers the bound (or deleted) pod next.
  //  * kConfirmed by our own bind within kRecentBindWindow that the list does not show at all:
  //    the pod may have been created after the list was taken. The watch resumes from the
  //    list's resourceVersion, so it replays that pod's events (bound, or deleted); keeping the
  //    holding until then never hands the unit out twice. Older confirmed pods missing from the
  //    list were deleted: they are dropped, or their capacity would leak for good.
  const absl::Time recent = absl::Now() - kRecentBindWindow;
  for (const auto& [id, pod] : state_.pods()) {
    if (fresh.FindPodById(id) != nullptr) continue;
    bool carry = pod.source == HoldingSource::kReserved;
    if (pod.source == HoldingSource::kConfirmed) {
      carry = pending.contains(id) ||
              (!listed_keys.contains(pod.key) && pod.bound_by_us_at > recent);
    }
    if (!carry) continue;
    PodClaim claim;
    claim.key = pod.key;
    claim.uid = pod.uid;
    claim.namespace_name = pod.namespace_name;
    claim.project = state_.project(pod.project).name;
    if (fresh.Reserve(claim, pod.assignment, HoldingSource::kReserved).ok() &&
        pod.source == HoldingSource::kConfirmed) {
      fresh.Confirm(id, pod.bound_by_us_at).IgnoreError();
    }
  }
  std::swap(state_, fresh);
  // `fresh` now holds the old state; it is destroyed after the lock is released (the lock
  // guard was declared later, so it is destroyed first).
}

}  // namespace gse
