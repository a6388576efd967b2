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
#include "testsupport/fake_apiserver.h"

namespace gse::testing {

struct SchedulerCounters {
  int64_t filter = 0;           // filter calls sent
  int64_t prioritize = 0;       // prioritize calls sent
  int64_t bind = 0;             // bind calls sent
  int64_t bound = 0;            // binds answered without an Error
  int64_t bind_errors = 0;      // binds answered with an Error
  int64_t unschedulable = 0;    // filters that left no node
  int64_t extender_errors = 0;  // no ready replica, transport errors, non-200, filter errors
};

class SchedulerClients {
 public:
  using Endpoint = std::function<int()>;

  // `nodes`: every node name of the cluster (the candidates before NodeResourcesFit).
  SchedulerClients(const FakeApiServer* fake, Endpoint endpoint, std::vector<std::string> nodes,
                   uint64_t seed);
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
  std::vector<std::string> Candidates(Client& client, const std::string& pod_json);
  void Count(int64_t SchedulerCounters::*field);

  const FakeApiServer* const fake_;
  const Endpoint endpoint_;
  const std::vector<std::string> nodes_;
  const uint64_t seed_;
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
