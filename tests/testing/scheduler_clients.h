// SchedulerClients: kube-scheduler 1.26 as an extender sees it, several at once, for runs
// against the real binary (tests/fault_run_test.cc).
//
//  * Each pod of a round is scheduled by one client at a time from the API server's current
//    copy of it (what an informer holds, without kind/apiVersion): filter with NodeNames
//    (nodeCacheCapable: true, as scheduler-config/default-profile.yaml) → prioritize over the
//    nodes that passed → bind the best-scored node (ties broken at random), with the bodies
//    and headers of shared/protocol/captured-k8s-1.26/ and kube-scheduler's 5 s httpTimeout.
//  * Candidates: on about half of the attempts only the nodes that kube-scheduler's own
//    NodeResourcesFit passes (allocatable minus the requests of pods bound there;
//    ignoredByScheduler: false), on the others every node — a scheduler with a lagging cache,
//    or a profile without that filter, which the extender must not rely on.
//  * A failed attempt (transport error, non-200 answer, filter error, bind error) is retried
//    after an exponential backoff (20 ms doubling to 500 ms), as kube-scheduler requeues, up
//    to `max_tries` attempts per pod and round; a pod that fits no node is tried once more in
//    the round (kube-scheduler parks it until the cluster changes); a pod that is bound or
//    gone is done.
//  * Endpoint: a function returning the port of the extender replica to call now (a Service
//    routing to ready pods), -1 when none is ready (the attempt fails and is retried).
//  * DRA nodes (with Dra): kube-scheduler's DRA plugin plays the test allocator
//    (testsupport/dra_allocator.h). NodeResourcesFit skips DRA-backed names there, and the
//    allocator's Filter keeps a DRA node only where the pod's claim can be allocated. On a
//    chosen DRA node the scheduling cycle allocates and PreBind writes the claim and the pod's
//    status before the bind call (one allocation at a time, as kube-scheduler's one scheduling
//    cycle, whose in-flight allocations the next one sees); a bind that answers an error or
//    no answer is followed by Unreserve, which marks the claim terminating and deletes it,
//    even when the pod may be bound (kube-scheduler cannot tell either).
// Thread-safe: Start/Join from the owner; counters from any thread.
#ifndef GSE_TESTS_TESTING_SCHEDULER_CLIENTS_H_
#define GSE_TESTS_TESTING_SCHEDULER_CLIENTS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "testsupport/dra_allocator.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {

struct SchedulerCounters {
  int64_t filter = 0;           // filter calls sent
  int64_t prioritize = 0;       // prioritize calls sent
  int64_t bind = 0;             // bind calls sent
  int64_t bound = 0;            // binds answered without an Error
  int64_t bind_errors = 0;      // binds answered with an Error
  int64_t unschedulable = 0;    // filters that left no node
  int64_t dra_prebind_failed = 0;  // the allocator could not allocate on the chosen DRA node
  int64_t dra_unreserved = 0;      // claims deleted after a failed bind
  int64_t extender_errors = 0;  // no ready replica, transport errors, non-200, filter errors
};

// kube-scheduler's DRA part (see above); unset: no DRA node.
struct SchedulerDra {
  DraTestAllocator* allocator = nullptr;
  std::function<bool(const std::string&)> is_dra_node;
};

class SchedulerClients {
 public:
  using Endpoint = std::function<int()>;
  using Dra = SchedulerDra;

  // `nodes`: every node name of the cluster (the candidates before NodeResourcesFit).
  SchedulerClients(const FakeApiServer* fake, Endpoint endpoint, std::vector<std::string> nodes,
                   uint64_t seed, Dra dra = {});
  ~SchedulerClients();
  SchedulerClients(const SchedulerClients&) = delete;
  SchedulerClients& operator=(const SchedulerClients&) = delete;

  // Starts `threads` clients on the pods (namespace/name); returns at once.
  void Start(const std::vector<std::string>& pod_keys, int threads, int max_tries);
  // Waits until every pod of the round is done or out of tries.
  void Join();
  bool Running() const;
  SchedulerCounters counters() const;
  int64_t bind_calls() const { return bind_calls_.load(); }

 private:
  enum class Outcome { kBound, kGone, kRetry, kUnschedulable };
  struct Job {
    std::string key;
    int tries = 0;
  };
  class Client;

  void Work(int index, int max_tries);
  Outcome Attempt(Client& client, const std::string& key);
  std::vector<std::string> Candidates(Client& client, const std::string& ns,
                                      const std::string& name, const std::string& pod_json);
  bool IsDraNode(const std::string& node) const { return dra_.is_dra_node && dra_.is_dra_node(node); }
  void Unreserve(const std::string& ns, const std::string& claim);
  void Count(int64_t SchedulerCounters::*field);

  const FakeApiServer* const fake_;
  const Endpoint endpoint_;
  const std::vector<std::string> nodes_;
  const uint64_t seed_;
  const Dra dra_;
  // kube-scheduler allocates in its one scheduling cycle: one allocation at a time.
  absl::Mutex allocate_mu_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> bind_calls_{0};
  std::atomic<int64_t> rounds_{0};

  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;  // jobs taken from the queue and not yet finished
  SchedulerCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_SCHEDULER_CLIENTS_H_
