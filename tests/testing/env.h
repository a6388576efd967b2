// Test knobs from the environment (GSE_SEED, GSE_INVARIANT_STEPS, GSE_CHAOS_SECONDS, ...).
#ifndef GSE_TESTS_TESTING_ENV_H_
#define GSE_TESTS_TESTING_ENV_H_

#include <cstdint>
#include <cstdlib>

namespace gse::testing {

// The integer value of environment variable `name`; `fallback` when unset, empty or not a
// whole number.
inline int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long parsed = std::strtoll(v, &end, 10);
  return end != nullptr && *end == '\0' ? parsed : fallback;
}

}  // namespace gse::testing

#endif  // GSE_TESTS_TESTING_ENV_H_
