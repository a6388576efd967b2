// Quota charging (contract in quota_charge.h).
#include "state/quota_charge.h"

namespace gse {

int64_t QuotaCharge(const Offering& offering, const Unit& unit, int64_t holdings,
                    int64_t amount) {
  switch (offering.sharing) {
    case Sharing::kExclusive:
      return holdings;
    case Sharing::kTimeSliced:
      return holdings > 0 ? unit.capacity : 0;
    case Sharing::kMps:
      return amount;
  }
  return 0;
}

bool QuotaAllows(Sharing sharing, int64_t quota, int64_t usage, int64_t more) {
  if (quota < 0 || more <= 0) return true;
  if (sharing == Sharing::kTimeSliced) return usage < quota;
  return usage + more <= quota;
}

bool WithinQuota(Sharing sharing, int64_t quota, int64_t usage, int64_t largest_unit) {
  if (sharing != Sharing::kTimeSliced) return QuotaAllows(sharing, quota, 0, usage);
  // The largest slice taken last: every earlier step had fewer tickets than the rest.
  return usage <= 0 || QuotaAllows(sharing, quota, usage - largest_unit, largest_unit);
}

}  // namespace gse
