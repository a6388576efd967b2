// Reports of replay runs: a text summary (stdout), JSON (--json) and an SVG plot of GPU
// allocation against arrived load, one line per policy (--svg).
//
// JSON: {"runs":[{policy, mode, seed, load, gpu_allocation (0..1), unallocated_gpus,
// fragmentation, idle_gpus, affinity_ratio (null when no time-sliced ticket was placed),
// spills, quota_rejections, oversubscribed_units, audit{...}, mirror_audit{...} or null,
// pods_arrived, pods_placed, pods_failed{reason: n}, latency_us{verb: {count, p50, p90, p99,
// max}}, decisions_per_second, wall_seconds, curve [[arrived %, allocated %], ...]}],
// "summary":[{policy, runs, gpu_allocation_mean, gpu_allocation_stdev, unallocated_gpus_mean,
// fragmentation_mean, oversubscribed_units_total}], "input":{...}}.
// Pure functions.
#ifndef GSE_PERF_REPLAY_REPORT_H_
#define GSE_PERF_REPLAY_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "perf/replay_engine.h"

namespace gse::replay {

struct ReportContext {
  std::string title;                          // e.g. "openb default, load 130%"
  std::map<std::string, std::string> input;   // what was replayed (files, options)
};

std::string TextSummary(const std::vector<RunResult>& runs, const ReportContext& ctx);
std::string JsonReport(const std::vector<RunResult>& runs, const ReportContext& ctx);
std::string SvgPlot(const std::vector<RunResult>& runs, const ReportContext& ctx);

// Mean allocation curve of one policy's runs at each whole percent of arrival (for the plot).
std::vector<std::pair<double, double>> MeanCurve(const std::vector<const RunResult*>& runs);

}  // namespace gse::replay

#endif  // GSE_PERF_REPLAY_REPORT_H_
