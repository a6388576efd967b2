// TestKubelet: a stand-in for kubelet's device manager and pod-resources server that speaks
// the real gRPC APIs (agent/proto/), for tests and benchmarks of the node agent. No GoogleTest.
//
// What it does, as kubelet 1.26/1.36 do (shared/protocol/kubelet/README.md §1-3):
//  * Serves Registration on <root>/device-plugins/kubelet.sock. Register checks the version,
//    dials the plugin's endpoint back and calls GetDevicePluginOptions while Register is still
//    pending, then reads ListAndWatch on a thread; each message replaces the device list; when
//    the stream ends the devices count as unhealthy.
//  * Admit() admits one pod at a time (callers serialise, as kubelet's syncLoop does): for
//    each container in order and each of its resources, available = healthy IDs not in its
//    allocated-ID book; if the plugin asked for it, GetPreferredAllocation(available, size);
//    returned IDs are kept only if available, up to the size; shortfalls are filled in random
//    order; then Allocate. Any error rejects the pod (its devices are released) with kubelet's
//    message "Allocate failed due to <err>, which is unexpected".
//  * StartContainer() calls PreStartContainer when the plugin asked for it, for the devices its
//    book holds for the container; a container kubelet did not admit, or one of whose
//    resources has no devices in the book, fails as kubelet's device manager fails it ("no
//    devices found allocated in local cache"). A failed start is retried, as kubelet's pod
//    worker requeues a pod whose sync failed (pkg/kubelet/pod_workers.go: after backOffPeriod,
//    10 s in pkg/kubelet/kubelet.go; Options::start_backoff here), on the kubelet's own retry
//    thread, so a pod waiting for its start never holds up the admission of others; the
//    allocation is not repeated (the devices stay booked, as in kubelet). Every retry's
//    outcome goes to the StartListener. RemovePod() ends the pod's retries.
//  * Serves PodResourcesLister (List, Get, GetAllocatableResources) on
//    <root>/pod-resources/kubelet.sock from its book (names only, no UIDs).
//  * Restart() is a kubelet restart: plugin connections are dropped, every file in the
//    device-plugins directory is deleted (CleanupPluginDirectory) and kubelet.sock is created
//    anew; the book (the checkpoint) survives.
// Thread-safety: every method may be called from any thread; mu_ guards the plugins, the book
// and the start retries. gRPC handlers run on gRPC's threads; the StartListener runs on the
// retry thread (never under mu_) and must not call SetStartListener.
#ifndef GSE_TESTSUPPORT_KUBELET_TEST_KUBELET_H_
#define GSE_TESTSUPPORT_KUBELET_TEST_KUBELET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace gse::testsupport {

struct TestContainer {
  std::string name;
  std::map<std::string, int32_t> devices;  // resource -> count
};
struct TestPod {
  std::string namespace_name;
  std::string name;
  std::vector<TestContainer> containers;
  std::string Key() const { return namespace_name + "/" + name; }
};

// What one container got.
struct ContainerAllocation {
  std::string resource;
  std::vector<std::string> ids;
  std::map<std::string, std::string> envs;
  std::map<std::string, std::string> annotations;
  std::vector<std::string> cdi_devices;
};

struct AdmitResult {
  absl::Status status;  // kubelet's rejection message when not OK
  std::map<std::string, ContainerAllocation> containers;  // by container name
  bool preferred_called = false;
  // Round-trip times of the RPCs as kubelet saw them (summed over containers).
  absl::Duration preferred_time;
  absl::Duration allocate_time;
};

class TestKubelet {
 public:
  struct Options {
    std::string root;   // device-plugins/ and pod-resources/ are created under it
    uint32_t seed = 1;  // for the random fill of shortfalls
    // Wait before a failed container start is tried again (kubelet: 10 s, jittered).
    absl::Duration start_backoff = absl::Seconds(10);
  };
  explicit TestKubelet(Options options);
  ~TestKubelet();
  TestKubelet(const TestKubelet&) = delete;
  TestKubelet& operator=(const TestKubelet&) = delete;

  absl::Status Start();
  void Stop();
  absl::Status Restart();

  std::string device_plugin_dir() const;
  std::string pod_resources_socket() const;

