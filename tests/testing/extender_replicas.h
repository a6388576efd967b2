// ExtenderReplicas: replicas of the real gpu-slice-extender binary against one API server, as
// a Deployment runs them, and a Service's view of them.
//
//  * Each replica is the binary with the common arguments plus --listen=127.0.0.1:0; its port
//    is read from the start-up banner, and it serves one GET and one POST before anything else
//    (see WarmUp in extender_replicas.cc: a ThreadSanitizer artefact of cpp-httplib). Restart(i)
//    starts replica i again on a new port (a new pod IP), after Kill(i, signal) ended it.
//  * ReadyPort() is the port of a replica whose /readyz answers 200 (the leader under
//    --leader-elect), as polled every 20 ms in the background like a readiness probe; -1 when
//    none is ready. A caller may therefore reach a replica that stopped being ready a moment
//    ago, exactly as kube-scheduler can through a Service.
//  * An exit the test did not cause (a crash, a sanitizer report: the replicas inherit
//    ASAN_OPTIONS/TSAN_OPTIONS with halt_on_error), and a non-zero exit after SIGTERM, are
//    collected with the tail of the replica's stderr by TakeUnexpectedExits().
// Thread-safe.
#ifndef GSE_TESTS_TESTING_EXTENDER_REPLICAS_H_
#define GSE_TESTS_TESTING_EXTENDER_REPLICAS_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tests/testing/http_fixture.h"

namespace gse::testing {

class ExtenderReplicas {
 public:
  ExtenderReplicas(std::string binary, std::vector<std::string> args, int count);
  ~ExtenderReplicas();  // SIGKILLs what still runs
  ExtenderReplicas(const ExtenderReplicas&) = delete;
  ExtenderReplicas& operator=(const ExtenderReplicas&) = delete;

  // Starts every replica and the readiness poller; an error names the replica and its stderr.
  absl::Status Start();
  int size() const { return count_; }

  // Sends `sig` and waits for the exit (SIGKILL: at once; SIGTERM: up to `timeout`, then
  // SIGKILL). The exit is expected: after SIGTERM only a non-zero code is reported.
  void Kill(int index, int sig, absl::Duration timeout = absl::Seconds(15));
  absl::Status Restart(int index);
  bool Alive(int index) const;

  int ReadyReplica() const;  // index, -1 when none is ready
  int ReadyPort() const;     // port of ReadyReplica(), -1 when none
  bool WaitReady(absl::Duration timeout) const;

  // Unexpected exits since the last call, each with the replica's stderr tail; also notices
  // replicas that died since the last poll.
  std::vector<std::string> TakeUnexpectedExits();
  // Tail of a replica's stderr (the current process, or the last one that exited).
  std::string StderrTail(int index, size_t bytes = 4000) const;
  // Keeps every process's stderr as DIR/replica-<index>-<start>.log (written when the
  // process is replaced and at the end); "" keeps nothing. Call before Start().
  void KeepLogsIn(std::string dir);

 private:
  struct Replica {
    std::unique_ptr<ChildProcess> process;
    int port = -1;
    bool ready = false;
    bool killed = false;  // the test ended it
    int generation = 0;   // starts so far
    std::string last_stderr;  // of the process before the current one
  };

  void SaveLogLocked(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Poll();
  void NoticeExitsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string binary_;
  const std::vector<std::string> args_;
  const int count_;
  std::thread poller_;

  mutable absl::Mutex mu_;
  std::vector<Replica> replicas_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unexpected_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string log_dir_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_EXTENDER_REPLICAS_H_
