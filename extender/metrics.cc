// ExtenderMetrics on prometheus-cpp core. Families are registered once at construction; the
// series of a family are created on first use and their pointers cached by label values, so a
// hot path costs one hash lookup under a reader lock plus an atomic add (prometheus-cpp's own
// Family::Add builds a std::map of labels and takes a std::mutex, too slow per filter call).
#include "extender/metrics.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/text_serializer.h"

#ifndef GSE_VERSION
#define GSE_VERSION "unknown"
#endif
#ifndef GSE_GIT_REVISION
#define GSE_GIT_REVISION "unknown"
#endif

namespace gse {
namespace {

// Request latency: from 50 µs (a NodeNames filter on a small cluster) to 10 s (twice
// kube-scheduler's default 5 s timeout, so timeouts still land in a finite bucket).
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return *b;
}

// Nodes per filter call, up to the 5,000-node clusters the service is sized for.
const prometheus::Histogram::BucketBoundaries& NodeCountBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
  return *b;
}

// The outcome vocabularies of gse_bind_total (extender_service.cc's Bind), created at 0 by
// InitSeries: requests for an offering end in one of the first list; "none" (the request names
// no offering, or the pod or body is unknown) in one of the second.
constexpr const char* kOfferingBindOutcomes[] = {
    "bound",       "unit_taken",       "quota",     "no_fit",
    "api_error",   "api_unknown",      "client_throttled", "lease_lost", "dra_refused"};
constexpr const char* kNoOfferingBindOutcomes[] = {
    "bound",      "no_fit",     "api_error",   "api_unknown", "client_throttled", "lease_lost",
    "overloaded", "not_synced", "not_leader",  "unknown_pod", "bad_request"};
constexpr const char* kVerbs[] = {"filter", "prioritize", "bind", "preempt"};
constexpr const char* kAffinityPlacements[] = {"own_unit", "new_unit"};
constexpr const char* kSpillCauses[] = {"no_candidate_with_own_unit"};
constexpr absl::string_view kOther = "other";

// `value` when it is one of `vocabulary`, else "other": label values that come from callers
// stay a fixed set whatever they pass.
template <size_t N>
absl::string_view Bounded(const char* const (&vocabulary)[N], absl::string_view value) {
  for (const char* v : vocabulary) {
    if (value == v) return value;
  }
  return kOther;
}

// Bind's API call: a loopback record is microseconds, a real API server a few milliseconds.
const prometheus::Histogram::BucketBoundaries& ApiBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  return *b;
}

// A write's wait for the client's limiter: 0 while the burst lasts, up to the bind's deadline
// (--bind-timeout, 4 s by default) when it paces.
const prometheus::Histogram::BucketBoundaries& WriteWaitBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      0.0001, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8};
  return *b;
}

// The series of one family with a fixed list of label names, cached by their values.
template <typename T>
class SeriesCache {
 public:
  template <typename... Args>
  SeriesCache(prometheus::Family<T>& family, std::vector<std::string> label_names,
              Args... args)
      : family_(family), label_names_(std::move(label_names)) {
    make_ = [this, args...](const prometheus::Labels& labels) -> T& {
      return family_.Add(labels, args...);
    };
  }

  T& Get(std::initializer_list<absl::string_view> values) {
    // '\x1f' (unit separator) cannot collide with how label values are joined in practice.
    std::string key = absl::StrJoin(values, "\x1f");
    {
      absl::ReaderMutexLock lock(&mu_);
      auto it = series_.find(key);
      if (it != series_.end()) return *it->second;
    }
    absl::MutexLock lock(&mu_);
    auto it = series_.find(key);
    if (it != series_.end()) return *it->second;
    prometheus::Labels labels;
    size_t i = 0;
    for (absl::string_view v : values) labels.emplace(label_names_[i++], std::string(v));
    T* series = &make_(labels);
    series_.emplace(std::move(key), series);
    return *series;
  }

 private:
  prometheus::Family<T>& family_;
  const std::vector<std::string> label_names_;
  std::function<T&(const prometheus::Labels&)> make_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, T*> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

struct ExtenderMetrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();

