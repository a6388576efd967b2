// gpu-slice-extender: the kube-scheduler extender binary.
//
// Loads a GPU catalog (built-in by default) and a cluster snapshot (the embedded demo cluster
// by default; with --kubeconfig or in a pod, the Kubernetes API instead), builds the mirror,
// and serves the extender verbs, health, metrics and debug state over HTTP or HTTPS until
// SIGTERM/SIGINT. Then it stops deciding, lets the binds in flight finish, releases the leader
// Lease (LiveCluster::Stop), answers the requests in flight and exits 0.
//
// Exit codes: 0 after a signal-initiated stop, 2 for any configuration error (every message
// names the flag and the value or file), 1 when the server fails while running.
//
// `gpu-slice-extender catalog render|check ...` is a separate tool on the same binary
// (tools/catalog_command.h), dispatched before anything of the server runs.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "extender/demo_snapshot.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "extender/live_cluster.h"
#include "extender/metrics.h"
#include "extender/mirror_metrics.h"
#include "extender/task_mix_metrics.h"
#include "scoring/fragmentation_policy.h"
#include "scoring/policies.h"
#include "scoring/task_mix.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "state/input_file.h"
#include "state/static_quota.h"
#include "tools/catalog_command.h"

#ifndef GSE_VERSION
#define GSE_VERSION "unknown"
#endif
#ifndef GSE_GIT_REVISION
#define GSE_GIT_REVISION "unknown"
#endif

ABSL_FLAG(std::string, listen, "127.0.0.1:8888",
          "HOST:PORT to serve on: an IPv4 address or host name, or [IPv6]:PORT; 0.0.0.0 listens "
          "on every interface, port 0 picks a free port (printed at start-up)");
ABSL_FLAG(std::string, prefix, "",
          "URL path prefix of the verbs: the path of kube-scheduler's urlPrefix, e.g. "
          "/gpu-extender serves POST /gpu-extender/filter (health and metrics stay at /)");
ABSL_FLAG(std::string, catalog, "",
          "GPU catalog file (YAML or JSON); empty = the built-in catalog");
ABSL_FLAG(std::string, snapshot, "",
          "cluster snapshot: the output of `kubectl get nodes,pods,namespaces,resourcequotas "
          "-A -o json`; empty = the embedded demo cluster (examples/demo-cluster.json)");
ABSL_FLAG(std::string, policy, "fgd", "placement policy (see the error for the list)");
ABSL_FLAG(std::string, fgd_task_mix, "",
          "--policy=fgd: the task mix to start from, a JSON file {\"tasks\":[{\"resource\":..., "
          "\"amount\":1, \"weight\":1, \"cpu\":\"8\", \"memory\":\"32Gi\"}]} (docs/fgd.md); empty = "
          "one class per catalog offering. The mix then follows the pods seen");
ABSL_FLAG(int32_t, fgd_half_life, 2000,
          "--policy=fgd: pods after which a pod seen counts half in the learned task mix "
          "(1-1000000)");
ABSL_FLAG(bool, score_all_pods, false,
          "prioritize lets the policy score pods that ask for no catalog resource, for a "
          "KubeSchedulerConfiguration whose extender entry has no managedResources (kube-scheduler "
          "then sends every pod; scheduler-config/all-pods.yaml): fgd scores how their cpu and "
          "memory change the fragmentation of each node's idle GPUs, other policies score 0. "
          "false: they score 0 on every node. Filter passes them and bind binds them without "
          "units either way");
ABSL_FLAG(int32_t, threads, 0,
          "HTTP worker threads kept ready; each serves one connection for its whole keep-alive "
          "life, and one more is started for a connection that finds none idle, up to "
          "--threads + --max-concurrent-binds (extra ones end after 60s idle). Binds never hold "
          "more than --max-concurrent-binds of them, so at least --threads serve filter, "
          "prioritize, preempt and probes; 0 = max(64, 4 x CPUs)");
ABSL_FLAG(int32_t, max_concurrent_binds, 1024,
          "binds served at once (each holds a worker while it waits for the API server); a "
          "bind beyond this is answered at once as not attempted (not bound; kube-scheduler "
          "retries it); 1-65536");
ABSL_FLAG(int32_t, bind_nice, 10,
          "binds run on threads of their own whose nice value is this much higher than the "
          "rest of the extender's (at most 19), so that on a busy machine filter, prioritize "
          "and preempt get the CPU first; 0 = binds run at the same priority; 0-19");
ABSL_FLAG(int64_t, max_body_bytes, int64_t{64} << 20,
          "largest request body accepted (decoded); larger ones get 413");
ABSL_FLAG(absl::Duration, read_timeout, absl::Seconds(10),
          "how long a client may take to send a request");
ABSL_FLAG(absl::Duration, write_timeout, absl::Seconds(10),
          "how long a client may take to receive an answer");
