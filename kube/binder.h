// Binder: how a reservation becomes durable, and the pod it binds. The interface between the
// extender's bind verb (extender/extender_service.h) and whatever commits the binding: the
// API server (kube/api_binder.h) in a cluster, nothing at all standalone and in replays.
#ifndef GSE_KUBE_BINDER_H_
#define GSE_KUBE_BINDER_H_

#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"

namespace gse {

// The pod to bind and where, as kube-scheduler names it.
struct BindTarget {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string node;
};

// What a bind attempt established about the pod (issue 12, finding 1). Only kNotBound lets
// the service free the reservation: an ambiguous failure may hide a committed binding.
enum class BindOutcome {
  kBound,     // the pod is bound to target.node with the annotations
  kNotBound,  // definitely not bound by this call: refused, never sent, or read back unbound
  kUnknown,   // a request may have committed and nothing could tell whether it did
};

struct BindResult {
  BindOutcome outcome = BindOutcome::kNotBound;
  absl::Status status;  // OK exactly when kBound; otherwise the reason, for the Error answer

  static BindResult Bound() { return {BindOutcome::kBound, absl::OkStatus()}; }
  static BindResult NotBound(absl::Status why) { return {BindOutcome::kNotBound, std::move(why)}; }
  static BindResult Unknown(absl::Status why) { return {BindOutcome::kUnknown, std::move(why)}; }
  bool bound() const { return outcome == BindOutcome::kBound; }
};

// Makes a reservation durable. Standalone: records only (the mirror is the store). Live
// cluster: POSTs a v1.Binding carrying `annotations` to the API server. The service confirms
// the reservation on kBound, releases it on kNotBound (only the one this call created, still
// reserved) and keeps it, unconfirmed, on kUnknown until the API server's objects (watch or
// relist) settle it. Thread-safe implementations only: binds run concurrently.
class Binder {
 public:
  virtual ~Binder() = default;
  virtual BindResult Bind(const BindTarget& target,
                          const std::map<std::string, std::string>& annotations) = 0;
};

// Binder for the embedded default and replays: nothing to call.
class RecordOnlyBinder : public Binder {
 public:
  BindResult Bind(const BindTarget&, const std::map<std::string, std::string>&) override {
    return BindResult::Bound();
  }
};

}  // namespace gse

#endif  // GSE_KUBE_BINDER_H_
