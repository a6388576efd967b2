// What the fuzz targets share: a check that turns a broken property into a crash that
// libFuzzer records (with the input that caused it), the strict-JSON check of outputs, the
// demo cluster and built-in catalog they apply inputs to, and the mirror's recount check.
#ifndef GSE_FUZZ_FUZZ_CHECK_H_
#define GSE_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "extender/demo_snapshot.h"
#include "rapidjson/document.h"
#include "state/catalog.h"
#include "state/cluster_state.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace fuzz {

// A property the target checks failed: print what and why, then abort so that libFuzzer
// writes the input as a crash artifact.
[[noreturn]] inline void Fail(absl::string_view property, absl::string_view detail) {
  std::fprintf(stderr, "fuzz property violated: %.*s\n%.*s\n", static_cast<int>(property.size()),
               property.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline void Check(bool ok, absl::string_view property, absl::string_view detail = "") {
  if (!ok) Fail(property, detail);
}

// Everything we write for others to read (answers, /debug/state, decision log lines) must be
// strict JSON, whatever bytes came in.
inline void CheckStrictJson(absl::string_view what, absl::string_view text) {
  rapidjson::Document doc;
  const absl::Status s = ParseJsonLimited(text, doc);
  if (!s.ok()) Fail(what, std::string(s.message()) + "\n" + std::string(text.substr(0, 2000)));
}

// The embedded demo cluster, decoded once.
inline const ObjectBatch& DemoCluster() {
  static const ObjectBatch* demo = [] {
    absl::StatusOr<ObjectBatch> batch = DecodeObjects(DemoSnapshotJson());
    if (!batch.ok()) Fail("the demo cluster decodes", batch.status().ToString());
    return new ObjectBatch(*std::move(batch));
  }();
  return *demo;
}

inline const std::shared_ptr<const Catalog>& BuiltInCatalog() {
  static const auto* catalog =
      new std::shared_ptr<const Catalog>(std::make_shared<const Catalog>(Catalog::BuiltIn()));
  return *catalog;
}

// The mirror's derived tables agree with a recount of its units (Audit's stale_summaries).
inline void CheckRecount(const Mirror& mirror) {
  const AuditReport audit = mirror.Read([](const ClusterState& s) { return s.Audit(); });
  Check(audit.stale_summaries == 0, "derived tables agree with a recount",
        audit.problems.empty() ? "" : audit.problems.front());
}

}  // namespace fuzz
}  // namespace gse

#endif  // GSE_FUZZ_FUZZ_CHECK_H_
