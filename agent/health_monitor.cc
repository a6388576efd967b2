// HealthMonitor: NVML events -> DeviceHealth.
#include "agent/health_monitor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/agent_log.h"

namespace gse::agent {

std::vector<std::string> AffectedDevices(const Inventory& inventory, const HealthEvent& event) {
  std::vector<std::string> out;
  for (const Gpu& g : inventory.gpus) {
    if (g.uuid != event.gpu_uuid) continue;
    if (!event.gpu_instance_id.has_value()) out.push_back(g.uuid);
    for (const MigDevice& m : g.mig_devices) {
      if (!event.gpu_instance_id.has_value() || *event.gpu_instance_id == m.gpu_instance_id) {
        out.push_back(m.uuid);
      }
    }
  }
  return out;
}

HealthMonitor::HealthMonitor(
    NvmlLibrary* nvml, Inventory inventory, DeviceHealth* health,
    std::function<void(const std::string&, const std::string&)> on_unhealthy)
    : nvml_(nvml),
      inventory_(std::move(inventory)),
      health_(health),
      on_unhealthy_(std::move(on_unhealthy)) {}

HealthMonitor::~HealthMonitor() { Stop(); }

absl::StatusOr<int> HealthMonitor::Start() {
  absl::StatusOr<int> supported = nvml_->WatchHealth();
  if (!supported.ok() || *supported == 0) return supported;
  thread_ = std::thread([this] { Loop(); });
  return supported;
}

void HealthMonitor::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void HealthMonitor::Loop() {
  while (!stop_.load()) {
    auto event = nvml_->NextHealthEvent(absl::Milliseconds(500));
    if (!event.ok()) {
      LogEvent("nvml_event_error", {{"error", std::string(event.status().message())}});
      absl::SleepFor(absl::Seconds(1));
      continue;
    }
    if (!event->has_value()) continue;
    const HealthEvent& e = **event;
    for (const std::string& uuid : AffectedDevices(inventory_, e)) {
      if (health_->MarkUnhealthy(uuid, e.reason)) {
        LogEvent("device_unhealthy", {{"device", uuid}, {"gpu", e.gpu_uuid}, {"reason", e.reason}});
        if (on_unhealthy_) on_unhealthy_(uuid, e.reason);
      }
    }
  }
}

}  // namespace gse::agent
