// gpu-slice-agent: the node agent binary (docs/agent.md). One per GPU node (a DaemonSet):
// kubelet's device plugin for the node's catalog resources, which gives each container the
// unit annotated on its pod or fails admission visibly, and audits what kubelet handed out.
//
// Start-up: flags (agent/agent_config.h) → catalog → inventory (--inventory file or NVML) →
// API server client (--kubeconfig or the pod's service account) → NodeAgent (pods, plugins,
// audit, health) → /metrics and /healthz on --listen. SIGTERM/SIGINT: stop serving kubelet
// (sockets removed), stop the loops, exit 0.
// Exit codes: 0 after a signal, 2 for a configuration error (the message names the flag and
// the value or file), 1 when something fails while running.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

// absl's flag storage reads through a seqlock whose std::atomic_thread_fence GCC rejects in
// ThreadSanitizer builds (-Wtsan); flags are read at start-up only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#pragma GCC diagnostic pop
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "agent/agent_config.h"
#include "agent/agent_http.h"
#include "agent/agent_log.h"
#include "agent/inventory.h"
#include "agent/node_agent.h"
#include "agent/nvml_library.h"
#include "kube/kube_client.h"
#include "state/catalog.h"

#ifndef GSE_VERSION
#define GSE_VERSION "unknown"
#endif
#ifndef GSE_GIT_REVISION
#define GSE_GIT_REVISION "unknown"
#endif

namespace gse::agent {
namespace {

constexpr int kExitConfig = 2;
constexpr int kExitRuntime = 1;

[[noreturn]] void Fail(int code, absl::string_view message) {
  std::fprintf(stderr, "gpu-slice-agent: %.*s\n", static_cast<int>(message.size()), message.data());
  std::exit(code);
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

void PrintUsage() {
  std::string out = absl::StrCat(
      "gpu-slice-agent ", GSE_VERSION, " (", GSE_GIT_REVISION, ")",
      ": the node agent of gpu-slice-extender. Serves kubelet's device plugins for\n"
      "this node's catalog resources and gives each container the unit (GPU or MIG slice)\n"
      "annotated on its pod, or fails its admission visibly.\n\n"
      "Usage: gpu-slice-agent --resources=R[=replicas],... [--flag=value ...]\n\nFlags:\n");
  for (const char* name : AgentFlagOrder()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    absl::StrAppend(&out, "  --", Dashed(name), "\n      ", flag->Help(), "\n      (default: \"",
                    flag->DefaultValue(), "\")\n");
  }
  absl::StrAppend(&out,
                  "  --help     this text\n  --version  print the version\n\n"
                  "Flags take --name=value or --name value; '_' and '-' are the same in names.\n");
  std::fputs(out.c_str(), stdout);
}

bool OurFlag(const absl::CommandLineFlag* flag) {
  for (const char* name : AgentFlagOrder()) {
    if (flag->Name() == name) return true;
  }
  return false;
}

// Users type dashes (like every Kubernetes component); absl names flags with underscores and
// exits 1 on a bad flag. Each argument is checked here (exit 2 naming the flag as typed) and
// rewritten to "--name_with_underscores=value" for absl::ParseCommandLine.
std::vector<std::string> NormalizeArgs(int argc, char** argv) {
  std::vector<std::string> out = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      Fail(kExitConfig, absl::StrCat("unexpected argument \"", arg, "\" (flags are --name=value; see --help)"));
    }
    const size_t dashes = arg[1] == '-' ? 2 : 1;
    const size_t eq = arg.find('=');
    const std::string typed = arg.substr(0, eq);
    std::string name = absl::StrReplaceAll(
        arg.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes), {{"-", "_"}});
    if (name == "help" || name == "h" || name == "helpfull" || name == "helpshort") {
      PrintUsage();
      std::exit(0);
    }
    if (name == "version") {
      std::printf("gpu-slice-agent %s (%s)\n", GSE_VERSION, GSE_GIT_REVISION);
      std::exit(0);
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string value;
    bool negated = false;
    if ((flag == nullptr || !OurFlag(flag)) && eq == std::string::npos &&
        absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* positive = absl::FindCommandLineFlag(name.substr(2));
      if (positive != nullptr && OurFlag(positive) && positive->IsOfType<bool>()) {
        flag = positive;
        name = name.substr(2);
        value = "false";
        negated = true;
      }
    }
    if (flag == nullptr || !OurFlag(flag)) {
      Fail(kExitConfig, absl::StrCat("unknown flag ", typed, " (see --help)"));
    }
    if (negated) {
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
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      Fail(kExitConfig, absl::StrCat("--", Dashed(name), "=\"", value, "\": ", error));
    }
    out.push_back(absl::StrCat("--", name, "=", value));
  }
  return out;
}

Catalog LoadCatalog(const std::string& file) {
  if (file.empty()) return Catalog::BuiltIn();
  absl::StatusOr<Catalog> catalog = Catalog::LoadFile(file);
  if (!catalog.ok()) Fail(kExitConfig, absl::StrCat("--catalog=\"", file, "\": ", catalog.status().message()));
  return *std::move(catalog);
}

// The inventory, and NVML for health events when it came from NVML.
std::pair<Inventory, std::unique_ptr<NvmlLibrary>> LoadInventory(const AgentConfig& c) {
  if (!c.inventory_file.empty()) {
    absl::StatusOr<Inventory> inv = LoadInventoryFile(c.inventory_file);
    if (!inv.ok()) Fail(kExitConfig, absl::StrCat("--inventory: ", inv.status().message()));
    return {*std::move(inv), nullptr};
  }
  absl::StatusOr<std::unique_ptr<NvmlLibrary>> nvml = NvmlLibrary::Open(c.nvml_library);
  if (!nvml.ok()) Fail(kExitConfig, absl::StrCat("--nvml-library: ", nvml.status().message()));
  absl::StatusOr<Inventory> inv = (*nvml)->ReadInventory();
  if (!inv.ok()) Fail(kExitRuntime, absl::StrCat("reading the inventory from NVML: ", inv.status().message()));
  return {*std::move(inv), *std::move(nvml)};
}

std::unique_ptr<KubeClient> ConnectApiServer(const AgentConfig& c) {
  absl::StatusOr<KubeConfig> config = c.kubeconfig.empty() ? LoadInClusterConfig()
                                                           : LoadKubeconfig(c.kubeconfig);
  if (!config.ok()) {
    Fail(kExitConfig, c.kubeconfig.empty()
                          ? absl::StrCat("--kubeconfig is empty and the in-cluster configuration "
                                         "is unusable: ", config.status().message())
                          : absl::StrCat("--kubeconfig=\"", c.kubeconfig, "\": ", config.status().message()));
  }
  KubeClientOptions options;
  options.user_agent = "gpu-slice-agent";
  absl::StatusOr<std::unique_ptr<KubeClient>> client = KubeClient::Create(*std::move(config), options);
  if (!client.ok()) Fail(kExitConfig, absl::StrCat("API server configuration: ", client.status().message()));
  return *std::move(client);
}

int Run(int argc, char** argv) {
  // Signals are taken by one sigwait thread; block them before any thread exists.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<std::string> args = NormalizeArgs(argc, argv);
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(cargs.size()), cargs.data());

