// AgentHttp: /metrics and /healthz.
#include "agent/agent_http.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gse::agent {

AgentHttp::AgentHttp(NodeAgent* agent) : agent_(agent) {}

AgentHttp::~AgentHttp() { Stop(); }

absl::Status AgentHttp::Start(const ListenAddr& listen) {
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  server_->set_tcp_nodelay(true);
  server_->set_read_timeout(10, 0);
  server_->set_write_timeout(10, 0);
  server_->set_keep_alive_timeout(5);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(agent_->MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    std::string why;
    const bool ok = agent_->Healthy(&why);
    res.status = ok ? 200 : 503;
    res.set_content(why + "\n", "text/plain; charset=utf-8");
  });
  if (listen.port == 0) {
    port_ = server_->bind_to_any_port(listen.host);
  } else {
    port_ = server_->bind_to_port(listen.host, listen.port) ? listen.port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("--listen=\"", listen.host, ":", listen.port,
                                               "\": cannot listen there (address in use or not "
                                               "this machine's)"));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  for (int i = 0; i < 1000 && !server_->is_running(); ++i) absl::SleepFor(absl::Milliseconds(2));
  return absl::OkStatus();
}

void AgentHttp::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace gse::agent
