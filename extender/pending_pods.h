// PendingPods: the pods that filter/prioritize saw, remembered for bind.
//
// kube-scheduler's bind request carries only the pod's name, namespace and UID, but bind must
// know what the pod asks for (resources, project). Filter and prioritize receive the full Pod
// and store it here; bind looks it up by UID (or by namespace/name when the stored UID
// matches) and forgets it once bound. Bounded: beyond `capacity` entries the least recently
// used pod is dropped, so pods that are never bound (deleted, bound by someone else) cannot
// grow memory; a dropped pod's bind fails with "not seen in filter" and kube-scheduler
// retries the whole cycle, which remembers it again.
// Thread-safe (one internal mutex; every call is O(1)).
#ifndef GSE_EXTENDER_PENDING_PODS_H_
#define GSE_EXTENDER_PENDING_PODS_H_

#include <cstddef>
#include <list>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "state/k8s_objects.h"

namespace gse {

class PendingPods {
 public:
  explicit PendingPods(size_t capacity);

  // Remembers (or refreshes) `pod` as the most recently used entry. Annotations are dropped:
  // they can be large (last-applied-configuration) and nothing at bind reads them.
  void Remember(PodObject pod);

  // The pod with `uid` whose namespace/name is `ns`/`name` (a recreated pod with the same
  // name but a new UID is not found, so it never binds with the old pod's request). With an
  // empty `uid` (hand-written requests): the latest pod named `ns`/`name`. Marks it recently
  // used.
  std::optional<PodObject> Find(absl::string_view uid, absl::string_view ns,
                                absl::string_view name);

  // Drops the entry stored for this pod (after a successful bind); no-op when absent.
  void Forget(absl::string_view uid, absl::string_view ns, absl::string_view name);

  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  using Entries = std::list<PodObject>;  // front = most recently used

  // Map key of an entry: the mirror's identity of the pod (PodIdOf, cluster_state.h).
  static std::string IdOf(const PodObject& pod);
  // entries_.end() when absent.
  Entries::iterator FindLocked(absl::string_view uid, absl::string_view ns,
                               absl::string_view name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(Entries::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable absl::Mutex mu_;
  Entries entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Entries::iterator> by_id_ ABSL_GUARDED_BY(mu_);
  // namespace/name -> id of the latest entry of that name.
  absl::flat_hash_map<std::string, std::string> id_by_key_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse

#endif  // GSE_EXTENDER_PENDING_PODS_H_