  // Waits until `resource` is registered and its ListAndWatch delivered a list with at least
  // `min_devices` devices (any health).
  bool WaitForResource(const std::string& resource, size_t min_devices, absl::Duration timeout);
  // Waits until a device list of `resource` satisfies `pred`.
  bool WaitForDevices(const std::string& resource,
                      const std::function<bool(const std::map<std::string, bool>&)>& pred,
                      absl::Duration timeout);
  std::map<std::string, bool> Devices(const std::string& resource) const;  // id -> healthy
  int64_t Registrations(const std::string& resource) const;

  AdmitResult Admit(const TestPod& pod);
  // One GetDevicePluginOptions round trip to `resource`'s plugin: the floor of a gRPC call
  // over the same kind of socket (benchmarks).
  absl::StatusOr<absl::Duration> TimeEmptyCall(const std::string& resource);
  // One start attempt now; when it fails the start is retried every start_backoff until it
  // succeeds or the pod is removed.
  absl::Status StartContainer(const std::string& pod_key, const std::string& container);
  // Outcome of each retried start (pod key, container, status), on the retry thread.
  using StartListener = std::function<void(const std::string& pod_key,
                                           const std::string& container,
                                           const absl::Status& status)>;
  // Replaces the listener; returns once no call of the previous one is running.
  void SetStartListener(StartListener listener);
  // Containers whose start failed and is waiting for its retry, as "<pod key>/<container>".
  std::vector<std::string> StartsWaiting() const;
  // Kills the pod: its devices are freed and its start retries end.
  void RemovePod(const std::string& pod_key);
  std::map<std::string, std::vector<std::string>> AllocatedIds(const std::string& pod_key) const;

  // Replaces kubelet's use of the preferred allocation: given (available, preferred) it
  // returns the IDs to allocate. Tests use it for a kubelet that offers other units' IDs.
  using Picker = std::function<std::vector<std::string>(const std::vector<std::string>& available,
                                                        const std::vector<std::string>& preferred,
                                                        int32_t size)>;
  void SetPicker(Picker picker);

 private:
  struct Plugin;
  class RegistrationService;
  class PodResourcesService;
  struct BookEntry {
    std::string pod_key, container, resource;
    std::vector<std::string> ids;
  };
  struct StartRetry {
    std::string pod_key, container;
    absl::Time due;
  };

  absl::Status Serve();
  void Shutdown();
  absl::Status OnRegister(const std::string& version, const std::string& endpoint,
                          const std::string& resource);
  std::shared_ptr<Plugin> FindPlugin(const std::string& resource) const;
  absl::Status AllocateContainer(const TestPod& pod, const TestContainer& c,
                                 const std::string& resource, int32_t count, AdmitResult* out);
  // One start attempt (PreStartContainer per booked resource), no retry bookkeeping.
  absl::Status TryStart(const std::string& pod_key, const std::string& container);
  // The retry thread: tries the due starts, one at a time, until Stop().
  void RetryLoop();

  const Options options_;
  std::unique_ptr<RegistrationService> registration_;
  std::unique_ptr<PodResourcesService> pod_resources_;
  std::unique_ptr<grpc::Server> registration_server_;
  std::unique_ptr<grpc::Server> pod_resources_server_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Plugin>> plugins_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> registrations_ ABSL_GUARDED_BY(mu_);
  std::vector<BookEntry> book_ ABSL_GUARDED_BY(mu_);
  std::mt19937 rng_ ABSL_GUARDED_BY(mu_);
  Picker picker_ ABSL_GUARDED_BY(mu_);
  // Admitted pods (by key) and, per container, the resources it requested.
  std::map<std::string, std::map<std::string, std::vector<std::string>>> admitted_
      ABSL_GUARDED_BY(mu_);
  std::vector<StartRetry> retries_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread retry_thread_;  // Start() and Stop() only
  // Held while the listener runs, so that SetStartListener can wait for a running call.
  absl::Mutex listener_mu_;
  StartListener listener_ ABSL_GUARDED_BY(listener_mu_);

  friend class RegistrationService;
  friend class PodResourcesService;
};

}  // namespace gse::testsupport

#endif  // GSE_TESTSUPPORT_KUBELET_TEST_KUBELET_H_