  absl::StatusOr<AgentConfig> config = AgentConfigFromFlags();
  if (!config.ok()) Fail(kExitConfig, config.status().message());
  const Catalog catalog = LoadCatalog(config->catalog_file);
  auto [inventory, nvml] = LoadInventory(*config);
  // The served resources against the catalog and the inventory, before any connection.
  if (absl::Status s = UnitMap::Build(inventory, catalog, config->agent.served).status(); !s.ok()) {
    Fail(kExitConfig, s.message());
  }
  std::unique_ptr<KubeClient> client = ConnectApiServer(*config);
  absl::StatusOr<std::unique_ptr<NodeAgent>> agent =
      NodeAgent::Create(&catalog, client.get(), std::move(inventory), std::move(nvml), config->agent);
  if (!agent.ok()) Fail(kExitConfig, agent.status().message());

  AgentHttp http(agent->get());
  if (absl::Status s = http.Start(config->listen); !s.ok()) Fail(kExitConfig, s.message());
  if (absl::Status s = (*agent)->Start(); !s.ok()) {
    http.Stop();
    Fail(kExitConfig, absl::StrCat("--device-plugin-dir=\"", config->agent.registrar.device_plugin_dir,
                                   "\": ", s.message()));
  }
  LogEvent("serving", {{"listen", absl::StrCat(config->listen.host, ":", http.port())}});

  int sig = 0;
  sigwait(&signals, &sig);
  LogEvent("stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
  (*agent)->Stop();  // plugin sockets go first: kubelet stops calling a dying agent
  http.Stop();
  agent->reset();
  return 0;
}

}  // namespace
}  // namespace gse::agent

int main(int argc, char** argv) { return gse::agent::Run(argc, argv); }
