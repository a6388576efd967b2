// HttpPlacer: drives an extender over HTTP exactly as kube-scheduler does, with the cluster
// living in a local Kubernetes API server (testsupport/fake_apiserver.h, the live-cluster
// work's test server, speaking the wire format of kube-apiserver 1.26).
//
//  * Facts (namespaces, quotas, nodes, pod deletions, the node agent's twin placeholders) are
//    written to the API server; the extender learns them through its list+watch, as in a
//    cluster. Every arriving pod is created there (Pending) before it is scheduled.
//  * filter / prioritize bodies carry the Pod and either node names (nodeCacheCapable: true)
//    or full Node objects; bind carries names and the UID. The extender binds through the API
//    server (a v1.Binding with the unit annotations); the placer reads the bound pod back from
//    the API server's store to learn which units were reserved.
//  * Without an extender URL, the placer starts one in this process: a Mirror fed by a
//    KubeReflector, ExtenderService with the run's policy and an ApiBinder, served by
//    HttpServer on a free loopback port.
//  * Sync() waits until the extender has applied every write (watch events applied by the
//    in-process extender's reflector; with --extender, until /debug/state counts the expected
//    pod records), so that a replay with one client is deterministic and places exactly like
//    the in-process mode.
// Thread-safe for concurrent Filter/Prioritize/Bind (one HTTP client per thread).
#ifndef GSE_PERF_REPLAY_HTTP_H_
#define GSE_PERF_REPLAY_HTTP_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "perf/replay_engine.h"

namespace gse::replay {

struct HttpPlacerOptions {
  std::string extender_url;    // "" = start an extender in this process
  std::string kubeconfig_out;  // write the API server's kubeconfig here ("" = don't)
  bool node_cache_capable = true;
  // The extender scores pods without a catalog resource (ReplayOptions::extender_all_pods):
  // the in-process extender is started with ServiceOptions::score_pods_without_offering; an
  // external one (extender_url) must run with --score-all-pods.
  bool score_all_pods = false;
  std::shared_ptr<const Catalog> catalog;
  absl::Duration sync_timeout = absl::Seconds(60);
  absl::Duration extender_ready_timeout = absl::Seconds(120);
};

class HttpPlacer : public Placer {
 public:
  HttpPlacer(HttpPlacerOptions options, std::unique_ptr<PlacementPolicy> policy);
  ~HttpPlacer() override;

  std::string Describe() const override;
  absl::Status Start(const std::string& list_json, const ObjectBatch& batch) override;
  absl::Status Stop() override;
  absl::Status PodCreated(const PodPlan& pod) override;
  absl::StatusOr<FilterAnswer> Filter(const PodPlan& pod, const std::vector<std::string>& candidates) override;
  absl::StatusOr<std::vector<int64_t>> Prioritize(const PodPlan& pod, const std::vector<std::string>& nodes) override;
  absl::StatusOr<Assignment> Bind(const PodPlan& pod, const std::string& node) override;
  absl::Status BindPlain(const PodPlan& pod, const std::string& node) override;
  absl::Status BindWithoutUnits(const PodPlan& pod, const std::string& node) override;
  bool ScoresEveryPod() const override;
  absl::Status ApplyObjects(const std::string& list_json, const ObjectBatch& batch) override;
  absl::Status ApplyNode(const std::string& node_json, const NodeObject& node) override;
  absl::Status RemoveNode(const std::string& name) override;
  absl::Status DeletePod(const std::string& namespace_name, const std::string& name) override;
  absl::Status ApplyBoundPod(const PodObject& pod, const std::string& pod_json) override;
  absl::Status Sync() override;
  std::optional<AuditReport> MirrorAudit() override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace gse::replay

#endif  // GSE_PERF_REPLAY_HTTP_H_
