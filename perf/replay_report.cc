// Text, JSON and SVG reports of replay runs (replay_report.h).
#include "perf/replay_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rapidjson/prettywriter.h"
#include "rapidjson/stringbuffer.h"

namespace gse::replay {
namespace {

// Policies in first-seen order, with their runs.
std::vector<std::pair<std::string, std::vector<const RunResult*>>> ByPolicy(
    const std::vector<RunResult>& runs) {
  std::vector<std::pair<std::string, std::vector<const RunResult*>>> out;
  for (const RunResult& r : runs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == r.policy; });
    if (it == out.end()) {
      out.push_back({r.policy, {}});
      it = out.end() - 1;
    }
    it->second.push_back(&r);
  }
  return out;
}

struct Stat {
  double mean = 0, sd = 0;
};

template <typename F>
Stat Over(const std::vector<const RunResult*>& rs, F f) {
  Stat s;
  if (rs.empty()) return s;
  for (const RunResult* r : rs) s.mean += f(*r);
  s.mean /= static_cast<double>(rs.size());
  if (rs.size() > 1) {
    double v = 0;
    for (const RunResult* r : rs) v += (f(*r) - s.mean) * (f(*r) - s.mean);
    s.sd = std::sqrt(v / static_cast<double>(rs.size() - 1));
  }
  return s;
}

std::string XmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<double, double>> MeanCurve(const std::vector<const RunResult*>& runs) {
  std::map<int, std::pair<double, int>> acc;  // arrived % -> (sum of allocated %, runs)
  for (const RunResult* r : runs) {
    for (const auto& [x, y] : r->curve) {
      if (std::floor(x) != x) continue;  // the final point is not on the grid
      auto& a = acc[static_cast<int>(x)];
      a.first += y;
      a.second += 1;
    }
  }
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, a] : acc) {
    // Only where every run got there (the last step may be reached by some seeds only).
    if (a.second == static_cast<int>(runs.size())) out.emplace_back(x, a.first / a.second);
  }
  return out;
}

