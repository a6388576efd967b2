// AgentConfig: flag definitions and checks.
#include "agent/agent_config.h"

#include <arpa/inet.h>

#include <cstdlib>

// absl's flag storage reads through a seqlock whose std::atomic_thread_fence GCC rejects in
// ThreadSanitizer builds (-Wtsan); flags are read at start-up only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#include "absl/flags/flag.h"
#pragma GCC diagnostic pop
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kube/agent_leases.h"

ABSL_FLAG(std::string, node_name, "",
          "the Kubernetes Node this agent serves (spec.nodeName of its pods); empty = the "
          "NODE_NAME environment variable (the DaemonSet sets it from spec.nodeName)");
ABSL_FLAG(std::string, kubeconfig, "",
          "kubeconfig file to reach the API server; empty = the pod's service account "
          "(in-cluster)");
ABSL_FLAG(std::string, resources, "",
          "catalog resources this node's agent serves, comma-separated, each optionally with "
          "its replicas: nvidia.com/mig-1g.5gb.shared=4,nvidia.com/gpu (replicas must equal "
          "the node's <resource>.replicas label that the extender reads)");
ABSL_FLAG(std::string, catalog, "",
          "GPU catalog file (YAML or JSON), the same as the extender's; empty = the built-in "
          "catalog");
ABSL_FLAG(std::string, inventory, "",
          "inventory JSON file instead of NVML (nodes without NVML, tests; format in "
          "docs/agent.md)");
ABSL_FLAG(std::string, nvml_library, "libnvidia-ml.so.1",
          "NVML shared library loaded at run time (ignored with --inventory)");
ABSL_FLAG(std::string, device_plugin_dir, "/var/lib/kubelet/device-plugins",
          "kubelet's device-plugins directory (kubelet.sock and the plugins' sockets)");
ABSL_FLAG(std::string, pod_resources_socket, "/var/lib/kubelet/pod-resources/kubelet.sock",
          "kubelet's pod-resources socket");
ABSL_FLAG(std::string, device_list_strategy, "envvar",
          "how Allocate names the unit to the container runtime: envvar "
          "(NVIDIA_VISIBLE_DEVICES=<uuid>), cdi-annotations, cdi-cri, or a comma-separated "
          "combination");
ABSL_FLAG(std::string, cdi_kind, "nvidia.com/gpu",
          "CDI device kind for the cdi-* strategies (NVIDIA container toolkit's spec)");
ABSL_FLAG(std::string, mps_pipe_directory, "/run/nvidia/mps",
          "MPS control daemon's pipe directory, mounted into MPS containers");
ABSL_FLAG(bool, verify_prestart, true,
          "ask kubelet for PreStartContainer and check there, through pod-resources, that the "
          "container's devices are its pod's annotated unit");
ABSL_FLAG(std::string, listen, "0.0.0.0:8890",
          "HOST:PORT for /metrics and /healthz (IPv4 address or host name, or [IPv6]:PORT)");
ABSL_FLAG(absl::Duration, audit_interval, absl::Seconds(10),
          "how often pod-resources is audited against the unit annotations (also right after "
          "each Allocate)");
ABSL_FLAG(absl::Duration, kubelet_poll, absl::Milliseconds(500),
          "how often the device-plugins directory is checked for a kubelet restart");
ABSL_FLAG(absl::Duration, heartbeat_interval, absl::Seconds(20),
          "how often the agent renews its heartbeat Lease gse-agent-<node> (the extender "
          "refuses the node once no renewal came for its --agent-heartbeat-timeout, 60s by "
          "default: keep this at most a third of that); 1s to 5m");
ABSL_FLAG(std::string, lease_namespace, "",
          "namespace of the heartbeat Lease; empty: $POD_NAMESPACE, else gpu-slice-agent");
ABSL_FLAG(absl::Duration, resync_timeout, absl::Seconds(2),
          "how long Allocate waits for a fresh list of the node's pods when it cannot tell "
          "which pod kubelet is admitting (kubelet itself sets no deadline)");

namespace gse::agent {
namespace {

std::string Dashed(absl::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (c == '_') c = '-';
  }
  return out;
}

template <typename T>
std::string Shown(const T& value) {
  return absl::StrCat(value);
}
template <>
std::string Shown(const absl::Duration& value) {
  return absl::FormatDuration(value);
}

template <typename T>
absl::Status Bad(const char* flag, const T& value, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", Dashed(flag), "=\"", Shown(value), "\": ", why));
}

