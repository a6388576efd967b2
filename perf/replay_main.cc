// replay: replays scheduling traces through the extender's own scoring and state code and
// compares placement policies (docs/replay.md).
//
//   build/bin/replay --openb-nodes=F --openb-pods=F --load=1.3 --seed=1 --seeds=10
//       --policies=fgd,bestfit,affinity-pack --json=out.json --svg=out.svg [--mig]
//       [--in-process | --http | --extender=URL]
//   build/bin/replay --snapshot=cluster.json --trace=events.jsonl --policies=affinity-pack
//
// Exit codes: 0 done (the audit found nothing), 1 the audit found oversubscription or a broken
// invariant, 2 bad input or a failed run.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "perf/openb_import.h"
#include "perf/in_process_placer.h"
#include "perf/replay_engine.h"
#include "perf/replay_http.h"
#include "perf/replay_report.h"
#include "perf/trace.h"

#ifndef GSE_REPLAY_SHARED_DIR
#define GSE_REPLAY_SHARED_DIR "../shared"
#endif

ABSL_FLAG(std::string, openb_nodes, "",
          "openb node list CSV (sn,cpu_milli,memory_mib,gpu,model), e.g. "
          "../shared/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv");
ABSL_FLAG(std::string, openb_pods, "", "openb pod list CSV (openb_pod_list_*.csv)");
ABSL_FLAG(std::string, helios, GSE_REPLAY_SHARED_DIR "/traces/helios/Earth_gpu_number.csv",
          "Helios VC GPU quota CSV whose VC columns size the projects openb pods are assigned to "
          "(\"\" = one project)");
ABSL_FLAG(bool, mig, false,
          "openb: MIG mapping (A100/H100, MIG slices time-sliced, project quotas) instead of "
          "whole GPUs + MPS shares");
ABSL_FLAG(bool, openb_shuffle, false,
          "openb: submit the pods in a seeded random order, as the FGD simulator's published "
          "runs do (--shuffle-pod=true), instead of file order");
ABSL_FLAG(double, load, 1.3,
          "openb: resample pods (seeded) until the arrived GPU request reaches this share of "
          "the cluster's GPUs, then submit them in file order (the FGD method); 0 = the file "
          "once as it is");
ABSL_FLAG(uint64_t, seed, 1, "first seed");
ABSL_FLAG(int32_t, seeds, 1, "number of seeds (seed, seed+1, ...); figures are averaged");
ABSL_FLAG(std::string, policies, "affinity-pack",
          "comma-separated placement policies run side by side on the same input: "
          "affinity-pack, spread, fgd (fragmentation gradient descent, with the replayer's "
          "cpu/memory view), fgd-gpu (GPU units only), fgd-learned (the service's --policy=fgd: "
          "the task mix learned from the pods filter sees, not the trace's), bestfit (and any "
          "other the extender knows)");
ABSL_FLAG(std::string, json, "", "write the JSON report here");
ABSL_FLAG(std::string, svg, "", "write an SVG plot of GPU allocation vs arrived load here");
ABSL_FLAG(std::string, snapshot, "",
          "cluster snapshot: a `kubectl get nodes,namespaces,resourcequotas -o json` List");
ABSL_FLAG(std::string, trace, "", "trace in the replayer's JSON-lines format (docs/replay.md)");
ABSL_FLAG(std::string, catalog, "", "GPU catalog file (default: the trace header's, else built-in)");
ABSL_FLAG(std::string, record, "",
          "write what is replayed (header, cluster, every event) in the trace format; with "
          "several runs, the first run's");
ABSL_FLAG(bool, in_process, false,
          "decide in this process through Mirror + scoring, no HTTP (the default unless "
          "--http or --extender is given)");
ABSL_FLAG(bool, http, false,
          "drive an extender over HTTP: start one in-process (ExtenderService + HttpServer on a "
          "free loopback port) fed by a local API server's watch");
ABSL_FLAG(std::string, extender, "",
          "URL of a running extender to drive over HTTP (implies --http); it must watch the "
          "replayer's API server: see --kubeconfig-out");
ABSL_FLAG(std::string, kubeconfig_out, "",
          "HTTP mode: write a kubeconfig for the replayer's local API server here (for --extender)");
ABSL_FLAG(int32_t, concurrency, 1, "HTTP mode: concurrent scheduler clients (1 = deterministic)");
ABSL_FLAG(bool, node_cache_capable, true,
          "HTTP mode: send node names (true) or full Node objects (false) to filter/prioritize");
