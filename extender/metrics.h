// ExtenderMetrics: every Prometheus series the service exports, on one prometheus-cpp
// registry that GET /metrics serialises with prometheus::TextSerializer.
//
// Label sets are bounded: verbs, outcomes, offerings (catalog size), fixed reason vocabularies
// and projects — never node or pod names, so the series count does not grow with the cluster.
// Thread-safe (prometheus-cpp metrics are atomic; family lookups are cached at construction
// or guarded).
#ifndef GSE_EXTENDER_METRICS_H_
#define GSE_EXTENDER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "prometheus/registry.h"

namespace gse {

class ExtenderMetrics {
 public:
  ExtenderMetrics();
  ~ExtenderMetrics();

  // One HTTP request: verb is filter|prioritize|bind|preempt|healthz|readyz|metrics|debug_state|other;
  // code is the HTTP status (200, 400, 404, 405, 413, 500); outcome ok|error|bad_request.
  void ObserveRequest(absl::string_view verb, int code, absl::string_view outcome,
                      double seconds);
  // One node's filter verdict: reason is FitReasonLabel ("fits", "quota_exhausted", ...).
  void ObserveFilterVerdict(absl::string_view offering, absl::string_view reason);
  // The same for `count` nodes at once: filter aggregates its verdicts per reason, so a
  // 5,000-node call costs one increment per distinct reason, not one per node.
  void ObserveFilterVerdicts(absl::string_view offering, absl::string_view reason, int64_t count);
  void ObserveFilterNodes(int passed, int failed);
  // Bind outcome: bound|unit_taken|quota|api_error|not_synced|unknown_pod|bad_request|...
  // api_seconds is the Binder call's duration; negative when the Binder was not called.
  void ObserveBind(absl::string_view offering, absl::string_view outcome, double api_seconds);
  // Time-sliced placements: "own_unit" or "new_unit"; spills by cause.
  void ObserveAffinity(absl::string_view offering, absl::string_view placement);
  void ObserveSpill(absl::string_view offering, absl::string_view cause);
  void ObservePreemption(int nodes_proposed, int victims);

  prometheus::Registry& registry();
  // Text exposition format (Content-Type text/plain; version=0.0.4).
  std::string Serialize() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gse

#endif  // GSE_EXTENDER_METRICS_H_
