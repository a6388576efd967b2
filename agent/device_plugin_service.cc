// DevicePluginService: the gRPC handlers and the container response.
#include "agent/device_plugin_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace gse::agent {
namespace {

// Kubelet sends one container per call; anything far beyond is not kubelet.
constexpr int kMaxContainerRequests = 16;
constexpr int kMaxIdsPerRequest = 1024;
constexpr absl::Duration kListAndWatchPoll = absl::Milliseconds(100);

grpc::Status ToGrpc(const absl::Status& s) {
  grpc::StatusCode code = grpc::StatusCode::FAILED_PRECONDITION;
  if (absl::IsPermissionDenied(s)) code = grpc::StatusCode::PERMISSION_DENIED;
  if (absl::IsInvalidArgument(s)) code = grpc::StatusCode::INVALID_ARGUMENT;
  if (absl::IsUnavailable(s)) code = grpc::StatusCode::UNAVAILABLE;
  return grpc::Status(code, std::string(s.message()));
}

std::string CdiAnnotationKey(absl::string_view resource) {
  std::string name = absl::StrCat("gpu-slice-agent_", resource);
  std::replace(name.begin(), name.end(), '/', '-');
  if (name.size() > 63) name.resize(63);
  return absl::StrCat("cdi.k8s.io/", name);
}

}  // namespace

absl::StatusOr<DeviceListStrategy> ParseDeviceListStrategy(absl::string_view flag) {
  DeviceListStrategy s;
  s.envvar = false;
  for (absl::string_view part : absl::StrSplit(flag, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    if (part == "envvar") {
      s.envvar = true;
    } else if (part == "cdi-annotations") {
      s.cdi_annotations = true;
    } else if (part == "cdi-cri") {
      s.cdi_cri = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device-list-strategy: \"", part, "\" is not envvar, cdi-annotations or cdi-cri"));
    }
  }
  if (!s.envvar && !s.cdi_annotations && !s.cdi_cri) {
    return absl::InvalidArgumentError("--device-list-strategy: empty");
  }
  return s;
}

v1beta1::ContainerAllocateResponse BuildContainerResponse(const ServedOffering& offering,
                                                          const std::vector<DeviceRef>& refs,
                                                          const PluginOptions& options) {
  v1beta1::ContainerAllocateResponse out;
  std::vector<int32_t> units;
  for (const DeviceRef& r : refs) {
    if (std::find(units.begin(), units.end(), r.unit) == units.end()) units.push_back(r.unit);
  }
  std::vector<std::string> uuids;
  for (int32_t u : units) uuids.push_back(offering.units()[static_cast<size_t>(u)].uuid);
  if (options.strategy.envvar) {
    (*out.mutable_envs())["NVIDIA_VISIBLE_DEVICES"] = absl::StrJoin(uuids, ",");
  }
  std::vector<std::string> cdi;
  for (const std::string& uuid : uuids) cdi.push_back(absl::StrCat(options.cdi_kind, "=", uuid));
  if (options.strategy.cdi_annotations) {
    (*out.mutable_annotations())[CdiAnnotationKey(offering.resource())] = absl::StrJoin(cdi, ",");
  }
  if (options.strategy.cdi_cri) {
    for (const std::string& name : cdi) out.add_cdi_devices()->set_name(name);
  }
  if (offering.sharing() == Sharing::kMps && !units.empty()) {
    // ADR-0007 option C: each client's caps are its shares' part of the unit.
    const int64_t shares = static_cast<int64_t>(refs.size());
    const int64_t replicas = std::max(1, offering.replicas());
    const int64_t percent = std::max<int64_t>(1, 100 * shares / replicas);
    const int64_t unit_mib = offering.units()[static_cast<size_t>(units.front())].memory_mib;
    auto& envs = *out.mutable_envs();
    envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = absl::StrCat(percent);
    if (unit_mib > 0) {
      // Device ordinal 0: the container sees exactly this one device.
      envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = absl::StrCat("0=", unit_mib * shares / replicas, "M");
    }
    envs["CUDA_MPS_PIPE_DIRECTORY"] = options.mps_pipe_directory;
    v1beta1::Mount* pipe = out.add_mounts();
    pipe->set_container_path(options.mps_pipe_directory);
    pipe->set_host_path(options.mps_pipe_directory);
    pipe->set_read_only(false);
  }
  return out;
}

