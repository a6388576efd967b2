// ApiBinder: the live-cluster Binder. Binds a pod by POSTing a v1.Binding to the pod's
// `binding` subresource; the Binding's metadata carries the unit assignment annotations
// (the API server stores them on the pod in the same write as spec.nodeName) and the pod UID
// as a precondition (a recreated pod with the same name is never bound by mistake).
//
// Contract:
//  * The result is tri-state (binder.h). kBound: the pod is bound to the node with our
//    annotations in the API server. kNotBound: no POST of this call committed: every answer
//    was a refusal (4xx, 429, or nothing sent), or reading the pod back shows it bound
//    elsewhere or gone (404, another UID), or still pending after attempts that were all
//    answered (5xx). kUnknown: an attempt was ambiguous (transport error, timeout, 5xx: it may
//    have committed) and the read-back could not tell: it failed, shows the pod on this node
//    with other annotations, or shows it pending while a POST that got no answer (timeout,
//    transport error) may still be inside the API server and commit later. The status
//    carries the API's reason and message (KubeErrorOf).
//  * Within `deadline` (below kube-scheduler's 5 s extender timeout), transport errors, 5xx
//    and 429 are retried (after the answer's Retry-After when it asks for longer than our
//    backoff).
//  * Each POST passes the client's write limiter (kube/write_limiter.h), which may hold it
//    until `deadline - min(send_margin, deadline / 4)` (the time a POST needs to be answered;
//    a POST is not sent later than that, nor a retry). A bind whose first POST gets no turn by
//    then sends nothing and returns kNotBound with IsNotSent() (kube_client.h) at once: the
//    pod is definitely not bound, kube-scheduler retries it; no API error is counted.
//  * Fencing (issue 12, with --leader-elect): `lease_valid` is asked immediately before each
//    binding POST goes on the wire — the first and every retry, after the write limiter's
//    turn (WriteDeadline::may_send). When it says no (LeaderElector::LeaseValid: the last
//    successful renewal started more than the renew deadline ago on our clock, or the
//    elector stepped down), the POST is not sent: a leader that lost, or may have lost, the
//    Lease never writes a binding that could commit after a new leader's relist. With no
//    earlier attempt the answer is kNotBound at once (nothing posted); after earlier
//    attempts, those decide as above (an ambiguous one is read back: kBound, or kUnknown when
//    the read-back cannot tell), and kNotBound is reported as fenced too. Either way the
//    status is IsFenced() (kube_client.h) with a message naming the Lease; lease_lost()
//    counts them. Without `lease_valid` there is no check.
//  * Because a lost answer may hide a committed bind, a retry that meets 409 "already
//    assigned", any refusal after an ambiguous attempt, or a deadline after an ambiguous
//    attempt, reads the pod back to decide. (If a commit still lands after we gave up, the
//    watch brings the bound pod and the mirror records it, since the API server is the truth.)
//  * Thread-safe: Bind may run on many threads at once; `lease_valid` is called from them
//    concurrently and must be thread-safe and cheap (LeaderElector::LeaseValid is lock-free).
#ifndef GSE_KUBE_API_BINDER_H_
#define GSE_KUBE_API_BINDER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kube/binder.h"
#include "kube/kube_client.h"

namespace gse {

struct ApiBinderOptions {
  absl::Duration deadline = absl::Seconds(4);         // whole Bind, retries included
  absl::Duration attempt_timeout = absl::Seconds(2);  // one POST
  absl::Duration retry_backoff = absl::Milliseconds(100);
  // The last part of `deadline` that a POST needs to be sent and answered (at most a quarter
  // of `deadline`): no POST goes out later, however long the write limiter held it.
  absl::Duration send_margin = absl::Milliseconds(500);
  // Fencing (--leader-elect): may this replica still write as the leader? Empty: no check.
  std::function<bool()> lease_valid;
};

class ApiBinder : public Binder {
 public:
  explicit ApiBinder(KubeClient* client, ApiBinderOptions options = {});

  BindResult Bind(const BindTarget& target,
                  const std::map<std::string, std::string>& annotations) override;

  // The v1.Binding body for `target` (exposed for tests).
  static std::string BindingBody(const BindTarget& target,
                                 const std::map<std::string, std::string>& annotations);

  // Counters (metrics, tests).
  // Binding POSTs sent.
  int64_t attempts() const { return attempts_.load(); }
  // POSTs the write limiter had no turn for before their bind's deadline (not sent).
  int64_t not_sent() const { return not_sent_.load(); }
  // Binding POSTs not sent because the Lease was no longer valid (fencing); each such bind's
  // status is IsFenced().
  int64_t lease_lost() const { return lease_lost_.load(); }
  // Binds that answered ambiguously but were found committed by reading the pod back.
  int64_t confirmed_by_read() const { return confirmed_by_read_.load(); }
  // Failed calls (each attempt: error answers and transport failures), for
  // gse_api_errors_total: binding POSTs that were sent and failed (a POST the limiter never
  // sent is not one), and GETs of the pod to see whether a bind committed.
  int64_t bind_errors() const { return bind_errors_.load(); }
  int64_t get_errors() const { return get_errors_.load(); }

 private:
  // Reads the pod back: kBound when it is bound to target.node with `annotations` (and
  // target's UID); kNotBound when it is bound to another node or gone, or pending while every
  // attempt was answered; else kUnknown (pending while an unanswered POST may still commit).
  BindOutcome ReadBack(const BindTarget& target,
                       const std::map<std::string, std::string>& annotations,
                       absl::Duration timeout, bool unanswered);

  KubeClient* const client_;
  const ApiBinderOptions options_;
  std::atomic<int64_t> attempts_{0};
  std::atomic<int64_t> not_sent_{0};
  std::atomic<int64_t> lease_lost_{0};
  std::atomic<int64_t> confirmed_by_read_{0};
  std::atomic<int64_t> bind_errors_{0};
  std::atomic<int64_t> get_errors_{0};
};

}  // namespace gse

#endif  // GSE_KUBE_API_BINDER_H_
