// FixedPodSource: the node's pods as a test or benchmark sets them, for the agent's
// AdmissionGuard (agent/node_pods.h) without an API server. Resync() counts calls, delivers
// the pods put as not yet seen by the watch (PutUnseen), or fails as a test says.
// Thread-safe: mu_ guards the pods and the counter.
#ifndef GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_
#define GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
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
    // A deep copy: a copied absl::Status shares its payload with resync_error_, which the test
    // thread may replace while the caller still reads the message.
    if (!resync_error_.ok()) {
      return absl::Status(resync_error_.code(), std::string(resync_error_.message()));
    }
    for (auto& [key, pod] : unseen_) pods_[key] = std::move(pod);
    unseen_.clear();
    return absl::OkStatus();
  }
  // A pod the API server has but the watch has not delivered yet: Snapshot() shows it after
  // the next Resync().
  void PutUnseen(agent::NodePod pod) {
    absl::MutexLock lock(&mu_);
    unseen_[pod.Key()] = std::move(pod);
  }
  // Resync() answers `error` from now on (OK again with absl::OkStatus()).
  void SetResyncError(absl::Status error) {
    absl::MutexLock lock(&mu_);
    resync_error_ = std::move(error);
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
  std::map<std::string, agent::NodePod> unseen_ ABSL_GUARDED_BY(mu_);
  absl::Status resync_error_ ABSL_GUARDED_BY(mu_);
  int resyncs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gse::testsupport

#endif  // GSE_TESTSUPPORT_KUBELET_FIXED_POD_SOURCE_H_