// A Node name is a DNS subdomain: lower-case alphanumerics, '-' and '.', at most 253, starting
// and ending alphanumeric.
bool IsDnsSubdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-' && c != '.') return false;
  }
  return absl::ascii_isalnum(s.front()) && absl::ascii_isalnum(s.back());
}

absl::Status CheckDuration(const char* flag, absl::Duration d, absl::Duration lo,
                           absl::Duration hi) {
  if (d < lo || d > hi) {
    return Bad(flag, d, absl::StrCat("must be between ", absl::FormatDuration(lo), " and ",
                                     absl::FormatDuration(hi)));
  }
  return absl::OkStatus();
}

absl::Status CheckAbsolutePath(const char* flag, const std::string& path) {
  if (path.empty() || path.front() != '/') return Bad(flag, path, "must be an absolute path");
  if (path.size() > 100) {
    // sockaddr_un.sun_path holds 108 bytes, and plugin sockets get a file name appended.
    return Bad(flag, path, "longer than 100 characters: unix socket paths would not fit");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ListenAddr> ParseListen(absl::string_view listen) {
  const std::string what = absl::StrCat("--listen=\"", listen, "\": ");
  const std::string usage = "want HOST:PORT, e.g. 0.0.0.0:8890 or [::]:8890";
  ListenAddr out;
  absl::string_view port_text;
  if (!listen.empty() && listen.front() == '[') {
    const size_t close = listen.find(']');
    if (close == absl::string_view::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return absl::InvalidArgumentError(what + usage);
    }
    out.host = std::string(listen.substr(1, close - 1));
    port_text = listen.substr(close + 2);
    in6_addr addr;
    if (inet_pton(AF_INET6, out.host.c_str(), &addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(what, "\"", out.host, "\" is not an IPv6 address"));
    }
  } else {
    const size_t colon = listen.rfind(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError(what + usage);
    }
    out.host = std::string(listen.substr(0, colon));
    port_text = listen.substr(colon + 1);
    for (char c : out.host) {
      if (!absl::ascii_isalnum(c) && c != '.' && c != '-') {
        return absl::InvalidArgumentError(
            absl::StrCat(what, "\"", out.host, "\" is not an IPv4 address or host name; ", usage));
      }
    }
  }
  if (!absl::SimpleAtoi(port_text, &out.port) || out.port < 0 || out.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(what, "port must be 0..65535"));
  }
  return out;
}

const std::vector<const char*>& AgentFlagOrder() {
  static const auto* order = new std::vector<const char*>{
      "node_name",          "kubeconfig",           "resources",      "catalog",
      "inventory",          "nvml_library",         "device_plugin_dir", "pod_resources_socket",
      "device_list_strategy", "cdi_kind",           "mps_pipe_directory", "verify_prestart",
      "listen",             "audit_interval",       "kubelet_poll",   "resync_timeout",
      "heartbeat_interval", "lease_namespace"};
  return *order;
}

absl::StatusOr<AgentConfig> AgentConfigFromFlags() {
  AgentConfig c;
  NodeAgentOptions& a = c.agent;

  a.node = absl::GetFlag(FLAGS_node_name);
  if (a.node.empty()) {
    const char* env = std::getenv("NODE_NAME");
    if (env == nullptr || *env == '\0') {
      return absl::InvalidArgumentError(
          "--node-name: missing (and NODE_NAME is not set): the agent must know its Node");
    }
    a.node = env;
  }
  if (!IsDnsSubdomain(a.node)) {
    return Bad("node_name", a.node,
               "not a Node name (a DNS subdomain: lower-case letters, digits, '-' and '.', at "
               "most 253 characters)");
  }

  const std::string resources = absl::GetFlag(FLAGS_resources);
  absl::StatusOr<std::vector<ServedSpec>> served = ParseServedSpecs(resources);
  if (!served.ok()) return served.status();  // names --resources
  a.served = *std::move(served);

  c.kubeconfig = absl::GetFlag(FLAGS_kubeconfig);
  c.catalog_file = absl::GetFlag(FLAGS_catalog);
  c.inventory_file = absl::GetFlag(FLAGS_inventory);
  c.nvml_library = absl::GetFlag(FLAGS_nvml_library);
  if (c.inventory_file.empty() && c.nvml_library.empty()) {
    return Bad("nvml_library", c.nvml_library, "empty (give --inventory=FILE to run without NVML)");
  }

  a.registrar.device_plugin_dir = absl::GetFlag(FLAGS_device_plugin_dir);
  if (absl::Status s = CheckAbsolutePath("device_plugin_dir", a.registrar.device_plugin_dir); !s.ok()) {
    return s;
  }
  a.pod_resources_socket = absl::GetFlag(FLAGS_pod_resources_socket);
  if (absl::Status s = CheckAbsolutePath("pod_resources_socket", a.pod_resources_socket); !s.ok()) {
    return s;
  }

  absl::StatusOr<DeviceListStrategy> strategy =
      ParseDeviceListStrategy(absl::GetFlag(FLAGS_device_list_strategy));
  if (!strategy.ok()) return strategy.status();  // names --device-list-strategy
  a.plugin.strategy = *strategy;
  a.plugin.cdi_kind = absl::GetFlag(FLAGS_cdi_kind);
  {
    // A CDI kind is "<vendor>/<class>" (the CDI spec's fully-qualified kind).
    const std::string& kind = a.plugin.cdi_kind;
    const size_t slash = kind.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == kind.size() ||
        kind.find('/', slash + 1) != std::string::npos || kind.find('=') != std::string::npos ||
        kind.find(',') != std::string::npos) {
      return Bad("cdi_kind", kind, "want <vendor>/<class>, e.g. nvidia.com/gpu");
    }
  }
  a.plugin.mps_pipe_directory = absl::GetFlag(FLAGS_mps_pipe_directory);
  if (a.plugin.mps_pipe_directory.empty() || a.plugin.mps_pipe_directory.front() != '/') {
    return Bad("mps_pipe_directory", a.plugin.mps_pipe_directory, "must be an absolute path");
  }
  a.plugin.pre_start_required = absl::GetFlag(FLAGS_verify_prestart);

  absl::StatusOr<ListenAddr> listen = ParseListen(absl::GetFlag(FLAGS_listen));
  if (!listen.ok()) return listen.status();
  c.listen = *listen;

  const absl::Duration audit = absl::GetFlag(FLAGS_audit_interval);
  if (absl::Status s = CheckDuration("audit_interval", audit, absl::Milliseconds(100), absl::Hours(1));
      !s.ok()) {
    return s;
  }
  a.audit.interval = audit;
  const absl::Duration poll = absl::GetFlag(FLAGS_kubelet_poll);
  if (absl::Status s = CheckDuration("kubelet_poll", poll, absl::Milliseconds(10), absl::Seconds(30));
      !s.ok()) {
    return s;
  }
  a.registrar.poll_interval = poll;
  const absl::Duration resync = absl::GetFlag(FLAGS_resync_timeout);
  if (absl::Status s = CheckDuration("resync_timeout", resync, absl::Milliseconds(50), absl::Seconds(20));
      !s.ok()) {
    return s;
  }
  a.admission.resync_timeout = resync;

  const absl::Duration heartbeat = absl::GetFlag(FLAGS_heartbeat_interval);
  if (absl::Status s = CheckDuration("heartbeat_interval", heartbeat, absl::Seconds(1), absl::Minutes(5));
      !s.ok()) {
    return s;
  }
  a.heartbeat.interval = heartbeat;
  std::string ns = absl::GetFlag(FLAGS_lease_namespace);
  const bool from_flag = !ns.empty();
  if (ns.empty()) {
    const char* env = std::getenv("POD_NAMESPACE");
    ns = env != nullptr && *env != '\0' ? env : "gpu-slice-agent";
  }
  bool ns_ok = ns.size() <= 63 && absl::ascii_isalnum(ns.front()) && absl::ascii_isalnum(ns.back());
  for (char ch : ns) ns_ok = ns_ok && (absl::ascii_islower(ch) || absl::ascii_isdigit(ch) || ch == '-');
  if (!ns_ok) {
    return Bad("lease_namespace", ns,
               absl::StrCat(from_flag ? "" : "(from $POD_NAMESPACE) ",
                            "not a namespace name (1-63 lower-case letters, digits or '-', "
                            "alphanumeric at both ends)"));
  }
  a.heartbeat.lease_namespace = ns;
  if (a.node.size() > kMaxAgentLeaseNode) {
    return Bad("node_name", a.node,
               absl::StrCat("longer than ", kMaxAgentLeaseNode,
                            " characters: its heartbeat Lease name gse-agent-<node> would exceed "
                            "253"));
  }
  const char* pod = std::getenv("POD_NAME");
  a.heartbeat.holder = absl::StrCat(a.node, "/", pod != nullptr && *pod != '\0' ? pod : "gpu-slice-agent");
  return c;
}

}  // namespace gse::agent
