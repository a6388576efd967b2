// DevicePluginService: kubelet's DevicePlugin gRPC service (v1beta1) for one served offering.
//
//  * GetDevicePluginOptions: get_preferred_allocation_available, and pre_start_required when
//    PreStartContainer verification is on (the default).
//  * ListAndWatch: the offering's device IDs (agent/unit_map.h) with their health, sent at
//    once and again whenever DeviceHealth changes; the stream ends when the service stops.
//  * GetPreferredAllocation / Allocate / PreStartContainer: AdmissionGuard decides; Allocate
//    answers the unit the pod is entitled to, as NVIDIA_VISIBLE_DEVICES=<uuid>[,<uuid>] and/or
//    CDI device names (DeviceListStrategy), and for MPS the per-client caps proportional to
//    the shares (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
//    A refusal is a gRPC FAILED_PRECONDITION / PERMISSION_DENIED whose message kubelet puts
//    into the pod's UnexpectedAdmissionError.
// Thread-safety: gRPC calls the handlers from its own threads, concurrently; the service
// keeps no mutable state besides the stop flag (atomic); AdmissionGuard and DeviceHealth are
// thread-safe. Stop() may be called from any thread and makes ListAndWatch return within
// ~100 ms.
#ifndef GSE_AGENT_DEVICE_PLUGIN_SERVICE_H_
#define GSE_AGENT_DEVICE_PLUGIN_SERVICE_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/admission_guard.h"
#include "agent/device_health.h"
#include "agent/unit_map.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"

namespace gse::agent {

// How Allocate tells the container runtime which devices to expose (like NVIDIA's
// deviceListStrategy; several may be combined).
struct DeviceListStrategy {
  bool envvar = true;            // NVIDIA_VISIBLE_DEVICES=<uuid>,...
  bool cdi_annotations = false;  // cdi.k8s.io/gpu-slice-agent_<resource> = <kind>=<uuid>,...
  bool cdi_cri = false;          // ContainerAllocateResponse.cdi_devices (kubelet 1.28+)
};
// Parses "envvar", "cdi-annotations", "cdi-cri" or a comma-separated combination.
absl::StatusOr<DeviceListStrategy> ParseDeviceListStrategy(absl::string_view flag);

struct PluginOptions {
  DeviceListStrategy strategy;
  std::string cdi_kind = "nvidia.com/gpu";  // CDI device kind of the NVIDIA toolkit's spec
  bool pre_start_required = true;
  std::string mps_pipe_directory = "/run/nvidia/mps";  // host = container path
};

// Told about each decision (metrics, logs); must be thread-safe. May be null.
class PluginObserver {
 public:
  virtual ~PluginObserver() = default;
  virtual void OnAllocate(const std::string& resource, const AdmissionResult& result) = 0;
  virtual void OnPreStart(const std::string& resource, const AdmissionResult& result) = 0;
};

// The container response for `refs` of `offering` (exposed for tests).
v1beta1::ContainerAllocateResponse BuildContainerResponse(const ServedOffering& offering,
                                                          const std::vector<DeviceRef>& refs,
                                                          const PluginOptions& options);

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  // Pointers must outlive the service.
  DevicePluginService(const ServedOffering* offering, AdmissionGuard* guard,
                      DeviceHealth* health, PluginOptions options, PluginObserver* observer);

  void Stop();

  // The current device list (health applied).
  v1beta1::ListAndWatchResponse DeviceList() const;

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* ctx, const v1beta1::Empty* req,
                                      v1beta1::DevicePluginOptions* resp) override;
  grpc::Status ListAndWatch(grpc::ServerContext* ctx, const v1beta1::Empty* req,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* ctx,
                                      const v1beta1::PreferredAllocationRequest* req,
                                      v1beta1::PreferredAllocationResponse* resp) override;
  grpc::Status Allocate(grpc::ServerContext* ctx, const v1beta1::AllocateRequest* req,
                        v1beta1::AllocateResponse* resp) override;
  grpc::Status PreStartContainer(grpc::ServerContext* ctx,
                                 const v1beta1::PreStartContainerRequest* req,
                                 v1beta1::PreStartContainerResponse* resp) override;

 private:
  const ServedOffering* offering_;
  AdmissionGuard* guard_;
  DeviceHealth* health_;
  const PluginOptions options_;
  PluginObserver* observer_;
  std::atomic<bool> stopped_{false};
};

}  // namespace gse::agent

#endif  // GSE_AGENT_DEVICE_PLUGIN_SERVICE_H_
