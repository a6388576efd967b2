// FixedPodSource: the node's pods as a test or benchmark sets them, for the agent's
// AdmissionGuard (agent/node_pods.h) without an API server. Resync() only counts calls.
// Thread-safe: mu_ guards the pods and the counter.
#ifndef GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_
#define GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/node_pods.h"

namespace gse::testsupport {

class FixedPodSource : public agent::PodSource {
 public:
  std::vector<agent::NodePod> Snapshot() const override {
    absl::MutexLock lock(&mu_);
    std::vector<agent::NodePod> out;
    out.reserve(pods_.size());
    for (const auto& [key, pod] : pods_) out.push_back(pod);
    return out;
  }
  absl::Status Resync(absl::Duration) override {
    absl::MutexLock lock(&mu_);
    ++resyncs_;
    return absl::OkStatus();
  }
  void Put(agent::NodePod pod) {
    absl::MutexLock lock(&mu_);
    pods_[pod.Key()] = std::move(pod);
  }
  void Remove(const std::string& key) {
    absl::MutexLock lock(&mu_);
    pods_.erase(key);
  }
  void Clear() {
    absl::MutexLock lock(&mu_);
    pods_.clear();
  }
  int resyncs() const {
    absl::MutexLock lock(&mu_);
    return resyncs_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, agent::NodePod> pods_ ABSL_GUARDED_BY(mu_);
  int resyncs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gse::testsupport

#endif  // GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_
