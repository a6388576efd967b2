// ElasticThreadPool: the HTTP server's connection workers. cpp-httplib serves each accepted
// connection on one task for its whole keep-alive life, and a bind holds its task while it
// waits for the API write limiter or the API server; with a fixed pool, connections that
// kube-scheduler opens for filter/prioritize while its pooled ones are busy with binds would
// wait in the queue behind them (issue 14). This pool never lets a task wait while it may
// start a thread:
//
//  * Enqueue() hands the task to an idle worker, or starts a new one while fewer than `max`
//    exist; only at `max` (or when the system refuses a new thread) does a task wait for a
//    worker to come free. It also keeps `spare` workers idle ahead of demand (below `max`), so
//    that the next connection is handed to a running thread instead of waiting for one to
//    start (a thread start costs a scheduling round, long on a busy machine).
//  * Spare workers are started by the pool's keeper thread, never by Enqueue: Enqueue runs on
//    cpp-httplib's accept thread, and a thread start there (tens of us, up to milliseconds on
//    a loaded machine) would delay the connection just accepted and every one behind it. Only
//    a task that no idle or starting worker can take starts a worker from Enqueue itself, and
//    no thread is ever created under the pool's lock (workers could not take tasks meanwhile).
//  * `warm` workers are kept; extra ones end after `idle_timeout` without work, except that
//    while any worker is busy, `spare` idle ones stay ready.
//  * Shutdown() runs what is queued, then joins every worker and the keeper (as
//    httplib::ThreadPool does). A task enqueued after Shutdown() runs on the caller's thread.
//
// HttpServer bounds what binds may hold (HttpServerOptions::max_concurrent_binds) and sizes
// `max` as that bound plus --threads, so at least --threads workers always remain for
// filter, prioritize, preempt and health checks.
// Thread-safe: Enqueue and stats from any thread; Shutdown from the owner (not from a task).
#ifndef GSE_EXTENDER_ELASTIC_THREAD_POOL_H_
#define GSE_EXTENDER_ELASTIC_THREAD_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gse {

struct ElasticThreadPoolOptions {
  size_t warm = 8;   // started at once and kept
  size_t max = 64;   // never more threads than this (at least `warm`, at least 1)
  absl::Duration idle_timeout = absl::Seconds(60);  // extra workers end after this idle
  // Idle workers kept ready beyond the tasks waiting (below `max`), started by the keeper
  // thread. 4: kube-scheduler dials a connection for each concurrent call beyond the 2 it
  // keeps idle (binds hold them), and the keeper restores the spares within one scheduling
  // round of its thread; 4 covers the connections that arrive meanwhile in a burst, and an
  // idle worker costs only its stack. 0: no keeper, workers start only on demand.
  size_t spare = 4;
  // Run by each worker on its own thread before its first task (e.g. to lower the thread's
  // CPU priority: HttpServer's bind workers). Empty: nothing.
  std::function<void()> on_thread_start;
};

class ElasticThreadPool {
 public:
  explicit ElasticThreadPool(ElasticThreadPoolOptions options);
  ~ElasticThreadPool();  // Shutdown()

  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  void Enqueue(std::function<void()> task);
  void Shutdown();

  struct Stats {
    size_t threads = 0;  // workers alive
    size_t busy = 0;     // running a task
    size_t queued = 0;   // tasks waiting for a worker (momentarily, or at `max`)
    int64_t started = 0;  // workers ever started
    // Of those, started by Enqueue itself (on the caller's thread): no idle or starting
    // worker could take the task. The rest were warm ones and the keeper's spares.
    int64_t started_by_enqueue = 0;
    int64_t waited_at_max = 0;  // tasks that found no idle worker with `max` running
    int64_t start_failures = 0;  // threads the system refused (the task waited instead)
  };
  Stats stats() const;

 private:
  // Reserves a worker (counted alive and starting) under mu_; LaunchReserved() then creates
  // its thread outside mu_, and returns false (undoing the reservation) when the system
  // refused it.
  int64_t ReserveWorkerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool LaunchReserved(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // Workers to start so that every queued task has one and `spare` stay idle (below `max`).
  size_t SparesMissingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Work(int64_t id);
  void Keep();  // the keeper thread: starts spares when Enqueue asks, joins ended workers
  // Joins the workers that ended (idle timeout); called outside mu_.
  void JoinEnded();

  const ElasticThreadPoolOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar work_;  // signalled for each task enqueued and at shutdown
  absl::CondVar keep_;  // signalled when spares are missing and at shutdown
  std::thread keeper_;  // when spare > 0; set in the constructor, joined by Shutdown()
  bool has_keeper_ = false;  // set in the constructor
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::thread> workers_ ABSL_GUARDED_BY(mu_);  // by id, alive or ended
  std::vector<int64_t> ended_ ABSL_GUARDED_BY(mu_);  // ids whose thread returned or is returning
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;  // workers waiting for a task
  size_t starting_ ABSL_GUARDED_BY(mu_) = 0;  // started, not yet waiting or working
  size_t busy_ ABSL_GUARDED_BY(mu_) = 0;
  size_t alive_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  size_t launching_ ABSL_GUARDED_BY(mu_) = 0;  // reserved, thread not created yet
  bool reap_ ABSL_GUARDED_BY(mu_) = false;     // ended workers for the keeper to join
  bool spares_wanted_ ABSL_GUARDED_BY(mu_) = false;  // Enqueue found spares missing
  int64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t started_by_enqueue_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t start_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waited_at_max_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gse

#endif  // GSE_EXTENDER_ELASTIC_THREAD_POOL_H_