ABSL_FLAG(absl::Duration, keep_alive_timeout, absl::Seconds(5),
          "idle time after which a keep-alive connection is closed and its thread freed "
          "(whole seconds, rounded up)");
ABSL_FLAG(absl::Duration, audit_interval, absl::Seconds(10),
          "how often the mirror gauges and the invariant audit in /metrics are refreshed");
ABSL_FLAG(absl::Duration, agent_gate_timeout, absl::Seconds(120),
          "longest wait, counted from the binding, for a node agent to confirm a pod "
          "(gpu.themelio.io/allocated) before the per-node gate lets pods of other units onto "
          "that node (docs/agent.md); each such timeout counts in "
          "gse_agent_gate_timeouts_total");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate: serve HTTPS (needs --tls-key)");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, client_ca, "",
          "PEM CA certificate(s): require client certificates signed by them (HTTPS only)");
ABSL_FLAG(std::string, project_label, "gpu.themelio.io/project",
          "namespace label whose value names a namespace's project (quota tenant); namespaces "
          "without it are their own project");
ABSL_FLAG(std::string, quota_file, "",
          "static quota file (JSON: {\"projects\": {\"<project>\": {\"requests.<resource>\": "
          "\"<quantity>\"}}}, counted as in a ResourceQuota): per-project quotas besides the "
          "cluster's ResourceQuotas; where both apply the tighter one counts");
ABSL_FLAG(std::string, default_quota, "unlimited",
          "quota of a project for an offering that no ResourceQuota names: \"unlimited\", or "
          "\"zero\" (only projects with a ResourceQuota entry get GPUs)");

namespace gse {
namespace {

constexpr int kExitConfig = 2;
constexpr int kExitRuntime = 1;

// Flags in the order --help lists them.
const char* const kFlagOrder[] = {
    "listen",         "prefix",         "catalog",      "snapshot",      "policy",
    "fgd_task_mix",   "fgd_half_life",  "score_all_pods",
    "threads",        "max_concurrent_binds", "bind_nice", "max_body_bytes", "read_timeout", "write_timeout",
    "keep_alive_timeout", "audit_interval", "agent_gate_timeout", "tls_cert",  "tls_key",      "client_ca",
    "project_label",  "quota_file",     "default_quota"};

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

[[noreturn]] void Fail(int code, absl::string_view message) {
  std::fprintf(stderr, "gpu-slice-extender: %.*s\n", static_cast<int>(message.size()),
               message.data());
  std::exit(code);
}

std::string Version() { return absl::StrCat(GSE_VERSION, " (", GSE_GIT_REVISION, ")"); }

// Flags of this program, as opposed to Abseil's own (--flagfile, --fromenv, ...): the ones
// listed first, then any other flag defined outside Abseil, by name.
std::vector<absl::CommandLineFlag*> OurFlags() {
  std::vector<absl::CommandLineFlag*> out;
  for (const char* name : kFlagOrder) {
    if (absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) out.push_back(flag);
  }
  std::vector<absl::CommandLineFlag*> more;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::StrContains(flag->Filename(), "absl/")) continue;
    if (std::find(out.begin(), out.end(), flag) == out.end()) more.push_back(flag);
  }
  std::sort(more.begin(), more.end(),
            [](const absl::CommandLineFlag* a, const absl::CommandLineFlag* b) {
              return a->Name() < b->Name();
            });
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

void PrintUsage() {
  std::string out = absl::StrCat(
      "gpu-slice-extender ", Version(),
      ": a kube-scheduler extender that places GPU pods on whole GPUs, MIG slices and\n"
      "time-sliced replicas, one project per time-sliced slice, within the projects' quotas.\n\n"
      "Usage: gpu-slice-extender [--flag=value ...]\n"
      "       gpu-slice-extender catalog render|check ...   (see: gpu-slice-extender catalog "
      "--help)\n\nFlags:\n");
  for (const absl::CommandLineFlag* flag : OurFlags()) {
    const std::string name(flag->Name());
    std::string help = flag->Help();
    if (name == "policy") {
      help = absl::StrCat("placement policy: ", absl::StrJoin(ServicePolicyNames(), " | "),
                          " (fgd: fragmentation-aware, with the nodes' free cpu/memory; "
                          "docs/fgd.md)");
    }
    absl::StrAppend(&out, "  --", Dashed(name), "\n      ", help, "\n      (default: \"",
                    flag->DefaultValue(), "\")\n");
  }
  absl::StrAppend(&out,
                  "  --help     this text\n  --version  print the version\n\n"
                  "Flags take --name=value or --name value; '_' and '-' are the same in names.\n");
  std::fputs(out.c_str(), stdout);
}

// absl names flags with underscores and exits 1 on a bad flag; users type dashes (like every
// Kubernetes component) and a configuration error must exit 2 naming the flag as typed. So
// each argument is checked here first and rewritten to "--name_with_underscores=value"
// before absl::ParseCommandLine sees it.
std::vector<std::string> NormalizeArgs(int argc, char** argv) {
  const std::vector<absl::CommandLineFlag*> ours = OurFlags();
  std::vector<std::string> out = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      if (i + 1 < argc)
        Fail(kExitConfig, absl::StrCat("unexpected argument \"", argv[i + 1], "\""));
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      Fail(kExitConfig,
           absl::StrCat("unexpected argument \"", arg, "\" (flags are --name=value; see --help)"));
    }
    const size_t dashes = arg[1] == '-' ? 2 : 1;
    const size_t eq = arg.find('=');
    const std::string typed = arg.substr(0, eq);
    std::string name = absl::StrReplaceAll(
        arg.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes),
        {{"-", "_"}});
    if (name == "help" || name == "h" || name == "helpfull" || name == "helpshort") {
      PrintUsage();
      std::exit(0);
    }
    if (name == "version") {
      std::printf("gpu-slice-extender %s\n", Version().c_str());
      std::exit(0);
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string value;
    if (flag == nullptr && eq == std::string::npos && absl::StartsWith(name, "no")) {
      // --nofoo for a boolean --foo
      flag = absl::FindCommandLineFlag(name.substr(2));
      if (flag != nullptr && !flag->IsOfType<bool>()) flag = nullptr;
      if (flag != nullptr) {
        name = name.substr(2);
        value = "false";
      }
    }
    if (flag == nullptr) {
      Fail(kExitConfig, absl::StrCat("unknown flag ", typed, " (see --help)"));
    }
    if (!value.empty()) {
      // set above
    } else if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      Fail(kExitConfig, absl::StrCat("flag ", typed, " needs a value: ", typed, "=VALUE"));
    }
    if (std::find(ours.begin(), ours.end(), flag) != ours.end()) {
      std::string error;
      if (!flag->ParseFrom(value, &error)) {
        Fail(kExitConfig, absl::StrCat("--", Dashed(name), "=\"", value, "\": ", error));
      }
    }
    out.push_back(absl::StrCat("--", name, "=", value));
  }
  return out;
}

