// libFuzzer target: the static quota file (state/static_quota.h, --quota-file) against the
// built-in catalog.
//
// Properties, each a crash when broken:
//  * no crash, no sanitizer report;
//  * a refused file is InvalidArgument and its message starts with "quota file: ";
//  * an accepted file holds only known quota keys and non-negative whole quantities, and a
//    mirror with those quotas takes the demo cluster with a clean recount.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/clock.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "fuzz/fuzz_check.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"
#include "state/static_quota.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gse;

  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<StaticQuotas> quotas = ParseStaticQuotas(input, *fuzz::BuiltInCatalog());
  if (!quotas.ok()) {
    fuzz::Check(quotas.status().code() == absl::StatusCode::kInvalidArgument &&
                    absl::StartsWith(quotas.status().message(), "quota file: "),
                "a refused quota file is InvalidArgument naming the file",
                quotas.status().ToString());
    return 0;
  }
  for (const auto& [project, hard] : *quotas) {
    fuzz::Check(!project.empty() && project.size() <= kMaxNameBytes, "project names are bounded");
    for (const auto& [key, milli] : hard) {
      fuzz::Check(milli >= 0 && milli % 1000 == 0, "quotas are whole and non-negative", key);
    }
  }
  MirrorOptions options;
  options.static_quotas = *std::move(quotas);
  Mirror mirror(fuzz::BuiltInCatalog(), std::move(options));
  mirror.ReplaceAll(fuzz::DemoCluster(), absl::Now());
  fuzz::CheckRecount(mirror);
  return 0;
}
