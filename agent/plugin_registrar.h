// PluginRegistrar: serves one DevicePluginService per served offering on a unix socket in
// kubelet's device-plugins directory, registers each with kubelet, and does it all again when
// kubelet restarts.
//
//  * Serve first, then Register: kubelet dials the plugin back (GetDevicePluginOptions) while
//    its Register call is still pending (cm/devicemanager/plugin/v1beta1/server.go), so the
//    socket must be answering before Register is sent.
//  * Kubelet restart: kubelet deletes every socket in the directory and recreates
//    kubelet.sock (CleanupPluginDirectory). A watch thread polls the directory; when
//    kubelet.sock has a new inode, or one of our sockets is gone, every server is stopped
//    (ListAndWatch streams end) and started anew on a fresh socket, then registered again.
//    Device IDs do not change (agent/unit_map.h), as kubelet's checkpoint needs.
//  * A failed Register (kubelet not up yet) is retried on every poll.
// Thread-safety: Start/Stop from one thread; the watch thread owns the servers between them.
// registrations() may be read from any thread.
#ifndef GSE_AGENT_PLUGIN_REGISTRAR_H_
#define GSE_AGENT_PLUGIN_REGISTRAR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/admission_guard.h"
#include "agent/device_health.h"
#include "agent/device_plugin_service.h"
#include "agent/unit_map.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace gse::agent {

struct RegistrarOptions {
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  absl::Duration poll_interval = absl::Milliseconds(500);
  absl::Duration register_timeout = absl::Seconds(10);
};

// "gse-nvidia.com_mig-1g.5gb.shared.sock": the socket file name of a resource's plugin.
std::string PluginSocketName(absl::string_view resource);

class PluginRegistrar {
 public:
  // Pointers must outlive the registrar. Offerings without units are not served.
  PluginRegistrar(const UnitMap* units, AdmissionGuard* guard, DeviceHealth* health,
                  PluginOptions plugin_options, PluginObserver* observer,
                  RegistrarOptions options);
  ~PluginRegistrar();

  // Serves every plugin and tries to register once; then the watch thread keeps it so.
  // Errors: a socket cannot be created (directory missing or not writable).
  absl::Status Start();
  void Stop();

  // Successful Register calls so far (tests and metrics).
  int64_t registrations() const { return registrations_.load(); }
  // Whether every served resource is currently registered with the running kubelet.
  bool registered() const;

 private:
  struct Plugin;
  // Stops every server, then serves and registers them anew. Watch thread or Start only.
  absl::Status Restart();
  absl::Status Register(Plugin& plugin);
  void WatchLoop();
  // (device, inode) of kubelet.sock, or 0 when absent.
  uint64_t KubeletSocketIdentity() const;

  const UnitMap* units_;
  AdmissionGuard* guard_;
  DeviceHealth* health_;
  const PluginOptions plugin_options_;
  PluginObserver* observer_;
  const RegistrarOptions options_;

  std::vector<std::unique_ptr<Plugin>> plugins_;  // watch thread (or Start/Stop) only
  uint64_t kubelet_identity_ = 0;                 // watch thread (or Start/Stop) only
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> registrations_{0};
  mutable absl::Mutex mu_;
  bool all_registered_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watch_;
};

}  // namespace gse::agent

#endif  // GSE_AGENT_PLUGIN_REGISTRAR_H_
