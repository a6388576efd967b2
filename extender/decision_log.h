// DecisionLog: one JSON line per bind decision, so that where a pod went (or why it did not)
// can be traced without metrics: pod, project, offering, node, the unit ids reserved, the
// outcome (the `outcome` label of gse_bind_total) with its reason, and the latencies. In DRA
// mode also one line per filter that has something to say of DRA nodes (FilterNotes): a node
// passed with no prediction of the allocator's pick, or catalog drift:
//
//   {"ts":"...","component":"extender","event":"filter","pod":"team-a/infer-1","uid":"...",
//    "project":"vision","offering":"nvidia.com/gpu.shared","candidates":40,"passed":12,
//    "dra_notes":["dra-7: no prediction: device gpu-0: counters or binding conditions are not modelled"]}
//
//   {"ts":"2024-05-01T12:00:00.123Z","component":"extender","event":"bind",
//    "pod":"team-a/notebook-2","uid":"...","project":"vision",
//    "offering":"nvidia.com/mig-1g.5gb.shared","node":"a100-mig-1",
//    "units":["a100-mig-1/nvidia.com/mig-1g.5gb.shared/3"],"amount":1,"placement":"own_unit",
//    "outcome":"bound","reason":"","latency_seconds":0.000412,"api_seconds":0.000003}
//
// Level (--decision-log): off | failures (every outcome but "bound") | all (the default: the
// log exists to answer "where did my pod go and why there", which failures alone never do;
// it costs one short line per bound pod, far less than kube-scheduler's own -v=2 logging).
// Every string is escaped (quotes, backslashes, control characters; invalid UTF-8 becomes
// U+FFFD), so a hostile pod or node name cannot break or forge a line.
// Thread-safe: Log() may be called from any number of threads; each line reaches the sink in
// one call, and the stderr sink writes it with one write(2) under a mutex, so lines never
// interleave.
#ifndef GSE_EXTENDER_DECISION_LOG_H_
#define GSE_EXTENDER_DECISION_LOG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gse {

enum class DecisionLogLevel { kOff, kFailures, kAll };

// Flag syntax: "off", "failures", "all".
bool AbslParseFlag(absl::string_view text, DecisionLogLevel* level, std::string* error);
std::string AbslUnparseFlag(DecisionLogLevel level);

// What one bind decided. Empty strings are written as "" (unknown at the point the bind
// ended, e.g. the pod of an unparseable request).
struct BindDecision {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string project;
  std::string offering;  // catalog resource, or "none" as in the metrics
  std::string node;      // the node kube-scheduler asked for
  // Units reserved (bound pods only): indices of `offering` on `node`, written as unit ids
  // "node/resource/index" (UnitId, the same as /debug/state and the pod annotation).
  std::vector<int32_t> unit_indices;
  int32_t amount_per_unit = 0;  // tickets or shares per unit (1 for exclusive); 0 = none
  std::string placement;        // time-sliced: "own_unit" | "new_unit"; else ""
  std::string outcome;          // bound | unit_taken | quota | no_fit | api_error | api_unknown | ...
  std::string reason;           // the Error sent to kube-scheduler ("" when bound)
  double latency_seconds = 0;   // the whole bind call
  double api_seconds = -1;      // the Binder call; negative: not called (written as null)
  // DRA mode, a bind on a DRA-backed node offering: "catalog drift: <disagreement>" per line
  // of DraState::Drift. Written as "dra_notes" only when not empty.
  std::vector<std::string> dra_notes;
};

// What one filter noted of DRA nodes (DRA mode, docs/dra.md): a node of a shared offering
// that passed with no prediction of the allocator's pick ("<node>: no prediction: <why>"),
// and catalog drift while a DRA-backed node passed ("catalog drift: <disagreement>"). A
// filter line is written only when there is a note, at the levels that write failures.
struct FilterNotes {
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string project;
  std::string offering;
  int32_t candidates = 0;
  int32_t passed = 0;
  std::vector<std::string> dra_notes;
};

class DecisionLog {
 public:
  // Receives one complete line, ending in '\n'. Must be thread-safe.
  using Sink = std::function<void(absl::string_view line)>;

  // A log with a fixed level (tests, embedders such as the replayer).
  DecisionLog(DecisionLogLevel level, Sink sink);

  // The process-wide log of the binary: level read from --decision-log at every decision,
  // lines to stderr (FdSink(2)). Never destroyed.
  static DecisionLog& Default();

  DecisionLogLevel level() const;
  // Whether a decision with this outcome is written at the current level.
  bool Wants(absl::string_view outcome) const;
  // Writes `decision` when Wants(decision.outcome).
  void Log(const BindDecision& decision) const;
  // Writes `notes` (event "filter") when it has any and Wants(kFilterNotesOutcome).
  void Log(const FilterNotes& notes) const;
  static constexpr absl::string_view kFilterNotesOutcome = "dra_notes";

  // The line Log() writes (with the trailing '\n'), at time `now`.
  static std::string FormatLine(const BindDecision& decision, absl::Time now);
  static std::string FormatLine(const FilterNotes& notes, absl::Time now);

 private:
  DecisionLog(std::optional<DecisionLogLevel> level, Sink sink);

  const std::optional<DecisionLogLevel> fixed_level_;  // nullopt: read the flag
  const Sink sink_;
};

// A Sink that writes each line to `fd` with one write(2) (continued after a partial write or
// EINTR while holding a process-wide mutex, so a long line is never split by another line).
// Write errors are dropped: a full disk or a closed stderr must not fail a bind.
DecisionLog::Sink FdSink(int fd);

// `s` with every invalid UTF-8 sequence replaced by U+FFFD (valid input is returned as is).
std::string ValidUtf8(absl::string_view s);

}  // namespace gse

ABSL_DECLARE_FLAG(gse::DecisionLogLevel, decision_log);

#endif  // GSE_EXTENDER_DECISION_LOG_H_