// A Kubernetes label key: [prefix/]name, name 1-63 of [A-Za-z0-9-_.] starting and ending
// alphanumeric, prefix a DNS subdomain of at most 253 characters.
absl::Status CheckLabelKey(absl::string_view key) {
  const std::string what = absl::StrCat("--project-label=\"", key, "\": ");
  if (key.empty()) return absl::InvalidArgumentError(what + "must not be empty");
  absl::string_view name = key;
  const size_t slash = key.find('/');
  if (slash != absl::string_view::npos) {
    absl::string_view prefix = key.substr(0, slash);
    name = key.substr(slash + 1);
    if (prefix.empty() || prefix.size() > 253 ||
        !std::all_of(prefix.begin(), prefix.end(), [](char c) {
          return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '.';
        })) {
      return absl::InvalidArgumentError(
          what + "the prefix before '/' must be a DNS subdomain (lower-case, digits, '-', '.')");
    }
  }
  auto alnum = [](char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); };
  if (name.empty() || name.size() > 63 || !alnum(name.front()) || !alnum(name.back()) ||
      !std::all_of(name.begin(), name.end(),
                   [&](char c) { return alnum(c) || c == '-' || c == '_' || c == '.'; })) {
    return absl::InvalidArgumentError(
        what +
        "the name must be 1-63 letters, digits, '-', '_' or '.', starting and ending "
        "with a letter or digit");
  }
  return absl::OkStatus();
}

struct Config {
  std::shared_ptr<const Catalog> catalog;
  std::string catalog_source;
  ObjectBatch snapshot;
  std::string snapshot_source;
  std::unique_ptr<PlacementPolicy> policy;
  MirrorOptions mirror_options;
  HttpServerOptions http;
  absl::Duration audit_interval;
  absl::Duration agent_gate_timeout;
  bool score_all_pods = false;
};

// --policy with its fgd flags (--fgd-task-mix, --fgd-half-life) over `catalog`.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> LoadPolicy(std::shared_ptr<const Catalog> catalog) {
  const std::string policy_name = absl::GetFlag(FLAGS_policy);
  const std::vector<std::string> names = ServicePolicyNames();
  if (std::find(names.begin(), names.end(), policy_name) == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy=\"", policy_name,
                     "\": unknown policy; valid policies: ", absl::StrJoin(names, ", ")));
  }
  ServicePolicyOptions policy_options;
  const int32_t half_life = absl::GetFlag(FLAGS_fgd_half_life);
  if (half_life < 1 || half_life > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fgd-half-life=", half_life, ": want 1 to 1000000 pods"));
  }
  policy_options.fgd_mix.half_life_pods = half_life;
  const std::string mix_file = absl::GetFlag(FLAGS_fgd_task_mix);
  if (!mix_file.empty()) {
    absl::StatusOr<std::string> text = ReadFlagFile("--fgd-task-mix", mix_file);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<TaskClass>> mix = ParseTaskMix(*text);
    if (!mix.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fgd-task-mix=", mix_file, ": ", mix.status().message()));
    }
    policy_options.fgd_seed = *std::move(mix);
  }
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy =
      MakeServicePolicy(policy_name, std::move(catalog), std::move(policy_options));
  if (!policy.ok()) {
    // The seed is what a valid name can still fail on: name the file that gave it.
    return absl::InvalidArgumentError(absl::StrCat(
        mix_file.empty() ? absl::StrCat("--policy=", policy_name) : absl::StrCat("--fgd-task-mix=", mix_file),
        ": ", policy.status().message()));
  }
  return policy;
}

