// What the benchmarks report of a series of timings: percentiles, and the CPU time of the
// calling thread (steady when other processes share the cores).
#ifndef GSE_PERF_BENCH_STATS_H_
#define GSE_PERF_BENCH_STATS_H_

#include <cstddef>
#include <vector>

namespace gse::perf {

// Of values in microseconds.
struct Percentiles {
  double min_us = 0, p50_us = 0, p99_us = 0, mean_us = 0;
  size_t n = 0;
};
Percentiles Summarise(std::vector<double> us);

// CPU time this thread has used so far, in microseconds (CLOCK_THREAD_CPUTIME_ID).
double ThreadCpuMicros();

}  // namespace gse::perf

#endif  // GSE_PERF_BENCH_STATS_H_
