// AgentHttp: the agent's own HTTP endpoints (cpp-httplib, plain HTTP):
//   GET /metrics  Prometheus text format (AgentMetrics, via NodeAgent::MetricsText)
//   GET /healthz  200 "ok" when NodeAgent::Healthy, else 503 with what is missing
// Anything else is 404. TCP_NODELAY is on (shared/BUILD-NOTES.md: without it a small answer
// over loopback waits for a delayed ACK). A small fixed thread pool: scrapes and probes are
// rare. Thread-safety: Start/Stop from one thread; handlers run on the pool's threads.
#ifndef GSE_AGENT_AGENT_HTTP_H_
#define GSE_AGENT_AGENT_HTTP_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "agent/agent_config.h"
#include "agent/node_agent.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace gse::agent {

class AgentHttp {
 public:
  // `agent` must outlive the server.
  explicit AgentHttp(NodeAgent* agent);
  ~AgentHttp();
  AgentHttp(const AgentHttp&) = delete;
  AgentHttp& operator=(const AgentHttp&) = delete;

  // Binds (errors name --listen) and serves on a thread of its own.
  absl::Status Start(const ListenAddr& listen);
  void Stop();
  int port() const { return port_; }

 private:
  NodeAgent* agent_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_AGENT_HTTP_H_