absl::StatusOr<Config> LoadConfig() {
  Config c;
  absl::StatusOr<ListenAddress> listen = ParseListenAddress(absl::GetFlag(FLAGS_listen));
  if (!listen.ok()) return listen.status();
  c.http.host = listen->host;
  c.http.port = listen->port;
  absl::StatusOr<std::string> prefix = NormalizePrefix(absl::GetFlag(FLAGS_prefix));
  if (!prefix.ok()) return prefix.status();
  c.http.prefix = *prefix;

  const int32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads=", threads, ": want 1-4096, or 0 for the default"));
  }
  c.http.threads = threads;
  const int32_t max_binds = absl::GetFlag(FLAGS_max_concurrent_binds);
  if (max_binds < 1 || max_binds > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-concurrent-binds=", max_binds, ": want 1-65536"));
  }
  c.http.max_concurrent_binds = max_binds;
  const int32_t bind_nice = absl::GetFlag(FLAGS_bind_nice);
  if (bind_nice < 0 || bind_nice > 19) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bind-nice=", bind_nice, ": want 0-19 (0 = binds at the priority of the other verbs)"));
  }
  c.http.bind_nice = bind_nice;
  const int64_t max_body = absl::GetFlag(FLAGS_max_body_bytes);
  if (max_body <= 0 || static_cast<uint64_t>(max_body) > kMaxJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--max-body-bytes=", max_body, ": want 1-",
                                                   kMaxJsonBytes, " (the JSON decoder's limit)"));
  }
  c.http.max_body_bytes = static_cast<size_t>(max_body);
  const std::pair<const char*, absl::Duration> durations[] = {
      {"--read-timeout", absl::GetFlag(FLAGS_read_timeout)},
      {"--write-timeout", absl::GetFlag(FLAGS_write_timeout)},
      {"--keep-alive-timeout", absl::GetFlag(FLAGS_keep_alive_timeout)},
      {"--audit-interval", absl::GetFlag(FLAGS_audit_interval)},
      {"--agent-gate-timeout", absl::GetFlag(FLAGS_agent_gate_timeout)}};
  for (const auto& [flag, d] : durations) {
    if (d <= absl::ZeroDuration() || d > absl::Hours(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, "=", absl::FormatDuration(d), ": want more than 0s and at most 1h"));
    }
  }
  c.http.read_timeout = absl::GetFlag(FLAGS_read_timeout);
  c.http.write_timeout = absl::GetFlag(FLAGS_write_timeout);
  c.http.keep_alive_timeout = absl::GetFlag(FLAGS_keep_alive_timeout);
  c.audit_interval = absl::GetFlag(FLAGS_audit_interval);
  c.agent_gate_timeout = absl::GetFlag(FLAGS_agent_gate_timeout);
  c.http.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  c.http.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  c.http.tls.client_ca_file = absl::GetFlag(FLAGS_client_ca);
  if (absl::Status s = CheckTlsFiles(c.http.tls); !s.ok()) return s;

  const std::string label = absl::GetFlag(FLAGS_project_label);
  if (absl::Status s = CheckLabelKey(label); !s.ok()) return s;
  c.mirror_options.project_label = label;
  const std::string default_quota = absl::GetFlag(FLAGS_default_quota);
  if (default_quota != "unlimited" && default_quota != "zero") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--default-quota=\"", default_quota, "\": want \"unlimited\" or \"zero\""));
  }
  c.mirror_options.unlimited_without_quota = default_quota == "unlimited";

  const std::string catalog_file = absl::GetFlag(FLAGS_catalog);
  if (catalog_file.empty()) {
    c.catalog = std::make_shared<const Catalog>(Catalog::BuiltIn());
    c.catalog_source = "built-in catalog";
  } else {
    absl::StatusOr<Catalog> catalog = Catalog::LoadFile(catalog_file);
    if (!catalog.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--catalog=", catalog_file, ": ", catalog.status().message()));
    }
    c.catalog = std::make_shared<const Catalog>(std::move(*catalog));
    c.catalog_source = absl::StrCat("catalog ", catalog_file);
  }

  // After the catalog: fgd's task mix comes from it.
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = LoadPolicy(c.catalog);
  if (!policy.ok()) return policy.status();
  c.policy = *std::move(policy);
  c.score_all_pods = absl::GetFlag(FLAGS_score_all_pods);
  // The mirror's window of recent host demand (fgd reads it beside the task mix) spans the
  // same pods as the mix (LoadPolicy checked the value).
  c.mirror_options.host_demand_half_life_pods = absl::GetFlag(FLAGS_fgd_half_life);

  // After the catalog: quota keys are checked against its offerings.
  if (const std::string quota_file = absl::GetFlag(FLAGS_quota_file); !quota_file.empty()) {
    absl::StatusOr<std::string> text = ReadFlagFile("--quota-file", quota_file);
    if (!text.ok()) return text.status();
    absl::StatusOr<StaticQuotas> quotas = ParseStaticQuotas(*text, *c.catalog);
    if (!quotas.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--quota-file=", quota_file, ": ", quotas.status().message()));
    }
    c.mirror_options.static_quotas = *std::move(quotas);
  }

  const std::string snapshot_file = absl::GetFlag(FLAGS_snapshot);
  absl::StatusOr<ObjectBatch> batch;
  if (snapshot_file.empty()) {
    batch = DecodeObjects(DemoSnapshotJson());
    c.snapshot_source = "embedded demo cluster (examples/demo-cluster.json)";
    if (!batch.ok()) {
      return absl::InternalError(
          absl::StrCat("the embedded demo cluster does not decode: ", batch.status().message()));
    }
  } else {
    absl::StatusOr<std::string> text = ReadFlagFile("--snapshot", snapshot_file);
    if (!text.ok()) return text.status();
    batch = DecodeObjects(*text);
    if (!batch.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--snapshot=", snapshot_file, ": ", batch.status().message()));
    }
    c.snapshot_source = absl::StrCat("snapshot ", snapshot_file);
  }
  c.snapshot = std::move(*batch);
  return c;
}

