// ServedExtender: the extender as main.cc wires it for a live cluster, in this process, against
// a FakeApiServer: a Mirror fed by LiveCluster (reflector, ApiBinder and its write limiter; no
// leader election), ExtenderService with its metrics and a silent decision log, HttpServer on a
// free loopback port. For the tests and benchmarks that drive the served extender as
// kube-scheduler does (tests/bind_starvation_test.cc, perf/bind_burst_bench.cc).
// Thread-safe as its parts are; Start and the destructor from the owner.
#ifndef GSE_TESTSUPPORT_SERVED_EXTENDER_H_
#define GSE_TESTSUPPORT_SERVED_EXTENDER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "extender/http_server.h"
#include "extender/live_cluster.h"
#include "extender/metrics.h"
#include "state/mirror.h"
#include "testsupport/fake_apiserver.h"

namespace gse::testing {

struct ServedExtenderOptions {
  KubeClientOptions client;  // write_qps, write_burst, timeouts
  ApiBinderOptions binder;   // deadline (--bind-timeout), attempt timeout
  HttpServerOptions http;    // host and port are forced to 127.0.0.1 and a free port
  std::string policy = "affinity-pack";
  // --takeover-requeue. Off here: its PATCHes of pending pods share the write limiter with the
  // binds, and the tests and the benchmark that use this measure the binds' pacing alone.
  bool takeover_requeue = false;
};

class ServedExtender {
 public:
  // Connects to `api` (which must outlive the extender) and starts serving; ready once the
  // initial lists are applied (WaitReady).
  static absl::StatusOr<std::unique_ptr<ServedExtender>> Start(const FakeApiServer& api,
                                                               ServedExtenderOptions options);
  ~ServedExtender();  // stops serving (in-flight requests answered), then the live cluster

  bool WaitReady(absl::Duration timeout);

  int port() const { return server_->port(); }
  HttpServer& server() { return *server_; }
  LiveCluster& live() { return *live_; }
  Mirror& mirror() { return *mirror_; }
  ExtenderService& service() { return *service_; }
  ExtenderMetrics& metrics() { return metrics_; }

 private:
  ServedExtender() = default;
  ScratchDir dir_;  // the kubeconfig
  ExtenderMetrics metrics_;
  DecisionLog quiet_{DecisionLogLevel::kOff, [](absl::string_view) {}};
  std::unique_ptr<Mirror> mirror_;
  std::unique_ptr<LiveCluster> live_;
  std::unique_ptr<ExtenderService> service_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace gse::testing

#endif  // GSE_TESTSUPPORT_SERVED_EXTENDER_H_