ABSL_FLAG(int32_t, percentage_of_nodes_to_score, 100,
          "kube-scheduler's cut-off: 100 = every node, 1..99 = stop after that share (at least "
          "100 nodes) were found feasible, 0 = kube-scheduler's adaptive default");
ABSL_FLAG(std::string, score_plugins, "least-allocated=1,balanced-allocation=1",
          "kube-scheduler's in-tree score plugins NAME=WEIGHT added to the extender's score: "
          "least-allocated, most-allocated (NodeResourcesFit on cpu, memory), "
          "balanced-allocation; \"\" = none. Default: the project's gpu-scheduler.yaml");
ABSL_FLAG(bool, extender_all_pods, false,
          "send every pod to the extender (an extender entry without managedResources): pods "
          "asking for no GPU resource also go through filter (every node passes) and prioritize, "
          "where the policy scores them (fgd: by the fragmentation their cpu/memory cause on the "
          "node's idle GPUs; other policies: 0), as the FGD simulator scores every pod. --http "
          "starts its extender with --score-all-pods; --extender=URL must have been started with "
          "it. Default false: the project's gpu-scheduler.yaml sets managedResources, so "
          "kube-scheduler's in-tree scores alone place such pods");
ABSL_FLAG(int32_t, extender_weight, 5, "the extender's weight (kube-scheduler adds score x weight x 10)");
ABSL_FLAG(int32_t, mps_replicas, 100, "openb: MPS shares per GPU (100 = 1% of a GPU per share)");
ABSL_FLAG(int32_t, ts_replicas, 4, "openb --mig: time-sliced tickets per MIG slice");
ABSL_FLAG(double, quota_factor, 1.0,
          "openb --mig: project quota = factor x project share x cluster total (0 = no quotas)");