// What the mirror holds, for the start-up banner.
std::string Inventory(const ClusterState& state) {
  struct Count {
    int64_t units = 0, free_units = 0, tickets = 0, free_tickets = 0;
  };
  std::map<std::string, Count> per_offering;
  for (const auto& [name, node] : state.nodes()) {
    for (const NodeOffering& no : node->offerings) {
      if (!no.unusable_reason.empty()) continue;
      const Offering& off = state.catalog().Get(no.offering);
      Count& c = per_offering[off.resource];
      for (const Unit& u : no.units) {
        if (u.draining) continue;
        ++c.units;
        if (u.Empty()) ++c.free_units;
        c.tickets += u.capacity;
        c.free_tickets += u.Free();
      }
    }
  }
  std::vector<std::string> lines;
  for (const auto& [resource, c] : per_offering) {
    const Offering* off = state.catalog().Find(resource);
    if (off != nullptr && off->shared()) {
      lines.push_back(absl::StrCat(
          "    ", resource, ": ", c.units, " units (", c.free_units, " free), ", c.tickets, " ",
          off->sharing == Sharing::kMps ? "shares" : "tickets", " (", c.free_tickets, " free)"));
    } else {
      lines.push_back(
          absl::StrCat("    ", resource, ": ", c.units, " units (", c.free_units, " free)"));
    }
  }
  std::vector<std::string> projects;
  for (size_t i = 0; i < state.project_count(); ++i) {
    projects.push_back(state.project(static_cast<ProjectId>(i)).name);
  }
  std::sort(projects.begin(), projects.end());
  std::string out = absl::StrCat("  nodes: ", state.nodes().size(),
                                 ", pods holding GPUs: ", state.pods().size(), "\n");
  absl::StrAppend(&out, "  projects (", projects.size(),
                  "): ", projects.empty() ? "none" : absl::StrJoin(projects, ", "), "\n");
  absl::StrAppend(&out, "  units per offering:\n",
                  lines.empty() ? "    none" : absl::StrJoin(lines, "\n"), "\n");
  const AuditReport audit = state.Audit();
  if (!audit.problems.empty()) {
    absl::StrAppend(&out, "  WARNING: the snapshot breaks ", audit.problems.size(),
                    " rule(s), e.g. ", audit.problems.front(), "\n");
  }
  return out;
}