  prometheus::Family<prometheus::Counter>& requests_family =
      prometheus::BuildCounter()
          .Name("gse_http_requests_total")
          .Help("HTTP requests served, by verb, status code and outcome (ok|error|bad_request).")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& duration_family =
      prometheus::BuildHistogram()
          .Name("gse_http_request_duration_seconds")
          .Help("Time from request received to response ready, by verb.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& verdicts_family =
      prometheus::BuildCounter()
          .Name("gse_filter_verdicts_total")
          .Help("Per-node filter verdicts, by requested offering and reason (fits or why not).")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& filter_nodes_family =
      prometheus::BuildHistogram()
          .Name("gse_filter_nodes")
          .Help("Nodes per filter call that passed or failed.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& bind_family =
      prometheus::BuildCounter()
          .Name("gse_bind_total")
          .Help("Bind requests, by offering and outcome.")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& bind_api_family =
      prometheus::BuildHistogram()
          .Name("gse_bind_api_duration_seconds")
          .Help("Duration of the Binder call (the API server's binding POST) during bind.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& affinity_family =
      prometheus::BuildCounter()
          .Name("gse_affinity_placements_total")
          .Help("Time-sliced placements onto a unit the project already owned (own_unit) or a "
                "newly opened unit (new_unit).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& spill_family =
      prometheus::BuildCounter()
          .Name("gse_affinity_spills_total")
          .Help("Time-sliced requests that had to open a new unit although the project owns "
                "units with free tickets, by cause.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& preempt_nodes_family =
      prometheus::BuildCounter()
          .Name("gse_preemption_nodes_total")
          .Help("Nodes proposed back to kube-scheduler as preemption candidates.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& preempt_victims_family =
      prometheus::BuildCounter()
          .Name("gse_preemption_victims_total")
          .Help("Victim pods on the nodes proposed back to kube-scheduler.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& watch_restarts_family =
      prometheus::BuildCounter()
          .Name("gse_mirror_watch_restarts_total")
          .Help("Watches of the Kubernetes API opened again after a disconnect, error or "
                "timeout, by resource.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& api_errors_family =
      prometheus::BuildCounter()
          .Name("gse_api_errors_total")
          .Help("Failed calls to the Kubernetes API server, by operation "
                "(list|watch|get|bind|lease|other).")
          .Register(*registry);
  prometheus::Family<prometheus::Histogram>& write_wait_family =
      prometheus::BuildHistogram()
          .Name("gse_api_write_wait_seconds")
          .Help("Time a write to the API server waited for the client's write limiter before it "
                "was sent, by operation (bind|lease).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& writes_not_sent_family =
      prometheus::BuildCounter()
          .Name("gse_api_writes_not_sent_total")
          .Help("Writes to the API server not sent because the client's write limiter had no "
                "turn for them before their deadline, by operation (bind|lease).")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& in_flight_family =
      prometheus::BuildGauge()
          .Name("gse_http_requests_in_flight")
          .Help("Requests of a verb whose handler is running (for bind: waiting for the API "
                "write limiter or the API server included).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& drift_family =
      prometheus::BuildCounter()
          .Name("gse_mirror_drift_repairs_total")
          .Help("Objects a periodic relist found different in the mirror and repaired, by kind "
                "(pod|node|project_quota).")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& last_sync_family =
      prometheus::BuildGauge()
          .Name("gse_mirror_last_sync_timestamp_seconds")
          .Help("Unix time of the last full list from the API server applied to the mirror (0: "
                "never; always 0 standalone).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& leader_transitions_family =
      prometheus::BuildCounter()
          .Name("gse_leader_transitions_total")
          .Help("Times this replica became leader (event=acquired) or stopped leading "
                "(event=lost).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& leaderless_family =
      prometheus::BuildCounter()
          .Name("gse_leader_leaderless_seconds_total")
          .Help("Sum over this replica's take-overs of how long no replica led before it took "
                "over (an upper bound, to within one Lease poll).")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& last_leaderless_family =
      prometheus::BuildGauge()
          .Name("gse_leader_last_leaderless_seconds")
          .Help("How long no replica led before this replica's last take-over (0: none yet).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& requeue_pods_family =
      prometheus::BuildCounter()
          .Name("gse_takeover_requeue_pods_total")
          .Help("Pending GPU pods the take-over requeue touched (touched), found touched "
                "already (already), found bound, deleted or changed first (changed), or failed "
                "to patch (failed).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& requeue_passes_family =
      prometheus::BuildCounter()
          .Name("gse_takeover_requeue_passes_total")
          .Help("Passes of the take-over requeue, by outcome (completed|list_failed|cancelled).")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& gate_timeouts_family =
      prometheus::BuildCounter()
          .Name("gse_agent_gate_timeouts_total")
          .Help("Pods whose wait for their node agent's confirmation (gpu.themelio.io/allocated) "
                "ended by --agent-gate-timeout instead: the per-node gate let the next pod "
                "through without it.")
          .Register(*registry);
  prometheus::Family<prometheus::Counter>& dra_claim_reads_family =
      prometheus::BuildCounter()
          .Name("gse_dra_claim_reads_total")
          .Help("Binds on DRA nodes that read the pod's extended-resource claim from the API "
                "because the claim watch had not delivered it within 1 s, by result (read: the "
                "API answered with the claim, then verified as the mirror's would be; failed: "
                "no answer or no such claim, the bind refused).")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& gate_waiting_family =
      prometheus::BuildGauge()
          .Name("gse_agent_gate_waiting_pods")
          .Help("Pods bound with a unit annotation that their node agent has not confirmed yet "
                "(the per-node gate waits for them), as of the last timeout sweep.")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& agent_stale_family =
      prometheus::BuildGauge()
          .Name("gse_nodes_agent_stale")
          .Help("Nodes that carry a node agent inventory whose agent has not renewed its "
                "heartbeat Lease for --agent-heartbeat-timeout: filter and bind refuse them "
                "(agent_stale), as of the last liveness sweep.")
          .Register(*registry);
  prometheus::Family<prometheus::Gauge>& build_family =
      prometheus::BuildGauge()
          .Name("gse_build_info")
          .Help("Always 1; labels carry the version and git revision of the running binary.")
          .Register(*registry);

  SeriesCache<prometheus::Counter> requests{requests_family, {"verb", "code", "outcome"}};
  SeriesCache<prometheus::Histogram> durations{duration_family, {"verb"}, LatencyBuckets()};
  SeriesCache<prometheus::Counter> verdicts{verdicts_family, {"offering", "reason"}};
  SeriesCache<prometheus::Counter> binds{bind_family, {"offering", "outcome"}};
  SeriesCache<prometheus::Counter> affinity{affinity_family, {"offering", "placement"}};
  SeriesCache<prometheus::Counter> spills{spill_family, {"offering", "cause"}};

  prometheus::Histogram& nodes_passed =
      filter_nodes_family.Add({{"result", "passed"}}, NodeCountBuckets());
  prometheus::Histogram& nodes_failed =
      filter_nodes_family.Add({{"result", "failed"}}, NodeCountBuckets());
  prometheus::Histogram& bind_api = bind_api_family.Add({}, ApiBuckets());
  prometheus::Counter& preempt_nodes = preempt_nodes_family.Add({});
  prometheus::Counter& preempt_victims = preempt_victims_family.Add({});
  prometheus::Gauge& last_sync = last_sync_family.Add({});

  // Fixed vocabularies (+ "other"), every series created at 0 here.
  SeriesCache<prometheus::Counter> watch_restarts{watch_restarts_family, {"resource"}};
  SeriesCache<prometheus::Counter> api_errors{api_errors_family, {"op"}};
  SeriesCache<prometheus::Counter> drift_repairs{drift_family, {"kind"}};
  SeriesCache<prometheus::Histogram> write_waits{write_wait_family, {"op"}, WriteWaitBuckets()};
  SeriesCache<prometheus::Counter> writes_not_sent{writes_not_sent_family, {"op"}};
  SeriesCache<prometheus::Gauge> in_flight{in_flight_family, {"verb"}};
  SeriesCache<prometheus::Counter> leader_transitions{leader_transitions_family, {"event"}};
  SeriesCache<prometheus::Counter> requeue_pods{requeue_pods_family, {"outcome"}};
  SeriesCache<prometheus::Counter> requeue_passes{requeue_passes_family, {"outcome"}};
  prometheus::Counter& leaderless = leaderless_family.Add({});
  prometheus::Counter& gate_timeouts = gate_timeouts_family.Add({});
  prometheus::Gauge& gate_waiting = gate_waiting_family.Add({});
  prometheus::Counter& dra_claim_reads_ok = dra_claim_reads_family.Add({{"result", "read"}});
  prometheus::Counter& dra_claim_reads_failed = dra_claim_reads_family.Add({{"result", "failed"}});
  prometheus::Gauge& agent_stale = agent_stale_family.Add({});
  prometheus::Gauge& last_leaderless = last_leaderless_family.Add({});

  Impl() {
    build_family.Add({{"version", GSE_VERSION}, {"revision", GSE_GIT_REVISION}}).Set(1);
    // The decision verbs' latency and success series exist from the start: a series born with
    // its first burst of requests already counted loses that burst in rate() (no earlier
    // sample), which leaves latency panels and the slow-verb alert at NaN for that verb.
    for (const char* verb : kVerbs) {
      durations.Get({verb});
      requests.Get({verb, "200", "ok"});
      in_flight.Get({verb});
    }
    for (const char* op : kApiWriteOps) {
      write_waits.Get({op});
      writes_not_sent.Get({op});
    }
    write_waits.Get({kOther});
    writes_not_sent.Get({kOther});
    for (const char* r : kWatchResources) watch_restarts.Get({r});
    watch_restarts.Get({kOther});
    for (const char* op : kApiOps) api_errors.Get({op});
    api_errors.Get({kOther});
    for (const char* k : kDriftKinds) drift_repairs.Get({k});
    drift_repairs.Get({kOther});
    for (const char* e : kLeaderEvents) leader_transitions.Get({e});
    for (const char* o : kRequeuePodOutcomes) requeue_pods.Get({o});
    for (const char* o : kRequeuePassOutcomes) requeue_passes.Get({o});
  }
};

ExtenderMetrics::ExtenderMetrics() : impl_(std::make_unique<Impl>()) {}
ExtenderMetrics::~ExtenderMetrics() = default;

void ExtenderMetrics::InitSeries(const Catalog& catalog) {
  for (const char* outcome : kNoOfferingBindOutcomes) impl_->binds.Get({"none", outcome});
  for (const Offering& offering : catalog.offerings()) {
    for (const char* outcome : kOfferingBindOutcomes) impl_->binds.Get({offering.resource, outcome});
    if (offering.sharing != Sharing::kTimeSliced) continue;
    for (const char* p : kAffinityPlacements) impl_->affinity.Get({offering.resource, p});
    for (const char* cause : kSpillCauses) impl_->spills.Get({offering.resource, cause});
  }
}

void ExtenderMetrics::ObserveRequest(absl::string_view verb, int code, absl::string_view outcome,
                                     double seconds) {
  const std::string code_text = absl::StrCat(code);
  impl_->requests.Get({verb, code_text, outcome}).Increment();
  impl_->durations.Get({verb}).Observe(seconds < 0 ? 0 : seconds);
}

void ExtenderMetrics::AddRequestsInFlight(absl::string_view verb, int delta) {
  impl_->in_flight.Get({Bounded(kVerbs, verb)}).Increment(static_cast<double>(delta));
}

void ExtenderMetrics::ObserveFilterVerdict(absl::string_view offering, absl::string_view reason) {
  ObserveFilterVerdicts(offering, reason, 1);
}

void ExtenderMetrics::ObserveFilterVerdicts(absl::string_view offering, absl::string_view reason,
                                            int64_t count) {
  if (count <= 0) return;
  impl_->verdicts.Get({offering, reason}).Increment(static_cast<double>(count));
}

void ExtenderMetrics::ObserveFilterNodes(int passed, int failed) {
  impl_->nodes_passed.Observe(passed);
  impl_->nodes_failed.Observe(failed);
}

void ExtenderMetrics::ObserveBind(absl::string_view offering, absl::string_view outcome,
                                  double api_seconds) {
  impl_->binds.Get({offering, outcome}).Increment();
  if (api_seconds >= 0) impl_->bind_api.Observe(api_seconds);
}

void ExtenderMetrics::ObserveAffinity(absl::string_view offering, absl::string_view placement) {
  impl_->affinity.Get({offering, placement}).Increment();
}

void ExtenderMetrics::ObserveSpill(absl::string_view offering, absl::string_view cause) {
  impl_->spills.Get({offering, cause}).Increment();
}

void ExtenderMetrics::ObservePreemption(int nodes_proposed, int victims) {
  if (nodes_proposed > 0) impl_->preempt_nodes.Increment(nodes_proposed);
  if (victims > 0) impl_->preempt_victims.Increment(victims);
}

void ExtenderMetrics::ObserveWatchRestart(absl::string_view resource, int64_t n) {
  if (n <= 0) return;
  impl_->watch_restarts.Get({Bounded(kWatchResources, resource)}).Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveApiError(absl::string_view op, int64_t n) {
  if (n <= 0) return;
  impl_->api_errors.Get({Bounded(kApiOps, op)}).Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveApiWrite(absl::string_view op, bool sent, absl::Duration waited) {
  const absl::string_view label = Bounded(kApiWriteOps, op);
  if (!sent) {
    impl_->writes_not_sent.Get({label}).Increment();
    return;
  }
  impl_->write_waits.Get({label}).Observe(std::max(0.0, absl::ToDoubleSeconds(waited)));
}

void ExtenderMetrics::ObserveDriftRepair(absl::string_view kind, int64_t n) {
  if (n <= 0) return;
  impl_->drift_repairs.Get({Bounded(kDriftKinds, kind)}).Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveAgentGateTimeouts(int64_t n) {
  if (n > 0) impl_->gate_timeouts.Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveDraClaimRead(bool ok) {
  (ok ? impl_->dra_claim_reads_ok : impl_->dra_claim_reads_failed).Increment();
}

void ExtenderMetrics::SetAgentGateWaitingPods(int64_t n) {
  impl_->gate_waiting.Set(static_cast<double>(n));
}

void ExtenderMetrics::SetNodesAgentStale(int64_t n) {
  impl_->agent_stale.Set(static_cast<double>(n));
}

void ExtenderMetrics::SetLastSync(absl::Time when) {
  impl_->last_sync.Set(when == absl::InfinitePast()
                           ? 0
                           : absl::ToDoubleSeconds(when - absl::UnixEpoch()));
}

void ExtenderMetrics::ObserveLeaderTransition(absl::string_view event, int64_t n) {
  if (n <= 0) return;
  impl_->leader_transitions.Get({Bounded(kLeaderEvents, event)}).Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveLeaderless(double seconds_added, double last_seconds) {
  if (seconds_added > 0) impl_->leaderless.Increment(seconds_added);
  impl_->last_leaderless.Set(last_seconds);
}

void ExtenderMetrics::ObserveRequeuePods(absl::string_view outcome, int64_t n) {
  if (n <= 0) return;
  impl_->requeue_pods.Get({Bounded(kRequeuePodOutcomes, outcome)}).Increment(static_cast<double>(n));
}

void ExtenderMetrics::ObserveRequeuePasses(absl::string_view outcome, int64_t n) {
  if (n <= 0) return;
  impl_->requeue_passes.Get({Bounded(kRequeuePassOutcomes, outcome)})
      .Increment(static_cast<double>(n));
}

prometheus::Registry& ExtenderMetrics::registry() { return *impl_->registry; }

std::string ExtenderMetrics::Serialize() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, impl_->registry->Collect());
  return out.str();
}

}  // namespace gse
