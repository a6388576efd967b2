#include "perf/bench_stats.h"

#include <time.h>

#include <algorithm>

namespace gse::perf {

Percentiles Summarise(std::vector<double> us) {
  Percentiles p;
  p.n = us.size();
  if (us.empty()) return p;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * static_cast<double>(us.size())))];
  };
  p.min_us = us.front();
  p.p50_us = at(0.50);
  p.p99_us = at(0.99);
  double sum = 0;
  for (double v : us) sum += v;
  p.mean_us = sum / static_cast<double>(us.size());
  return p;
}

double ThreadCpuMicros() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

}  // namespace gse::perf