// Where the cluster state comes from, for the banner: the API server (live) or a snapshot.
std::string LiveSource(const LiveCluster& live, const LiveClusterOptions& options) {
  std::string out = absl::StrCat("  cluster state: the Kubernetes API server ",
                                 live.client()->config().server, " (",
                                 options.kubeconfig.empty() ? "in-cluster service account"
                                                            : "--kubeconfig " + options.kubeconfig,
                                 "); not ready until the first full list is applied\n");
  if (options.leader_elect) {
    absl::StrAppend(&out, "  leader election: Lease ", options.election.lease_namespace, "/",
                    options.election.lease_name, ", only the leader is ready; take-over after "
                    "at most ", absl::FormatDuration(options.election.lease_duration), " + 1.2 x ",
                    absl::FormatDuration(options.election.retry_period),
                    " after the leader's last renewal\n");
  }
  if (!absl::GetFlag(FLAGS_snapshot).empty()) {
    absl::StrAppend(&out, "  --snapshot is ignored: the API server is the cluster state\n");
  }
  absl::StrAppend(&out, "  DRA mode: ",
                  live.dra() ? "on (DeviceClasses, ResourceSlices and ResourceClaims mirrored; "
                               "docs/dra.md)"
                             : "off",
                  "\n");
  return out;
}

// `live_source` empty: standalone, the snapshot is the whole truth.
std::string Banner(const Config& config, const HttpServer& server, const Mirror& mirror,
                   const PlacementPolicy& policy, const std::string& live_source) {
  std::string out = absl::StrCat("gpu-slice-extender ", Version(), "\n  loaded ",
                                 config.catalog_source, " (", config.catalog->size(),
                                 " offerings)");
  if (live_source.empty()) {
    absl::StrAppend(&out, " and ", config.snapshot_source, "\n");
    absl::StrAppend(&out, mirror.Read([](const ClusterState& s) { return Inventory(s); }));
  } else {
    absl::StrAppend(&out, "\n", live_source);
  }
  absl::StrAppend(&out, "  policy: ", policy.name(),
                  config.score_all_pods ? ", scores pods without a catalog resource too" : "",
                  ", ", server.threads(),
                  " HTTP threads ready (up to ", server.threads() + server.max_concurrent_binds(),
                  "; at most ", server.max_concurrent_binds(), " binds at once)\n");
  // Where a client on this machine reaches the server.
  std::string base = server.BaseUrl();
  for (const char* any : {"//0.0.0.0:", "//[::]:"}) {
    base = absl::StrReplaceAll(base, {{any, "//localhost:"}});
  }
  const std::string root = base.substr(0, base.size() - config.http.prefix.size());
  absl::StrAppend(&out, "serving on ", root, "\n  POST ", config.http.prefix, "/filter ",
                  config.http.prefix, "/prioritize ", config.http.prefix, "/bind ",
                  config.http.prefix, "/preempt\n  GET  /healthz /readyz /metrics /debug/state\n");
  std::string curl = server.tls() ? "curl -sk" : "curl -s";
  if (!config.http.tls.client_ca_file.empty()) {
    absl::StrAppend(&curl, " --cert CLIENT.crt --key CLIENT.key");
  }
  const bool demo = live_source.empty() && config.snapshot_source.rfind("snapshot ", 0) != 0;
  absl::StrAppend(&out, "try it",
                  demo ? "" : " (the example requests name the demo cluster's nodes)", ":\n");
  for (const char* verb : {"filter", "prioritize", "bind"}) {
    absl::StrAppend(&out, "  ", curl, " -XPOST ", base, "/", verb, " -d @examples/", verb,
                    "-request.json\n");
  }
  absl::StrAppend(&out, "  ", curl, " ", root, "/debug/state\n");
  return out;
}

// Leader transitions, leaderless time and the take-over requeue: the increments since the
// last report (the counters only grow).
void ReportFailover(const LiveCluster& live, ExtenderMetrics& metrics, LeadershipStats* reported,
                    PodRequeueCounters* reported_requeue) {
  const LeadershipStats now = live.leadership();
  metrics.ObserveLeaderTransition("acquired", now.acquisitions - reported->acquisitions);
  metrics.ObserveLeaderTransition("lost", now.losses - reported->losses);
  if (now.leaderless_measured > reported->leaderless_measured) {
    metrics.ObserveLeaderless(absl::ToDoubleSeconds(now.leaderless_total -
                                                    reported->leaderless_total),
                              absl::ToDoubleSeconds(now.last_leaderless));
  }
  *reported = now;
  const PodRequeueCounters q = live.requeue_counters();
  const PodRequeueCounters& was = *reported_requeue;
  metrics.ObserveRequeuePods("touched", q.touched - was.touched);
  metrics.ObserveRequeuePods("already", q.already - was.already);
  metrics.ObserveRequeuePods("changed", q.changed - was.changed);
  metrics.ObserveRequeuePods("failed", q.failed - was.failed);
  metrics.ObserveRequeuePasses("completed", q.passes - was.passes);
  metrics.ObserveRequeuePasses("list_failed", q.passes_failed - was.passes_failed);
  metrics.ObserveRequeuePasses("cancelled", q.passes_cancelled - was.passes_cancelled);
  *reported_requeue = q;
}