namespace gse::replay {
namespace {

struct Inputs {
  std::string title;
  std::map<std::string, std::string> ctx;
};

absl::StatusOr<ReplayInput> BuildInput(uint64_t seed, const std::vector<OpenbNode>* nodes,
                                       const std::vector<OpenbPod>* pods,
                                       const std::vector<ProjectShare>& projects) {
  const std::string catalog_file = absl::GetFlag(FLAGS_catalog);
  std::string catalog_text;
  if (!catalog_file.empty()) {
    absl::StatusOr<std::string> c = ReadFile(catalog_file);
    if (!c.ok()) return absl::InvalidArgumentError(absl::StrCat("--catalog: ", c.status().message()));
    catalog_text = *c;
  }
  if (nodes != nullptr) {
    OpenbOptions o;
    o.mig = absl::GetFlag(FLAGS_mig);
    o.mps_replicas = absl::GetFlag(FLAGS_mps_replicas);
    o.ts_replicas = absl::GetFlag(FLAGS_ts_replicas);
    o.load = absl::GetFlag(FLAGS_load);
    o.shuffle = absl::GetFlag(FLAGS_openb_shuffle);
    o.seed = seed;
    o.quota_factor = absl::GetFlag(FLAGS_quota_factor);
    o.projects = projects;
    o.source = absl::StrCat("openb ", absl::GetFlag(FLAGS_openb_pods), o.mig ? " (MIG)" : "", o.shuffle ? " shuffled" : "", " seed ", seed,
                            " load ", o.load);
    absl::StatusOr<OpenbImport> imp = ImportOpenb(*nodes, *pods, o);
    if (!imp.ok()) return imp.status();
    absl::StatusOr<ReplayInput> in = PrepareInput(std::move(imp->trace), catalog_text, "");
    if (in.ok()) in->cluster_gpus = imp->cluster_gpus;
    return in;
  }
  Trace trace;
  if (!absl::GetFlag(FLAGS_trace).empty()) {
    absl::StatusOr<Trace> t = LoadTraceFile(absl::GetFlag(FLAGS_trace));
    if (!t.ok()) return t.status();
    trace = *std::move(t);
  }
  std::string snapshot;
  if (!absl::GetFlag(FLAGS_snapshot).empty()) {
    absl::StatusOr<std::string> s = ReadFile(absl::GetFlag(FLAGS_snapshot));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("--snapshot: ", s.status().message()));
    snapshot = *s;
  }
  return PrepareInput(std::move(trace), catalog_text, snapshot);
}

class Progress {
 public:
  explicit Progress(std::string label) : label_(std::move(label)), tty_(isatty(2) == 1),
                                         start_(std::chrono::steady_clock::now()) {}
  void operator()(size_t done, size_t total) {
    if (!tty_ || total == 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    std::fprintf(stderr, "\r%s: %zu/%zu events, %.0f/s, ETA %.0fs   ", label_.c_str(), done, total, rate, eta);
    if (done == total) std::fprintf(stderr, "\n");
  }

 private:
  std::string label_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

absl::Status WriteText(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("--", flag, "=", path, ": cannot write"));
  return absl::OkStatus();
}

int Main() {
  const bool openb = !absl::GetFlag(FLAGS_openb_nodes).empty() || !absl::GetFlag(FLAGS_openb_pods).empty();
  const bool tracefmt = !absl::GetFlag(FLAGS_trace).empty() || !absl::GetFlag(FLAGS_snapshot).empty();
  auto usage_error = [](const std::string& m) {
    std::fprintf(stderr, "replay: %s (see --help)\n", m.c_str());
    return 2;
  };
  if (openb == tracefmt) return usage_error("give either --openb-nodes and --openb-pods, or --snapshot and/or --trace");
  if (openb && (absl::GetFlag(FLAGS_openb_nodes).empty() || absl::GetFlag(FLAGS_openb_pods).empty())) {
    return usage_error("--openb-nodes and --openb-pods go together");
  }
  const bool http = absl::GetFlag(FLAGS_http) || !absl::GetFlag(FLAGS_extender).empty();
  if (http && absl::GetFlag(FLAGS_in_process)) return usage_error("--in-process excludes --http and --extender");
  if (absl::GetFlag(FLAGS_seeds) < 1) return usage_error("--seeds must be at least 1");
  if (absl::GetFlag(FLAGS_concurrency) < 1 || absl::GetFlag(FLAGS_concurrency) > 256) {
    return usage_error("--concurrency must be 1..256");
  }
  if (!http && absl::GetFlag(FLAGS_concurrency) != 1) return usage_error("--concurrency needs --http or --extender");
  if (absl::GetFlag(FLAGS_extender_all_pods) && absl::GetFlag(FLAGS_concurrency) > 1) {
    // The same check RunReplay makes (ValidateReplayOptions), before any input is read.
    return usage_error(
        "--extender-all-pods needs --concurrency=1 (a pod without a catalog resource is bound where "
        "kube-scheduler's own fit found room, which another client may have taken since)");
  }
  const int32_t pct = absl::GetFlag(FLAGS_percentage_of_nodes_to_score);
  if (pct < 0 || pct > 100) return usage_error("--percentage-of-nodes-to-score must be 0..100");
  std::vector<std::string> policies = absl::StrSplit(absl::GetFlag(FLAGS_policies), ',', absl::SkipEmpty());
  if (policies.empty()) return usage_error("--policies is empty");
  if (!absl::GetFlag(FLAGS_extender).empty() && policies.size() > 1) {
    return usage_error("--extender runs the policy that extender was started with: give one --policies name");
  }

  std::vector<std::pair<std::string, int64_t>> plugins;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_score_plugins), ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int64_t w = 1;
    if (!kv.second.empty() && (!absl::SimpleAtoi(kv.second, &w) || w < 0 || w > 100)) {
      return usage_error(absl::StrCat("--score-plugins: weight of ", kv.first, " must be 0..100"));
    }
    if (kv.first != "least-allocated" && kv.first != "most-allocated" && kv.first != "balanced-allocation") {
      return usage_error(absl::StrCat("--score-plugins: unknown plugin \"", kv.first,
                                      "\" (least-allocated, most-allocated, balanced-allocation)"));
    }
    plugins.emplace_back(kv.first, w);
  }
  if (absl::GetFlag(FLAGS_extender_weight) < 0 || absl::GetFlag(FLAGS_extender_weight) > 100) {
    return usage_error("--extender-weight must be 0..100");
  }
  std::vector<OpenbNode> nodes;
  std::vector<OpenbPod> pods;
  std::vector<ProjectShare> projects;
  if (openb) {
    auto load = [](const std::string& path) { return ReadFile(path); };
    absl::StatusOr<std::string> ncsv = load(absl::GetFlag(FLAGS_openb_nodes));
    if (!ncsv.ok()) return usage_error(absl::StrCat("--openb-nodes: ", ncsv.status().message()));
    absl::StatusOr<std::vector<OpenbNode>> n = ParseOpenbNodes(*ncsv, absl::GetFlag(FLAGS_openb_nodes));
    if (!n.ok()) return usage_error(std::string(n.status().message()));
    nodes = *std::move(n);
    absl::StatusOr<std::string> pcsv = load(absl::GetFlag(FLAGS_openb_pods));
    if (!pcsv.ok()) return usage_error(absl::StrCat("--openb-pods: ", pcsv.status().message()));
    absl::StatusOr<std::vector<OpenbPod>> p = ParseOpenbPods(*pcsv, absl::GetFlag(FLAGS_openb_pods));
    if (!p.ok()) return usage_error(std::string(p.status().message()));
    pods = *std::move(p);
    if (!absl::GetFlag(FLAGS_helios).empty()) {
      absl::StatusOr<std::string> h = load(absl::GetFlag(FLAGS_helios));
      if (!h.ok()) return usage_error(absl::StrCat("--helios: ", h.status().message()));
      absl::StatusOr<std::vector<ProjectShare>> pr = ParseHeliosQuotas(*h, absl::GetFlag(FLAGS_helios));
      if (!pr.ok()) return usage_error(std::string(pr.status().message()));
      projects = *std::move(pr);
    }
  }

