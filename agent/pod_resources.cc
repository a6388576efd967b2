// PodResourcesClient: List over gRPC with a deadline.
#include "agent/pod_resources.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "podresources/v1/api.grpc.pb.h"

namespace gse::agent {

PodResourcesClient::PodResourcesClient(const std::string& socket_path)
    : socket_path_(socket_path),
      channel_(grpc::CreateChannel("unix://" + socket_path, grpc::InsecureChannelCredentials())) {}

PodResourcesClient::~PodResourcesClient() = default;

absl::StatusOr<std::vector<ContainerDeviceIds>> PodResourcesClient::List(absl::Duration timeout) {
  auto stub = v1::PodResourcesLister::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::microseconds(absl::ToInt64Microseconds(timeout)));
  v1::ListPodResourcesRequest req;
  v1::ListPodResourcesResponse resp;
  grpc::Status st = stub->List(&ctx, req, &resp);
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("pod-resources List on ", socket_path_, ": ",
                                               st.error_message(), " (gRPC code ",
                                               static_cast<int>(st.error_code()), ")"));
  }
  std::vector<ContainerDeviceIds> out;
  for (const v1::PodResources& pod : resp.pod_resources()) {
    for (const v1::ContainerResources& c : pod.containers()) {
      for (const v1::ContainerDevices& d : c.devices()) {
        if (d.device_ids().empty()) continue;
        ContainerDeviceIds e;
        e.namespace_name = pod.namespace_();
        e.pod_name = pod.name();
        e.container = c.name();
        e.resource = d.resource_name();
        e.ids.assign(d.device_ids().begin(), d.device_ids().end());
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

}  // namespace gse::agent
