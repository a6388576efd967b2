// Kubernetes resource.Quantity parsing ("1", "500m", "4Gi", "1.5", "2e3").
//
// Contract: pure functions, thread-safe. Values are returned in milli-units so that CPU
// ("127500m") and counts ("7") share one representation; anything that does not fit in an
// int64 of milli-units (about 9.2e15 whole units) is an error, never a wrapped value.
#ifndef GSE_STATE_QUANTITY_H_
#define GSE_STATE_QUANTITY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gse {

// Parses a quantity into milli-units, rounding up fractions of a milli-unit as Kubernetes does.
// Errors (InvalidArgument) name the reason: empty, bad number, unknown suffix, out of range.
absl::StatusOr<int64_t> ParseQuantityMilli(absl::string_view text);

// Parses a quantity that must be a whole, non-negative count (extended resources such as
// nvidia.com/gpu: Kubernetes rejects fractional extended resources).
absl::StatusOr<int64_t> ParseWholeCount(absl::string_view text);

}  // namespace gse

#endif  // GSE_STATE_QUANTITY_H_