std::string TextSummary(const std::vector<RunResult>& runs, const ReportContext& ctx) {
  std::string out = absl::StrCat("== ", ctx.title, " ==\n");
  if (runs.empty()) return out + "no runs\n";
  double arrived = 0, ceiling = 0;
  for (const RunResult& r : runs) {
    arrived += r.arrived_gpu / std::max(1.0, r.cluster_gpus);
    ceiling += r.allocation_ceiling;
  }
  const auto n = static_cast<double>(runs.size());
  absl::StrAppendFormat(&out,
                        "cluster: %.0f GPUs; arrived GPU request %.1f%% of capacity, allocation "
                        "ceiling %.2f%% (means; RunResult::allocation_ceiling)\n",
                        runs.front().cluster_gpus, 100 * arrived / n, 100 * ceiling / n);
  absl::StrAppend(&out, absl::StrFormat("%-14s %5s %16s %12s %12s %9s %8s %7s %9s %7s %8s %12s\n", "policy", "runs",
                                        "GPU alloc %", "unalloc GPU", "frag GPU", "affinity", "ceiling", "spills",
                                        "avoidable", "quota", "oversub", "decisions/s"));
  for (const auto& [policy, rs] : ByPolicy(runs)) {
    const Stat alloc = Over(rs, [](const RunResult& r) { return 100 * r.gpu_allocation; });
    const Stat unalloc = Over(rs, [](const RunResult& r) { return r.unallocated_gpus; });
    const Stat frag = Over(rs, [](const RunResult& r) { return r.fragmentation; });
    const Stat dps = Over(rs, [](const RunResult& r) { return r.decisions_per_second; });
    int64_t spills = 0, avoidable = 0, quota = 0, oversub = 0, tickets = 0, owned = 0, floor = 0;
    for (const RunResult* r : rs) {
      spills += r->spills;
      avoidable += r->avoidable_spills;
      quota += r->quota_rejections;
      oversub += r->audit.oversubscribed_units + r->audit.multi_owner_units + r->audit.over_capacity_nodes +
                 r->audit.over_quota;
      tickets += r->tickets_placed;
      owned += r->tickets_on_owned_unit;
      floor += r->unit_openings_floor;
    }
    const std::string affinity =
        tickets > 0 ? absl::StrFormat("%.3f", static_cast<double>(owned) / static_cast<double>(tickets)) : "-";
    const std::string ceiling =
        tickets > 0 ? absl::StrFormat("%.3f", 1.0 - static_cast<double>(floor) / static_cast<double>(tickets)) : "-";
    absl::StrAppend(&out, absl::StrFormat("%-14s %5d %9.2f ±%5.2f %12.1f %12.1f %9s %8s %7d %9d %7d %8d %12.0f\n",
                                          policy, rs.size(), alloc.mean, alloc.sd, unalloc.mean, frag.mean,
                                          affinity, ceiling, spills, avoidable, quota, oversub, dps.mean));
  }
  for (const auto& [policy, rs] : ByPolicy(runs)) {
    std::map<std::string, int64_t> failed;
    for (const RunResult* r : rs) {
      for (const auto& [k, v] : r->pods_failed) failed[k] += v;
    }
    std::vector<std::string> parts;
    for (const auto& [k, v] : failed) parts.push_back(absl::StrCat(k, "=", v));
    absl::StrAppend(&out, policy, ": pods failed (all runs): ", parts.empty() ? "none" : absl::StrJoin(parts, " "),
                    "\n");
    std::vector<std::string> lat;
    for (const char* verb : {"filter", "prioritize", "bind"}) {
      double p50 = 0, p99 = 0;
      int n = 0;
      for (const RunResult* r : rs) {
        auto it = r->latency.find(verb);
        if (it == r->latency.end() || it->second.count == 0) continue;
        p50 += it->second.p50_us;
        p99 += it->second.p99_us;
        ++n;
      }
      if (n > 0) lat.push_back(absl::StrFormat("%s p50 %.0f us p99 %.0f us", verb, p50 / n, p99 / n));
    }
    if (!lat.empty()) absl::StrAppend(&out, policy, ": latency (mean over runs): ", absl::StrJoin(lat, "; "), "\n");
    for (const RunResult* r : rs) {
      if (!r->audit.problems.empty()) {
        absl::StrAppend(&out, policy, " seed ", r->seed, ": AUDIT: ", r->audit.problems.front(), "\n");
      }
    }
  }
  return out;
}

