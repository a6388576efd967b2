// Kubelet's pod-resources API from the agent's side: which device IDs kubelet has recorded for
// which pod and container (names only: the API carries no pod UID).
//
// PodResourcesSource is the interface the agent reads through; PodResourcesClient implements
// it over gRPC on kubelet's socket (/var/lib/kubelet/pod-resources/kubelet.sock). Every call
// has a deadline (kubelet's server has none of its own). Thread-safe.
#ifndef GSE_AGENT_POD_RESOURCES_H_
#define GSE_AGENT_POD_RESOURCES_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace grpc {
class Channel;
}  // namespace grpc

namespace gse::agent {

// One container's devices of one resource.
struct ContainerDeviceIds {
  std::string namespace_name;
  std::string pod_name;
  std::string container;
  std::string resource;
  std::vector<std::string> ids;

  std::string PodKey() const { return namespace_name + "/" + pod_name; }
};

class PodResourcesSource {
 public:
  virtual ~PodResourcesSource() = default;
  // Every container's device IDs (List). Containers without devices are left out.
  virtual absl::StatusOr<std::vector<ContainerDeviceIds>> List(absl::Duration timeout) = 0;
};

class PodResourcesClient : public PodResourcesSource {
 public:
  // `socket_path` is a file path; the channel connects lazily.
  explicit PodResourcesClient(const std::string& socket_path);
  ~PodResourcesClient() override;
  absl::StatusOr<std::vector<ContainerDeviceIds>> List(absl::Duration timeout) override;

 private:
  std::string socket_path_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_POD_RESOURCES_H_