int Run(int argc, char** argv) {
  // Before anything of the server (signal mask, flags): a different tool on the same binary.
  if (argc >= 2 && std::strcmp(argv[1], "catalog") == 0) {
    return RunCatalogCommand(argc - 1, argv + 1, Version());
  }

  // Signals are taken by one sigwait thread; block them before any other thread exists so
  // that every thread inherits the mask. A peer that closes early must not kill us.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::SetProgramUsageMessage("a kube-scheduler extender for GPU slices; see --help");
  std::vector<std::string> args = NormalizeArgs(argc, argv);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());

  absl::StatusOr<Config> config = LoadConfig();
  if (!config.ok()) Fail(kExitConfig, config.status().message());

  Mirror mirror(config->catalog, config->mirror_options);
  ExtenderMetrics metrics;
  MirrorMetrics mirror_metrics(metrics.registry(), &mirror);
  // Live cluster (--kubeconfig, or in a pod): the API server is the truth; the mirror is
  // built from its lists before the first decision (the service is not ready until then).
  std::unique_ptr<LiveCluster> live;
  std::string live_source;  // for the banner
  if (LiveClusterRequested()) {
    absl::StatusOr<LiveClusterOptions> live_options = LiveClusterOptionsFromFlags();
    if (!live_options.ok()) Fail(kExitConfig, live_options.status().message());
    live_options->on_state = [&mirror_metrics](bool synced, bool leader) {
      mirror_metrics.SetSynced(synced);
      mirror_metrics.SetLeader(leader);
    };
    live_options->on_api_write = [&metrics](absl::string_view op, bool sent,
                                            absl::Duration waited) {
      metrics.ObserveApiWrite(op, sent, waited);
    };
    const LiveClusterOptions banner_options = *live_options;
    absl::StatusOr<std::unique_ptr<LiveCluster>> connected =
        LiveCluster::Connect(*std::move(live_options), &mirror);
    if (!connected.ok()) Fail(kExitConfig, connected.status().message());
    live = std::move(*connected);
    live_source = LiveSource(*live, banner_options);
  } else {
    if (absl::StatusOr<LiveClusterOptions> unused = ParseLiveClusterFlags(); !unused.ok()) {
      Fail(kExitConfig, unused.status().message());
    }
    mirror.Write([&](ClusterState& s) { s.ApplyBatch(config->snapshot); });
    mirror_metrics.SetSynced(true);  // the snapshot is the whole truth standalone
    mirror_metrics.SetLeader(true);
  }
  config->snapshot = ObjectBatch();  // applied (or not needed); do not keep a copy
  mirror_metrics.Refresh();
  RecordOnlyBinder record_only;
  ServiceOptions service_options;
  service_options.metrics = &metrics;
  service_options.score_pods_without_offering = config->score_all_pods;
  // DRA mode: bind reads the pod's claim name with one GET (docs/dra.md, "Verify at bind").
  if (live) {
    service_options.dra_claim_name = live->DraClaimNameReader();
    service_options.dra_claim_read = live->DraClaimReader();
  }
  ExtenderService service(&mirror, std::move(config->policy),
                          live ? live->binder() : static_cast<Binder*>(&record_only),
                          service_options);
  if (live) live->Start(&service);
  // fgd's learned task mix as metrics, refreshed with the mirror's.
  std::unique_ptr<TaskMixMetrics> mix_metrics;
  if (const auto* fgd = dynamic_cast<const LearnedFgdPolicy*>(&service.policy())) {
    mix_metrics = std::make_unique<TaskMixMetrics>(metrics.registry(), fgd);
    mix_metrics->Refresh();
  }

  TuneMallocForLargeBodies();
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(&service, &metrics, config->http);
  if (!server.ok()) Fail(kExitConfig, server.status().message());
  (*server)->Start();
  std::fputs(Banner(*config, **server, mirror, service.policy(), live_source).c_str(), stderr);
  std::fflush(stderr);

  // std primitives rather than absl::Notification: ThreadSanitizer understands them without
  // help (Debian's Abseil is not built with TSan).
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  std::atomic<bool> stopping{false};
  std::atomic<int> signal_number{0};
  auto request_stop = [&](int sig) {
    {
      std::lock_guard<std::mutex> lock(stop_mu);
      signal_number.store(sig);
      stopping.store(true);
    }
    stop_cv.notify_all();
  };
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    // Stop deciding at once; the binds in flight finish, then the lease goes to a follower
    // (LiveCluster::Stop); then the HTTP server drains.
    if (live) live->Stop();
    request_stop(sig);
    (*server)->Stop();
  });
  std::thread audit_thread([&] {
    const auto interval =
        std::chrono::microseconds(absl::ToInt64Microseconds(config->audit_interval));
    std::unique_lock<std::mutex> lock(stop_mu);
    ReflectorCounters reported;  // what the metrics already show of the live cluster
    LiveCluster::ApiCallErrors reported_calls;
    LeadershipStats reported_leadership;
    PodRequeueCounters reported_requeue;
    while (!stop_cv.wait_for(lock, interval, [&] { return stopping.load(); })) {
      lock.unlock();
      mirror_metrics.Refresh();
      if (mix_metrics) mix_metrics->Refresh();
      if (live) {
        // The reflector's counters only grow; the metrics take the increments since the
        // last report, per watched kind, per call and per repaired object kind.
        const ReflectorCounters now = live->reflector_counters();
        for (size_t k = 0; k < now.watch_restarts_by_kind.size(); ++k) {
          metrics.ObserveWatchRestart(
              ReflectorCounters::kKinds[k],
              now.watch_restarts_by_kind[k] - reported.watch_restarts_by_kind[k]);
        }
        metrics.ObserveApiError("list", now.list_errors - reported.list_errors);
        metrics.ObserveApiError("watch", now.watch_errors - reported.watch_errors);
        metrics.ObserveDriftRepair("pod", now.pod_repairs - reported.pod_repairs);
        metrics.ObserveDriftRepair("node", now.node_repairs - reported.node_repairs);
        metrics.ObserveDriftRepair("project_quota",
                                   now.project_quota_repairs - reported.project_quota_repairs);
        if (now.last_sync != absl::InfinitePast()) metrics.SetLastSync(now.last_sync);
        reported = now;
        const LiveCluster::ApiCallErrors calls = live->api_call_errors();
        metrics.ObserveApiError("bind", calls.bind - reported_calls.bind);
        metrics.ObserveApiError("get", calls.get - reported_calls.get);
        metrics.ObserveApiError("lease", calls.lease - reported_calls.lease);
        reported_calls = calls;
        ReportFailover(*live, metrics, &reported_leadership, &reported_requeue);
      }
      lock.lock();
    }
  });

  // The per-node gate's timeout (state/agent_gate.cc): ends the waits that are due, at a
  // tenth of the timeout (at most every second), so that a wait lasts at most 1.1 timeouts.
  // The same sweep judges the node agents' liveness (their heartbeat Leases): a dead agent's
  // node is refused within the heartbeat timeout + 1 s.
  std::thread agent_gate_thread([&] {
    const absl::Duration period = std::min(absl::Seconds(1), config->agent_gate_timeout / 10);
    const auto interval = std::chrono::microseconds(absl::ToInt64Microseconds(period));
    std::unique_lock<std::mutex> lock(stop_mu);
    while (!stop_cv.wait_for(lock, interval, [&] { return stopping.load(); })) {
      lock.unlock();
      const auto [ended, waiting] = mirror.ExpireAgentWaits(absl::Now(), config->agent_gate_timeout);
      metrics.ObserveAgentGateTimeouts(ended);
      metrics.SetAgentGateWaitingPods(waiting);
      metrics.SetNodesAgentStale(live ? live->SweepAgentLiveness(absl::Now()) : 0);
      lock.lock();
    }
  });

  // Once stopped, the server answers the requests in flight. Idle keep-alive connections
  // (kube-scheduler keeps some) would hold the workers until their keep-alive timeout; once
  // nothing is in flight they carry no work, so the process exits without waiting for them.
  absl::Time stop_seen = absl::InfinitePast();  // when the main loop first saw the signal
  const absl::Duration drain_limit =
      config->http.read_timeout + config->http.write_timeout + absl::Seconds(5);
  int idle_polls = 0;
  bool finished = false;
  while (!(finished = (*server)->Wait(absl::Milliseconds(50)))) {
    if (!stopping.load()) continue;
    if (stop_seen == absl::InfinitePast()) stop_seen = absl::Now();
    idle_polls = (*server)->InFlight() == 0 ? idle_polls + 1 : 0;
    if (idle_polls >= 2) break;
    if (absl::Now() - stop_seen > drain_limit) {
      std::fprintf(stderr,
                   "gpu-slice-extender: %" PRId64
                   " request(s) still in flight after %s;"
                   " exiting\n",
                   (*server)->InFlight(), absl::FormatDuration(drain_limit).c_str());
      std::fflush(stderr);
      std::_Exit(kExitRuntime);
    }
  }
  if (!stopping.load()) {
    // The accept loop ended without a signal: the listening socket failed.
    std::fprintf(stderr, "gpu-slice-extender: the server stopped unexpectedly\n");
    kill(getpid(), SIGTERM);  // wakes the sigwait thread, which stops everything
    signal_thread.join();
    audit_thread.join();
    agent_gate_thread.join();
    return kExitRuntime;
  }
  const int sig = signal_number.load();
  std::fprintf(stderr, "gpu-slice-extender: %s received, requests in flight answered; stopped\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stderr);
  if (!finished) {
    // Workers still wait on idle keep-alive connections; the kernel closes them at exit.
    std::fflush(stdout);
    std::_Exit(0);
  }
  signal_thread.join();
  audit_thread.join();
  agent_gate_thread.join();
  return 0;
}

}  // namespace
}  // namespace gse

int main(int argc, char** argv) { return gse::Run(argc, argv); }
