// An extender wired as main.cc wires it against a cluster (LiveCluster feeding a Mirror, an
// ExtenderService binding through the cluster's binder), in the test's process, with
// timings short enough for tests. Shared by the suites that drive it against the local API
// server (live_cluster_test, live_dra_test).
#ifndef GSE_TESTS_TESTING_LIVE_EXTENDER_H_
#define GSE_TESTS_TESTING_LIVE_EXTENDER_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "extender/extender_service.h"
#include "extender/live_cluster.h"
#include "state/mirror.h"

namespace gse::testing {

struct LiveExtender {
  std::unique_ptr<Mirror> mirror;
  std::unique_ptr<LiveCluster> live;
  std::unique_ptr<ExtenderService> service;
  ~LiveExtender() {
    if (live) live->Stop();
  }
};

// Options for `kubeconfig` with a test's timings: two quick connect attempts, an unthrottled
// client, 5 s watches without resync, fast reflector backoff, and a bind deadline of
// `bind_deadline` (each attempt a third of it).
LiveClusterOptions FastLiveOptions(const std::string& kubeconfig,
                                   absl::Duration bind_deadline = absl::Milliseconds(1500));

// Connects (a failure is a test failure and returns nullptr) and starts an affinity-pack
// service on the built-in catalog; in DRA mode bind reads the pod's claim name as main.cc's
// service does.
std::unique_ptr<LiveExtender> StartLiveExtender(LiveClusterOptions options);

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_LIVE_EXTENDER_H_
