// AgentConfig: the gpu-slice-agent's command-line flags (defined in agent_config.cc, next to
// the code that checks them) turned into a checked configuration. Every error names the flag
// as a user types it and the value ("--node-name=\"Node_A\": ..."). Files (catalog,
// inventory, kubeconfig) are only named here; main.cc loads them and prefixes their errors
// with the flag.
// Call after absl::ParseCommandLine; not thread-safe against flag changes (tests set flags and
// call it from one thread).
#ifndef GSE_AGENT_AGENT_CONFIG_H_
#define GSE_AGENT_AGENT_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/node_agent.h"

namespace gse::agent {

struct ListenAddr {
  std::string host;  // brackets removed for IPv6
  int port = 0;
};
// "HOST:PORT" (IPv4 address or host name) or "[IPV6]:PORT", port 0..65535; errors name
// --listen.
absl::StatusOr<ListenAddr> ParseListen(absl::string_view listen);

struct AgentConfig {
  NodeAgentOptions agent;     // node, served, sockets, strategy, intervals
  std::string kubeconfig;     // empty: in-cluster service account
  std::string catalog_file;   // empty: the built-in catalog
  std::string inventory_file; // empty: NVML
  std::string nvml_library;
  ListenAddr listen;
};

absl::StatusOr<AgentConfig> AgentConfigFromFlags();

// The flags of this program in the order --help lists them (names with '_').
const std::vector<const char*>& AgentFlagOrder();

}  // namespace gse::agent

#endif  // GSE_AGENT_AGENT_CONFIG_H_
