// Static quota file: per-project GPU quotas that do not come from a ResourceQuota (DESIGN.md
// I4, "or from a static quota file"), for clusters that sell capacity to projects outside
// Kubernetes' own quota objects, and for the embedded default.
//
// Format (JSON; `--quota-file=FILE`):
//   {"projects": {"ml-team": {"requests.nvidia.com/mig-1g.5gb.shared": "8",
//                             "requests.nvidia.com/gpu": 2}}}
// Each project maps quota keys to quantities exactly as a ResourceQuota's spec.hard does: the
// key is an offering's quota key (`requests.<resource>`, an alias, or the catalog's quotaKey)
// and the value counts what that key counts (tickets for time-sliced offerings, shares for
// MPS, units otherwise). A project's quota is then the tighter of this file and its
// ResourceQuotas (Kubernetes enforces every quota that applies).
//
// Errors (InvalidArgument) name the JSON path and the reason; nothing is half-loaded.
#ifndef GSE_STATE_STATIC_QUOTA_H_
#define GSE_STATE_STATIC_QUOTA_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "state/catalog.h"

namespace gse {

// project -> quota key -> milli-units (the shape of ResourceQuota spec.hard).
using StaticQuotas = std::map<std::string, std::map<std::string, int64_t>>;

inline constexpr size_t kMaxStaticQuotaProjects = 10000;

absl::StatusOr<StaticQuotas> ParseStaticQuotas(absl::string_view json, const Catalog& catalog);

}  // namespace gse

#endif  // GSE_STATE_STATIC_QUOTA_H_
