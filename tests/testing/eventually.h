// Eventually: polls a condition until it holds or a deadline passes, for tests that wait on
// background threads (watches, elections) without fixed sleeps.
#ifndef GSE_TESTS_TESTING_EVENTUALLY_H_
#define GSE_TESTS_TESTING_EVENTUALLY_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gse::testing {

// True as soon as pred() is; false if it is still false at `timeout` (checked once more then).
template <typename Pred>
bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(10),
                absl::Duration poll = absl::Milliseconds(5)) {
  const absl::Time until = absl::Now() + timeout;
  while (absl::Now() < until) {
    if (pred()) return true;
    absl::SleepFor(poll);
  }
  return pred();
}

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_EVENTUALLY_H_