  ReportContext ctx;
  if (openb) {
    std::string pods_name = absl::GetFlag(FLAGS_openb_pods);
    if (size_t slash = pods_name.rfind('/'); slash != std::string::npos) pods_name = pods_name.substr(slash + 1);
    ctx.title = absl::StrFormat("%s%s, arrival %.0f%%%s", pods_name, absl::GetFlag(FLAGS_mig) ? " (MIG)" : "",
                                100 * absl::GetFlag(FLAGS_load),
                                absl::GetFlag(FLAGS_openb_shuffle) ? ", shuffled order" : "");
    ctx.input["openb_nodes"] = absl::GetFlag(FLAGS_openb_nodes);
    ctx.input["openb_pods"] = absl::GetFlag(FLAGS_openb_pods);
    ctx.input["helios"] = absl::GetFlag(FLAGS_helios);
    ctx.input["mapping"] = absl::GetFlag(FLAGS_mig) ? "mig" : "gpu+mps";
    ctx.input["load"] = absl::StrCat(absl::GetFlag(FLAGS_load));
    ctx.input["order"] = absl::GetFlag(FLAGS_openb_shuffle) ? "shuffled" : "file";
  } else {
    ctx.title = absl::StrCat("trace ", absl::GetFlag(FLAGS_trace));
    ctx.input["trace"] = absl::GetFlag(FLAGS_trace);
    ctx.input["snapshot"] = absl::GetFlag(FLAGS_snapshot);
  }
  ctx.input["mode"] = http ? (absl::GetFlag(FLAGS_extender).empty() ? "http (in-process extender)"
                                                                    : absl::StrCat("http ", absl::GetFlag(FLAGS_extender)))
                           : "in-process";
  ctx.input["percentage_of_nodes_to_score"] = absl::StrCat(pct);
  ctx.input["concurrency"] = absl::StrCat(absl::GetFlag(FLAGS_concurrency));
  ctx.input["score_plugins"] = absl::GetFlag(FLAGS_score_plugins);
  ctx.input["extender_weight"] = absl::StrCat(absl::GetFlag(FLAGS_extender_weight));
  ctx.input["extender_all_pods"] = absl::GetFlag(FLAGS_extender_all_pods) ? "true" : "false";
  if (absl::GetFlag(FLAGS_extender_all_pods)) absl::StrAppend(&ctx.title, ", every pod through the extender");

