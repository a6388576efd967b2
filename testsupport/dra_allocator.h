// DraTestAllocator: plays kube-scheduler's part on DRA nodes for tests (the DRA fact sheet,
// shared/protocol/dra/README.md §2-3), against the local API server's store.
//
// For a pod and a node it builds the scheduler's extended-resource claim (one request
// `container-<c>-request-<r>` per container and DRA-backed resource, r = index of the name in
// the container's sorted request keys), allocates it the way the 1.36 structured allocator
// does (the node's slices plus allNodes slices; pools grouped by driver and pool, newest
// generation, complete pools only; pools by driver then pool name, slices by metadata.name,
// devices in array order; the first device that is free, matches the class, and is not
// tainted NoSchedule/NoExecute; consumable capacity: a share consumes the policy default or
// the full value, and fits unless a capacity would overflow), and then writes what PreBind
// writes, in its order: the claim (ADDED), its delete-protection finalizer (MODIFIED), its
// status with allocation and reservedFor (MODIFIED), and the pod's
// status.extendedResourceClaimStatus (MODIFIED).
//
// It is a peer, not the code under test: its own small JSON walk, quantity parser and
// selector evaluation (std::regex for matches()); selectors outside driver ==,
// attributes[...].x == and .matches() are refused (Unimplemented), never guessed. Not
// modelled (refused): init containers requesting DRA names, nodeSelector/perDeviceNode
// slices, devices with counters or binding conditions.
// Thread-safety: stateless apart from counters for generated names and share IDs, guarded
// by a mutex; the store itself is the API server's (thread-safe).
#ifndef GSE_TESTSUPPORT_DRA_ALLOCATOR_H_
#define GSE_TESTSUPPORT_DRA_ALLOCATOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {

class DraTestAllocator {
 public:
  struct Pick {
    std::string request;    // container-<c>-request-<r>
    std::string container;  // the name of the container whose request it is
    std::string resource;   // extended resource name
    std::string driver, pool, device;
    std::string share_id;   // set for a share of an allowMultipleAllocations device
  };
  // One entry of the pod's status.extendedResourceClaimStatus.requestMappings: which request's
  // devices a container gets (an init container may get several, of requests it reuses).
  struct Mapping {
    std::string container, resource, request;
  };
  struct Outcome {
    std::string claim_name;  // "" when the pod requests no DRA-backed name on the node
    std::vector<Pick> picks;
    std::vector<Mapping> mappings;
  };

  explicit DraTestAllocator(FakeApiServer& server) : server_(server) {}

  // Walks each pool's slices in reverse metadata.name order: what a 1.34, 1.35 or 1.36-stable
  // scheduler may do (informer order, fact sheet section 3, Determinism). Defeats a sorted-walk
  // prediction across slices, so tests can show that bind, not the prediction, holds the line.
  void SetReverseSliceOrder(bool reverse) {
    absl::MutexLock lock(&mu_);
    reverse_slices_ = reverse;
  }

  // Filter: what the allocator would pick for pod `ns/name` on `node`, writing nothing.
  // FailedPrecondition when a DRA-backed request does not fit (Unschedulable); NotFound for a
  // missing pod, node or class; Unimplemented for inputs it does not model.
  absl::StatusOr<Outcome> Plan(absl::string_view ns, absl::string_view pod, absl::string_view node);

  // Plan, then PreBind's four writes. The plan is made and written under no lock of the
  // server: tests drive one allocator at a time, as one scheduler does.
  absl::StatusOr<Outcome> AllocateAndPreBind(absl::string_view ns, absl::string_view pod,
                                             absl::string_view node);

  // Unreserve after a failed bind: the claim's delete-protection finalizer makes it
  // terminating first (one MODIFIED event), then it is deleted. NotFound when it is gone.
  absl::Status Unreserve(absl::string_view ns, absl::string_view claim);

 private:
  std::string NextSuffix();
  std::string NextShareId();
  FakeApiServer& server_;
  absl::Mutex mu_;
  int64_t counter_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t share_counter_ ABSL_GUARDED_BY(mu_) = 0;
  bool reverse_slices_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_DRA_ALLOCATOR_H_