std::string JsonReport(const std::vector<RunResult>& runs, const ReportContext& ctx) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  w.SetMaxDecimalPlaces(6);
  auto str = [&](absl::string_view s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); };
  w.StartObject();
  w.Key("title");
  str(ctx.title);
  w.Key("input");
  w.StartObject();
  for (const auto& [k, v] : ctx.input) {
    str(k);
    str(v);
  }
  w.EndObject();
  w.Key("runs");
  w.StartArray();
  for (const RunResult& r : runs) {
    w.StartObject();
    w.Key("policy");
    str(r.policy);
    w.Key("mode");
    str(r.mode);
    w.Key("seed");
    w.Uint64(r.seed);
    w.Key("load");
    w.Double(r.load);
    w.Key("cluster_gpus");
    w.Double(r.cluster_gpus);
    w.Key("arrived_gpu");
    w.Double(r.arrived_gpu);
    w.Key("allocated_gpu");
    w.Double(r.allocated_gpu);
    w.Key("gpu_allocation");
    w.Double(r.gpu_allocation);
    w.Key("allocation_ceiling");
    w.Double(r.allocation_ceiling);
    w.Key("unallocated_gpus");
    w.Double(r.unallocated_gpus);
    w.Key("fragmentation");
    w.Double(r.fragmentation);
    w.Key("idle_gpus");
    w.Double(r.idle_gpus);
    w.Key("affinity_ratio");
    if (r.affinity_ratio < 0) {
      w.Null();
    } else {
      w.Double(r.affinity_ratio);
    }
    w.Key("affinity_ceiling");
    if (r.affinity_ceiling < 0) {
      w.Null();
    } else {
      w.Double(r.affinity_ceiling);
    }
    w.Key("unit_openings_floor");
    w.Int64(r.unit_openings_floor);
    w.Key("tickets_placed");
    w.Int64(r.tickets_placed);
    w.Key("spills");
    w.Int64(r.spills);
    w.Key("avoidable_spills");
    w.Int64(r.avoidable_spills);
    w.Key("quota_rejections");
    w.Int64(r.quota_rejections);
    w.Key("oversubscribed_units");
    w.Int64(r.audit.oversubscribed_units);
    w.Key("audit");
    w.StartObject();
    w.Key("oversubscribed_units");
    w.Int64(r.audit.oversubscribed_units);
    w.Key("multi_owner_units");
    w.Int64(r.audit.multi_owner_units);
    w.Key("over_capacity_nodes");
    w.Int64(r.audit.over_capacity_nodes);
    w.Key("over_quota");
    w.Int64(r.audit.over_quota);
    w.Key("problems");
    w.StartArray();
    for (const std::string& p : r.audit.problems) str(p);
    w.EndArray();
    w.EndObject();
    w.Key("mirror_audit");
    if (!r.mirror_audit.has_value()) {
      w.Null();
    } else {
      w.StartObject();
      w.Key("oversubscribed_units");
      w.Int64(r.mirror_audit->oversubscribed_units);
      w.Key("multi_owner_units");
      w.Int64(r.mirror_audit->multi_owner_units);
      w.Key("over_quota_projects");
      w.Int64(r.mirror_audit->over_quota_projects);
      w.EndObject();
    }
    w.Key("pods_arrived");
    w.Int64(r.pods_arrived);
    w.Key("pods_placed");
    w.Int64(r.pods_placed);
    w.Key("pods_deleted");
    w.Int64(r.pods_deleted);
    w.Key("pods_failed");
    w.StartObject();
    for (const auto& [k, v] : r.pods_failed) {
      str(k);
      w.Int64(v);
    }
    w.EndObject();
    w.Key("latency_us");
    w.StartObject();
    for (const auto& [verb, l] : r.latency) {
      str(verb);
      w.StartObject();
      w.Key("count");
      w.Int64(l.count);
      w.Key("p50");
      w.Double(l.p50_us);
      w.Key("p90");
      w.Double(l.p90_us);
      w.Key("p99");
      w.Double(l.p99_us);
      w.Key("max");
      w.Double(l.max_us);
      w.EndObject();
    }
    w.EndObject();
    w.Key("decisions_per_second");
    w.Double(r.decisions_per_second);
    w.Key("wall_seconds");
    w.Double(r.wall_seconds);
    w.Key("curve");
    w.SetFormatOptions(rapidjson::kFormatSingleLineArray);
    w.StartArray();
    for (const auto& [x, y] : r.curve) {
      w.StartArray();
      w.Double(std::round(x * 100) / 100);
      w.Double(std::round(y * 1000) / 1000);
      w.EndArray();
    }
    w.EndArray();
    w.SetFormatOptions(rapidjson::kFormatDefault);
    w.EndObject();
  }
  w.EndArray();
  w.Key("summary");
  w.StartArray();
  for (const auto& [policy, rs] : ByPolicy(runs)) {
    const Stat alloc = Over(rs, [](const RunResult& r) { return r.gpu_allocation; });
    w.StartObject();
    w.Key("policy");
    str(policy);
    w.Key("runs");
    w.Uint64(rs.size());
    w.Key("gpu_allocation_mean");
    w.Double(alloc.mean);
    w.Key("gpu_allocation_stdev");
    w.Double(alloc.sd);
    w.Key("unallocated_gpus_mean");
    w.Double(Over(rs, [](const RunResult& r) { return r.unallocated_gpus; }).mean);
    w.Key("fragmentation_mean");
    w.Double(Over(rs, [](const RunResult& r) { return r.fragmentation; }).mean);
    int64_t oversub = 0;
    for (const RunResult* r : rs) oversub += r->audit.oversubscribed_units;
    w.Key("oversubscribed_units_total");
    w.Int64(oversub);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::string SvgPlot(const std::vector<RunResult>& runs, const ReportContext& ctx) {
  // Plot area in pixels; axes in percent of cluster GPUs.
  const double W = 760, H = 480, left = 70, right = 200, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmax = 100;
  for (const RunResult& r : runs) {
    for (const auto& [x, y] : r.curve) xmax = std::max(xmax, x);
  }
  xmax = std::ceil(xmax / 10) * 10;
  const double ymax = 100;
  // Zoom on where policies differ: both axes start 10 points below the lowest final
  // allocation (below it every policy places everything that arrives: the diagonal).
  double lowest = 100;
  for (const RunResult& r : runs) lowest = std::min(lowest, 100 * r.gpu_allocation);
  const double lo = std::max(0.0, std::floor((lowest - 10) / 10) * 10);
  auto X = [&](double x) { return left + pw * (x - lo) / (xmax - lo); };
  auto Y = [&](double y) { return top + ph * (1 - (y - lo) / (ymax - lo)); };
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                  "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      W, H, W, H);
  absl::StrAppend(&s, absl::StrFormat("<text x=\"%.0f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">%s</text>\n",
                                      left, XmlEscape(ctx.title)));
  // Grid and axes.
  for (int gx = static_cast<int>(lo); gx <= static_cast<int>(xmax); gx += 10) {
    absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n",
                                        X(gx), Y(lo), X(gx), Y(ymax), X(gx), Y(lo) + 18, gx));
  }
  for (int gy = static_cast<int>(lo); gy <= 100; gy += lo >= 50 ? 5 : 10) {
    absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n",
                                        X(lo), Y(gy), X(xmax), Y(gy), X(lo) - 6, Y(gy) + 4, gy));
  }
  absl::StrAppend(&s, absl::StrFormat("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n",
                                      left, top, pw, ph));
  absl::StrAppend(&s, absl::StrFormat("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">arrived GPU request (%% of cluster GPUs)</text>\n",
                                      left + pw / 2, H - 16));
  absl::StrAppend(&s, absl::StrFormat("<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">GPU allocation (%% of cluster GPUs)</text>\n",
                                      top + ph / 2));
  // Everything that arrived is placed: the upper bound.
  absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\" stroke-dasharray=\"4 4\"/>\n",
                                      X(lo), Y(lo), X(ymax), Y(ymax)));
  int k = 0;
  for (const auto& [policy, rs] : ByPolicy(runs)) {
    const char* color = kColors[k % 10];
    const std::vector<std::pair<double, double>> curve = MeanCurve(rs);
    std::string points;
    for (const auto& [x, y] : curve) {
      if (x >= lo && y >= lo) absl::StrAppend(&points, absl::StrFormat("%.1f,%.1f ", X(x), Y(y)));
    }
    absl::StrAppend(&s, absl::StrFormat("<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"%s\"/>\n",
                                        color, points));
    const Stat alloc = Over(rs, [](const RunResult& r) { return 100 * r.gpu_allocation; });
    const double ly = top + 10 + 36.0 * k;
    absl::StrAppend(&s, absl::StrFormat("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>"
                                        "<text x=\"%.1f\" y=\"%.1f\">%s</text>"
                                        "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">%.2f%% at end, %d run%s</text>\n",
                                        W - right + 15, ly, W - right + 40, ly, color, W - right + 46, ly + 4,
                                        XmlEscape(policy), W - right + 46, ly + 19, alloc.mean, rs.size(),
                                        rs.size() == 1 ? "" : "s"));
    ++k;
  }
  absl::StrAppend(&s, "</svg>\n");
  return s;
}

}  // namespace gse::replay
