// DeviceHealth: the set of unhealthy devices and a generation to wait on.
#include "agent/device_health.h"

namespace gse::agent {

bool DeviceHealth::MarkUnhealthy(const std::string& uuid, const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (!unhealthy_.emplace(uuid, reason).second) return false;
  ++generation_;
  return true;
}

bool DeviceHealth::Healthy(const std::string& uuid) const {
  absl::MutexLock lock(&mu_);
  return !unhealthy_.contains(uuid);
}

bool DeviceHealth::UnitHealthy(const UnitDevice& unit) const {
  absl::MutexLock lock(&mu_);
  return unit.healthy && !unhealthy_.contains(unit.uuid) && !unhealthy_.contains(unit.gpu_uuid);
}

size_t DeviceHealth::unhealthy_count() const {
  absl::MutexLock lock(&mu_);
  return unhealthy_.size();
}

uint64_t DeviceHealth::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

// Polls instead of absl::Mutex::AwaitWithTimeout, which the TSan build cannot annotate
// (Debian's Abseil is uninstrumented; cmake/tsan_absl_sync.cc wraps plain lock calls only,
// as extender/http_server.cc explains). Health changes are rare; 10 ms latency is nothing.
uint64_t DeviceHealth::WaitForChange(uint64_t seen, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const uint64_t now = generation();
    if (now != seen || absl::Now() >= deadline) return now;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void DeviceHealth::Poke() {
  absl::MutexLock lock(&mu_);
  ++generation_;
}

}  // namespace gse::agent
