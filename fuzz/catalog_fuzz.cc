// libFuzzer target: GPU catalog documents (state/catalog.h), YAML or JSON, as --catalog reads
// them.
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report, no unbounded allocation (the document limits hold);
//  * an accepted catalog passes the same validation when built in code (Parse and
//    FromOfferings share their rules), with the same offerings in the same order;
//  * a mirror on an accepted catalog takes the demo cluster with a clean recount (its derived
//    tables agree with its units, whatever the offerings say).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;

  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Catalog> catalog = Catalog::Parse(input);
  if (!catalog.ok()) {
    fuzz::Check(catalog.status().code() == absl::StatusCode::kInvalidArgument,
                "a refused catalog is InvalidArgument", catalog.status().ToString());
    return 0;
  }
  absl::StatusOr<Catalog> rebuilt = Catalog::FromOfferings(catalog->offerings());
  fuzz::Check(rebuilt.ok(), "FromOfferings accepts what Parse accepted",
              rebuilt.status().ToString());
  fuzz::Check(rebuilt->size() == catalog->size(), "FromOfferings keeps every offering");
  for (size_t i = 0; i < catalog->size(); ++i) {
    const Offering& a = catalog->offerings()[i];
    const Offering& b = rebuilt->offerings()[i];
    fuzz::Check(a.resource == b.resource && a.aliases == b.aliases && a.unit == b.unit &&
                    a.sharing == b.sharing && a.replicas == b.replicas &&
                    a.quota_key == b.quota_key && a.node_selector == b.node_selector,
                "FromOfferings keeps each offering as it is", a.resource);
  }

  Mirror mirror(std::make_shared<const Catalog>(*std::move(catalog)), MirrorOptions{});
  mirror.ReplaceAll(fuzz::DemoCluster(), absl::Now());
  fuzz::CheckRecount(mirror);
  return 0;
}