  std::vector<RunResult> runs;
  const int32_t nseeds = openb ? absl::GetFlag(FLAGS_seeds) : 1;
  if (!openb && absl::GetFlag(FLAGS_seeds) > 1) {
    std::fprintf(stderr, "replay: --seeds only varies openb resampling; a trace is replayed once per policy\n");
  }
  std::unique_ptr<TraceWriter> recorder;
  for (int32_t k = 0; k < nseeds; ++k) {
    const uint64_t seed = absl::GetFlag(FLAGS_seed) + static_cast<uint64_t>(k);
    absl::StatusOr<ReplayInput> input = BuildInput(seed, openb ? &nodes : nullptr, &pods, projects);
    if (!input.ok()) return usage_error(std::string(input.status().message()));
    for (const std::string& policy_name : policies) {
      absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakeReplayPolicy(policy_name, *input);
      if (!policy.ok()) return usage_error(absl::StrCat("--policies: ", policy.status().message()));
      std::unique_ptr<Placer> placer;
      if (http) {
        HttpPlacerOptions ho;
        ho.extender_url = absl::GetFlag(FLAGS_extender);
        ho.kubeconfig_out = absl::GetFlag(FLAGS_kubeconfig_out);
        ho.node_cache_capable = absl::GetFlag(FLAGS_node_cache_capable);
        ho.score_all_pods = absl::GetFlag(FLAGS_extender_all_pods);
        ho.catalog = input->catalog;
        placer = std::make_unique<HttpPlacer>(ho, *std::move(policy));
      } else {
        DecisionCore::Options core_options;
        core_options.every_pod = absl::GetFlag(FLAGS_extender_all_pods);
        placer = std::make_unique<InProcessPlacer>(input->catalog, *std::move(policy), core_options);
      }
      ReplayOptions ro;
      ro.policy = policy_name;
      ro.seed = seed;
      ro.load = openb ? absl::GetFlag(FLAGS_load) : 0;
      ro.percentage_of_nodes_to_score = pct;
      ro.concurrency = absl::GetFlag(FLAGS_concurrency);
      ro.score_plugins = plugins;
      ro.extender_weight = absl::GetFlag(FLAGS_extender_weight);
      ro.extender_all_pods = absl::GetFlag(FLAGS_extender_all_pods);
      if (!absl::GetFlag(FLAGS_record).empty() && recorder == nullptr) {
        absl::StatusOr<std::unique_ptr<TraceWriter>> w = TraceWriter::Open(absl::GetFlag(FLAGS_record), input->trace.header);
        if (!w.ok()) return usage_error(std::string(w.status().message()));
        recorder = *std::move(w);
        ro.record = recorder.get();
      }
      Progress progress(absl::StrCat(policy_name, " seed ", seed));
      ro.progress = [&progress](size_t d, size_t t) { progress(d, t); };
      absl::StatusOr<RunResult> r = RunReplay(*input, *placer, ro);
      if (ro.record != nullptr) {
        if (absl::Status s = recorder->Close(); !s.ok()) return usage_error(std::string(s.message()));
      }
      if (!r.ok()) {
        std::fprintf(stderr, "replay: %s seed %llu: %s\n", policy_name.c_str(),
                     static_cast<unsigned long long>(seed), std::string(r.status().message()).c_str());
        return 2;
      }
      runs.push_back(*std::move(r));
    }
  }

  std::fputs(TextSummary(runs, ctx).c_str(), stdout);
  if (!absl::GetFlag(FLAGS_json).empty()) {
    if (absl::Status s = WriteText(absl::GetFlag(FLAGS_json), JsonReport(runs, ctx), "json"); !s.ok()) {
      return usage_error(std::string(s.message()));
    }
  }
  if (!absl::GetFlag(FLAGS_svg).empty()) {
    if (absl::Status s = WriteText(absl::GetFlag(FLAGS_svg), SvgPlot(runs, ctx), "svg"); !s.ok()) {
      return usage_error(std::string(s.message()));
    }
  }
  for (const RunResult& r : runs) {
    if (r.audit.oversubscribed_units + r.audit.multi_owner_units + r.audit.over_capacity_nodes +
            r.audit.over_quota > 0) {
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace gse::replay

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "replays scheduling traces through the extender's scoring and state code and compares "
      "placement policies.\n\n"
      "  replay --openb-nodes=FILE --openb-pods=FILE [--load=1.3] [--seed=S --seeds=N]\n"
      "         [--policies=fgd,bestfit,affinity-pack] [--json=FILE] [--svg=FILE] [--mig]\n"
      "         [--in-process | --http | --extender=URL] [--extender-all-pods]\n"
      "  replay [--snapshot=FILE] --trace=FILE [--catalog=FILE] [--record=FILE] ...\n\n"
      "Flags may be spelled with dashes (--openb-nodes) or underscores (--openb_nodes).\n"
      "Trace format and mappings: docs/replay.md. Exit 0 ok, 1 audit found a violation, 2 error.");
  // The documented spelling is --openb-nodes; Abseil's flag names use underscores.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> fixed;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string& a = args[i];
    if (i > 0 && a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t end = std::min(a.find('='), a.size());
      for (size_t k = 2; k < end; ++k) {
        if (a[k] == '-') a[k] = '_';
      }
    }
    fixed.push_back(a.data());
  }
  absl::ParseCommandLine(static_cast<int>(fixed.size()), fixed.data());
  return gse::replay::Main();
}