DevicePluginService::DevicePluginService(const ServedOffering* offering, AdmissionGuard* guard,
                                         DeviceHealth* health, PluginOptions options,
                                         PluginObserver* observer)
    : offering_(offering),
      guard_(guard),
      health_(health),
      options_(std::move(options)),
      observer_(observer) {}

void DevicePluginService::Stop() {
  stopped_.store(true);
  health_->Poke();
}

v1beta1::ListAndWatchResponse DevicePluginService::DeviceList() const {
  v1beta1::ListAndWatchResponse resp;
  for (const UnitDevice& u : offering_->units()) {
    const bool healthy = health_->UnitHealthy(u);
    for (const std::string& id : offering_->UnitDeviceIds(u.index)) {
      v1beta1::Device* d = resp.add_devices();
      d->set_id(id);
      d->set_health(healthy ? "Healthy" : "Unhealthy");
    }
  }
  return resp;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*,
                                                         const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* resp) {
  resp->set_get_preferred_allocation_available(true);
  resp->set_pre_start_required(options_.pre_start_required);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(
    grpc::ServerContext* ctx, const v1beta1::Empty*,
    grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  uint64_t seen = health_->generation();
  if (!writer->Write(DeviceList())) return grpc::Status::OK;
  while (!stopped_.load() && !ctx->IsCancelled()) {
    const uint64_t now = health_->WaitForChange(seen, kListAndWatchPoll);
    if (now == seen || stopped_.load()) continue;
    seen = now;
    if (!writer->Write(DeviceList())) break;
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(
    grpc::ServerContext*, const v1beta1::PreferredAllocationRequest* req,
    v1beta1::PreferredAllocationResponse* resp) {
  if (req->container_requests_size() > kMaxContainerRequests) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many container requests");
  }
  for (const auto& c : req->container_requests()) {
    if (c.available_deviceids_size() > kMaxIdsPerRequest * 16 ||
        c.must_include_deviceids_size() > kMaxIdsPerRequest || c.allocation_size() < 0 ||
        c.allocation_size() > kMaxIdsPerRequest) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request out of bounds");
    }
    std::vector<std::string> available(c.available_deviceids().begin(),
                                       c.available_deviceids().end());
    std::vector<std::string> must(c.must_include_deviceids().begin(),
                                  c.must_include_deviceids().end());
    std::vector<std::string> ids =
        guard_->PreferredAllocation(*offering_, available, must, c.allocation_size());
    auto* out = resp->add_container_responses();
    for (std::string& id : ids) out->add_deviceids(std::move(id));
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*,
                                           const v1beta1::AllocateRequest* req,
                                           v1beta1::AllocateResponse* resp) {
  if (req->container_requests_size() > kMaxContainerRequests) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many container requests");
  }
  for (const auto& c : req->container_requests()) {
    if (c.devices_ids_size() > kMaxIdsPerRequest) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many device IDs");
    }
    std::vector<std::string> ids(c.devices_ids().begin(), c.devices_ids().end());
    AdmissionResult result = guard_->Allocate(*offering_, ids);
    if (observer_ != nullptr) observer_->OnAllocate(offering_->resource(), result);
    if (!result.status.ok()) return ToGrpc(result.status);
    *resp->add_container_responses() = BuildContainerResponse(*offering_, result.refs, options_);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*,
                                                    const v1beta1::PreStartContainerRequest* req,
                                                    v1beta1::PreStartContainerResponse*) {
  if (!options_.pre_start_required) return grpc::Status::OK;
  if (req->devices_ids_size() > kMaxIdsPerRequest) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "too many device IDs");
  }
  std::vector<std::string> ids(req->devices_ids().begin(), req->devices_ids().end());
  AdmissionResult result = guard_->VerifyPreStart(*offering_, ids);
  if (observer_ != nullptr) observer_->OnPreStart(offering_->resource(), result);
  return result.status.ok() ? grpc::Status::OK : ToGrpc(result.status);
}

}  // namespace gse::agent
