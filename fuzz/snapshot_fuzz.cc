// libFuzzer target: snapshot documents (--snapshot, `kubectl get ... -o json`) decoded and
// applied to a mirror, both as a whole (Mirror::ReplaceAll, what start-up and a relist do) and
// object by object on top of the demo cluster (what watch events do).
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report;
//  * a refused document is InvalidArgument (the binary then refuses to start);
//  * whatever facts an accepted document states, the mirror's derived tables agree with a
//    recount (Audit's stale_summaries) and /debug/state is strict JSON.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/clock.h"
#include "absl/strings/string_view.h"
#include "extender/extender_service.h"
#include "fuzz/fuzz_check.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

void CheckMirror(Mirror& mirror) {
  fuzz::CheckRecount(mirror);
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy("affinity-pack");
  fuzz::Check(policy.ok(), "the default policy exists");
  RecordOnlyBinder binder;
  ExtenderService service(&mirror, *std::move(policy), &binder);
  fuzz::CheckStrictJson("/debug/state is strict JSON", service.DebugStateJson());
}

}  // namespace
}  // namespace gse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;

  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ObjectBatch> batch = DecodeObjects(input);
  if (!batch.ok()) {
    fuzz::Check(batch.status().code() == absl::StatusCode::kInvalidArgument,
                "a refused snapshot is InvalidArgument", batch.status().ToString());
    return 0;
  }

  Mirror whole(fuzz::BuiltInCatalog(), MirrorOptions{});
  whole.ReplaceAll(*batch, absl::Now());
  CheckMirror(whole);

  Mirror incremental(fuzz::BuiltInCatalog(), MirrorOptions{});
  incremental.ReplaceAll(fuzz::DemoCluster(), absl::Now());
  incremental.Write([&](ClusterState& s) {
    for (const NamespaceObject& ns : batch->namespaces) s.ApplyNamespace(ns);
    for (const ResourceQuotaObject& q : batch->quotas) s.ApplyQuota(q);
    for (const NodeObject& n : batch->nodes) s.ApplyNode(n);
    for (const PodObject& p : batch->pods) s.ApplyPod(p);
    return 0;
  });
  CheckMirror(incremental);
  return 0;
}
