// ExtenderService: kube-scheduler's extender v1 verbs (filter, prioritize, bind, preempt) as
// functions from a request body to a response, over the Mirror and a PlacementPolicy.
//
// No HTTP here (extender/http_server.h serves it), so every verb is testable with the
// captured kube-scheduler bodies directly. Wire format: shared/protocol/PROTOCOL.md —
// capitalised keys, `null` for empty fields, prioritize answers a bare array, preempt always
// answers NodeNameToMetaVictims, protocol errors go in `Error` with HTTP 200.
// Thread-safe: any number of threads may call any verb at once; decisions read the Mirror
// under its reader lock and bind commits under its writer lock (mirror.h).
#ifndef GSE_EXTENDER_EXTENDER_SERVICE_H_
#define GSE_EXTENDER_EXTENDER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "extender/decision_log.h"
#include "extender/metrics.h"
#include "kube/binder.h"
#include "scoring/policies.h"
#include "state/mirror.h"

namespace gse {

// What the HTTP layer sends back. status is 200 for every protocol answer (including those
// with an `Error`), 400 for malformed or mistyped bodies (JSON body naming the problem).
struct VerbResult {
  int status = 200;
  std::string body;
  // Outcome label for metrics: "ok", "error" (protocol Error), "bad_request".
  std::string outcome = "ok";
};

struct ServiceOptions {
  // Pending pods remembered from filter/prioritize for bind (bind carries only names).
  size_t max_pending_pods = 100000;
  // Where decisions are counted; may be null (tests, replay).
  ExtenderMetrics* metrics = nullptr;
  // Where each bind decision is logged (one JSON line); null = DecisionLog::Default(), the
  // binary's stderr log at the --decision-log level. Embedders that want silence pass a
  // DecisionLog with DecisionLogLevel::kOff.
  DecisionLog* decision_log = nullptr;
};

class ExtenderService {
 public:
  ExtenderService(Mirror* mirror, std::unique_ptr<PlacementPolicy> policy, Binder* binder,
                  ServiceOptions options = {});
  ~ExtenderService();

  // Bodies are taken by value so that they can be parsed in place.
  VerbResult Filter(std::string body);
  VerbResult Prioritize(std::string body);
  VerbResult Bind(std::string body);
  // A bind answered without being attempted (the HTTP server's --max-concurrent-binds was
  // reached): nothing is reserved or sent; counted in gse_bind_total{offering="none"} with
  // `outcome` and logged like any bind decision, naming the pod when the body says which.
  VerbResult RefuseBind(std::string body, absl::string_view outcome, absl::string_view message);
  VerbResult Preempt(std::string body);
  // GET /debug/state: every unit and project, for operators and external audits.
  std::string DebugStateJson() const;

  // False until the mirror holds a complete initial state and this replica leads (set by the
  // owner). While false, filter and bind answer the protocol Error "extender cache not synced
  // yet"; prioritize, which has no Error field, answers HTTP 503 (kube-scheduler ignores
  // prioritize errors); preempt answers an empty NodeNameToMetaVictims (no preemption).
  void SetReady(bool ready) { ready_.store(ready); }
  bool Ready() const { return ready_.load(); }

  const PlacementPolicy& policy() const { return *policy_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<PlacementPolicy> policy_;
  std::atomic<bool> ready_{true};
};

}  // namespace gse

#endif  // GSE_EXTENDER_EXTENDER_SERVICE_H_
