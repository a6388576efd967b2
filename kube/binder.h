// Binder: how a reservation becomes durable, and the pod it binds. The interface between the
// extender's bind verb (extender/extender_service.h) and whatever commits the binding: the
// API server (kube/api_binder.h) in a cluster, nothing at all standalone and in replays.
#ifndef GSE_KUBE_BINDER_H_
#define GSE_KUBE_BINDER_H_

#include <map>
#include <string>

#include "absl/status/status.h"

namespace gse {

// The pod to bind and where, as kube-scheduler names it.
struct BindTarget {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};

// Makes a reservation durable. Standalone: records only (the mirror is the store). Live
// cluster: POSTs a v1.Binding carrying `annotations` to the API server. An error means the
// pod is not bound; the service then releases the reservation.
class Binder {
 public:
  virtual ~Binder() = default;
  virtual absl::Status Bind(const BindTarget& target,
                            const std::map<std::string, std::string>& annotations) = 0;
};

// Binder for the embedded default and replays: nothing to call.
class RecordOnlyBinder : public Binder {
 public:
  absl::Status Bind(const BindTarget&, const std::map<std::string, std::string>&) override {
    return absl::OkStatus();
  }
};

}  // namespace gse

#endif  // GSE_KUBE_BINDER_H_
