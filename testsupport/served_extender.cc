// ServedExtender: see served_extender.h.
#include "testsupport/served_extender.h"

#include <utility>

#include "absl/time/clock.h"
#include "scoring/policies.h"
#include "state/catalog.h"

namespace gse::testing {

absl::StatusOr<std::unique_ptr<ServedExtender>> ServedExtender::Start(
    const FakeApiServer& api, ServedExtenderOptions options) {
  std::unique_ptr<ServedExtender> e(new ServedExtender());
  e->dir_.Write("kubeconfig", api.Kubeconfig());
  LiveClusterOptions live;
  live.kubeconfig = e->dir_.File("kubeconfig");
  live.connect_attempts = 2;
  live.connect_backoff = absl::Milliseconds(10);
  live.client = options.client;
  live.binder = options.binder;
  live.requeue = options.takeover_requeue;
  live.reflector.resync_period = absl::ZeroDuration();
  live.reflector.log = [](const std::string&) {};
  ServedExtender* self = e.get();
  live.on_api_write = [self](absl::string_view op, bool sent, absl::Duration waited) {
    self->metrics_.ObserveApiWrite(op, sent, waited);
  };
  e->mirror_ = std::make_unique<Mirror>(std::make_shared<const Catalog>(Catalog::BuiltIn()),
                                        MirrorOptions());
  absl::StatusOr<std::unique_ptr<LiveCluster>> connected =
      LiveCluster::Connect(std::move(live), e->mirror_.get());
  if (!connected.ok()) return connected.status();
  e->live_ = *std::move(connected);
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy(options.policy);
  if (!policy.ok()) return policy.status();
  ServiceOptions service;
  service.metrics = &e->metrics_;
  service.decision_log = &e->quiet_;
  e->service_ = std::make_unique<ExtenderService>(e->mirror_.get(), *std::move(policy),
                                                  e->live_->binder(), service);
  e->live_->Start(e->service_.get());
  options.http.host = "127.0.0.1";
  options.http.port = 0;
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Create(e->service_.get(), &e->metrics_, options.http);
  if (!server.ok()) return server.status();
  e->server_ = *std::move(server);
  e->server_->Start();
  return e;
}

ServedExtender::~ServedExtender() {
  if (server_) {
    server_->Stop();
    server_->Wait(absl::Seconds(30));
  }
  if (live_) live_->Stop();
}

bool ServedExtender::WaitReady(absl::Duration timeout) {
  const absl::Time until = absl::Now() + timeout;
  while (!service_->Ready()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace gse::testing
