// libFuzzer target: kube-scheduler's extender request bodies through ExtenderService (filter,
// prioritize, bind, preempt), over a small mirror: the embedded demo cluster plus the two
// nodes of ../shared/protocol/nodelist-2-gpu-nodes.json, which the protocol bodies name.
//
// An input is a sequence of up to 8 requests separated by "\n@@"; each starts with its verb's
// letter (f filter, p prioritize, b bind, e preempt) and the rest is the body. A sequence
// lets the fuzzer reach bind's commit point, which needs the pod that filter saw. Every input
// starts from the same fresh mirror, so a crash reproduces from its input alone.
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report;
//  * every answer (any status) and every decision-log line is strict JSON;
//  * a request answered 400, and a bind answered with an Error, leave the mirror unchanged
//    (DebugStateJson before == after);
//  * a bind never adds an oversubscribed or multi-owner unit (the commit point re-checks),
//    and the mirror's derived tables always agree with a recount (Audit's stale_summaries).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "extender/decision_log.h"
#include "extender/extender_service.h"
#include "extender/metrics.h"
#include "fuzz/fuzz_check.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "testsupport/paths.h"

namespace gse {
namespace {

constexpr size_t kMaxRequests = 8;

struct World {
  std::shared_ptr<const Catalog> catalog;
  ObjectBatch cluster;  // demo cluster + protocol nodes
  ExtenderMetrics metrics;
  DecisionLog log{DecisionLogLevel::kAll,
                  [](absl::string_view line) {
                    fuzz::Check(!line.empty() && line.back() == '\n', "decision log line ends in \\n");
                    fuzz::CheckStrictJson("decision log line is strict JSON",
                                          line.substr(0, line.size() - 1));
                  }};
};

World& TheWorld() {
  static World* world = [] {
    auto* w = new World;
    w->catalog = fuzz::BuiltInCatalog();
    // The NodeList as kube-scheduler sends it (no kind), so its items are decoded as Nodes.
    rapidjson::Document list;
    const absl::Status parsed = ParseJsonLimited(
        testing::ReadFileOrDie(testing::SharedPath("protocol/nodelist-2-gpu-nodes.json")), list);
    fuzz::Check(parsed.ok() && list.IsObject() && list.HasMember("items") && list["items"].IsArray(),
                "the protocol node list parses", parsed.ToString());
    w->cluster = fuzz::DemoCluster();
    for (const rapidjson::Value& item : list["items"].GetArray()) {
      absl::StatusOr<NodeObject> node = DecodeNode(item, "items[]");
      fuzz::Check(node.ok(), "the protocol nodes decode", node.status().ToString());
      w->cluster.nodes.push_back(*std::move(node));
    }
    return w;
  }();
  return *world;
}

AuditReport AuditOf(const Mirror& mirror) {
  return mirror.Read([](const ClusterState& s) { return s.Audit(); });
}

void RunRequest(ExtenderService& service, const Mirror& mirror, char verb, std::string body) {
  const std::string before = service.DebugStateJson();
  const AuditReport audit_before = AuditOf(mirror);
  VerbResult r;
  switch (verb) {
    case 'f': r = service.Filter(std::move(body)); break;
    case 'p': r = service.Prioritize(std::move(body)); break;
    case 'b': r = service.Bind(std::move(body)); break;
    case 'e': r = service.Preempt(std::move(body)); break;
    default: return;
  }
  fuzz::CheckStrictJson("every answer is strict JSON", r.body);
  const std::string after = service.DebugStateJson();
  fuzz::CheckStrictJson("/debug/state is strict JSON", after);
  if (r.status == 400 || (verb == 'b' && r.outcome != "ok")) {
    fuzz::Check(before == after, "a refused request leaves the mirror unchanged",
                absl::StrCat(std::string(1, verb), " answered ", r.status, " ", r.body));
  }
  const AuditReport audit = AuditOf(mirror);
  fuzz::Check(audit.stale_summaries == 0, "derived tables agree with a recount",
              absl::StrCat(audit.problems.empty() ? "" : audit.problems.front()));
  if (verb == 'b') {
    fuzz::Check(audit.oversubscribed_units <= audit_before.oversubscribed_units &&
                    audit.multi_owner_units <= audit_before.multi_owner_units,
                "a bind never oversubscribes a unit or gives it a second owner",
                absl::StrCat(r.body, "\n", after));
  }
}

}  // namespace
}  // namespace gse

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;
  World& world = TheWorld();
  Mirror mirror(world.catalog, MirrorOptions{});
  mirror.ReplaceAll(world.cluster, absl::Now());
  absl::StatusOr<std::unique_ptr<PlacementPolicy>> policy = MakePolicy("affinity-pack");
  fuzz::Check(policy.ok(), "the default policy exists");
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.metrics = &world.metrics;
  options.decision_log = &world.log;
  options.max_pending_pods = 16;
  ExtenderService service(&mirror, *std::move(policy), &binder, options);

  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  size_t count = 0;
  for (absl::string_view request : absl::StrSplit(input, "\n@@")) {
    if (++count > kMaxRequests) break;
    if (request.empty()) continue;
    RunRequest(service, mirror, request[0], std::string(request.substr(1)));
  }
  return 0;
}
