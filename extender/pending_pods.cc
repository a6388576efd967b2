#include "extender/pending_pods.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "state/cluster_state.h"

namespace gse {

PendingPods::PendingPods(size_t capacity) : capacity_(std::max<size_t>(capacity, 1)) {}

std::string PendingPods::IdOf(const PodObject& pod) {
  return PodIdOf(pod.uid, pod.Key());  // the mirror's identity of a pod
}

void PendingPods::Remember(PodObject pod) {
  pod.annotations.clear();
  std::string id = IdOf(pod);
  std::string key = pod.Key();
  absl::MutexLock lock(&mu_);
  auto existing = by_id_.find(id);
  if (existing != by_id_.end()) {
    // Refresh: the newest copy wins (its resources cannot change, but labels may).
    *existing->second = std::move(pod);
    entries_.splice(entries_.begin(), entries_, existing->second);
  } else {
    entries_.push_front(std::move(pod));
    by_id_.emplace(id, entries_.begin());
  }
  id_by_key_[key] = std::move(id);
  while (entries_.size() > capacity_) EraseLocked(std::prev(entries_.end()));
}

PendingPods::Entries::iterator PendingPods::FindLocked(absl::string_view uid,
                                                       absl::string_view ns,
                                                       absl::string_view name) {
  const std::string key = absl::StrCat(ns, "/", name);
  if (!uid.empty()) {
    auto it = by_id_.find(uid);
    // A UID names one pod; if the names disagree the request is confused, not ours to guess.
    if (it != by_id_.end() && it->second->Key() == key) return it->second;
    return entries_.end();
  }
  // No UID given (hand-written requests): the latest pod of that name.
  auto named = id_by_key_.find(key);
  if (named == id_by_key_.end()) return entries_.end();
  auto it = by_id_.find(named->second);
  return it == by_id_.end() ? entries_.end() : it->second;
}

std::optional<PodObject> PendingPods::Find(absl::string_view uid, absl::string_view ns,
                                           absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = FindLocked(uid, ns, name);
  if (it == entries_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, it);
  return *it;
}

void PendingPods::Forget(absl::string_view uid, absl::string_view ns, absl::string_view name) {
  absl::MutexLock lock(&mu_);
  auto it = FindLocked(uid, ns, name);
  if (it != entries_.end()) EraseLocked(it);
}

void PendingPods::EraseLocked(Entries::iterator it) {
  const std::string id = IdOf(*it);
  const std::string key = it->Key();
  auto named = id_by_key_.find(key);
  if (named != id_by_key_.end() && named->second == id) id_by_key_.erase(named);
  by_id_.erase(id);
  entries_.erase(it);
}

size_t PendingPods::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace gse
