#include "tests/testing/live_extender.h"

#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "scoring/policies.h"
#include "state/catalog.h"

namespace gse::testing {

LiveClusterOptions FastLiveOptions(const std::string& kubeconfig, absl::Duration bind_deadline) {
  LiveClusterOptions o;
  o.kubeconfig = kubeconfig;
  o.connect_attempts = 2;
  o.connect_backoff = absl::Milliseconds(10);
  o.client.write_qps = 1000;
  o.client.write_burst = 1000;
  o.client.request_timeout = absl::Seconds(3);
  o.reflector.watch_timeout = absl::Seconds(5);
  o.reflector.resync_period = absl::ZeroDuration();
  o.reflector.backoff_initial = absl::Milliseconds(30);
  o.reflector.backoff_max = absl::Milliseconds(300);
  o.reflector.log = [](const std::string&) {};
  o.binder.deadline = bind_deadline;
  o.binder.attempt_timeout = bind_deadline / 3;
  o.binder.retry_backoff = absl::Milliseconds(20);
  return o;
}

std::unique_ptr<LiveExtender> StartLiveExtender(LiveClusterOptions options) {
  auto e = std::make_unique<LiveExtender>();
  e->mirror = std::make_unique<Mirror>(std::make_shared<const Catalog>(Catalog::BuiltIn()),
                                       MirrorOptions());
  absl::StatusOr<std::unique_ptr<LiveCluster>> live =
      LiveCluster::Connect(std::move(options), e->mirror.get());
  EXPECT_TRUE(live.ok()) << live.status();
  if (!live.ok()) return nullptr;
  e->live = std::move(*live);
  ServiceOptions so;
  so.dra_claim_name = e->live->DraClaimNameReader();  // nullptr unless DRA mode is on
  so.dra_claim_read = e->live->DraClaimReader();
  e->service = std::make_unique<ExtenderService>(
      e->mirror.get(), std::move(*MakePolicy("affinity-pack")), e->live->binder(), so);
  e->live->Start(e->service.get());
  return e;
}

}  // namespace gse::testing
