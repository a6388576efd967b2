// PluginRegistrar: sockets, registration, kubelet restarts.
#include "agent/plugin_registrar.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/agent_log.h"
#include "grpcpp/grpcpp.h"

namespace gse::agent {

struct PluginRegistrar::Plugin {
  const ServedOffering* offering = nullptr;
  std::string socket_path;
  std::unique_ptr<DevicePluginService> service;
  std::unique_ptr<grpc::Server> server;
  bool registered = false;

  void Shutdown() {
    if (service != nullptr) service->Stop();
    if (server != nullptr) {
      // ListAndWatch notices the stop within its poll; give in-flight calls a moment.
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
      server->Wait();
    }
    server.reset();
    service.reset();
    registered = false;
  }
};

std::string PluginSocketName(absl::string_view resource) {
  std::string name = absl::StrCat("gse-", resource, ".sock");
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

PluginRegistrar::PluginRegistrar(const UnitMap* units, AdmissionGuard* guard,
                                 DeviceHealth* health, PluginOptions plugin_options,
                                 PluginObserver* observer, RegistrarOptions options)
    : units_(units),
      guard_(guard),
      health_(health),
      plugin_options_(std::move(plugin_options)),
      observer_(observer),
      options_(std::move(options)) {
  for (const ServedOffering& o : units_->offerings()) {
    if (o.units().empty()) continue;
    auto p = std::make_unique<Plugin>();
    p->offering = &o;
    p->socket_path = absl::StrCat(options_.device_plugin_dir, "/", PluginSocketName(o.resource()));
    plugins_.push_back(std::move(p));
  }
}

PluginRegistrar::~PluginRegistrar() { Stop(); }

uint64_t PluginRegistrar::KubeletSocketIdentity() const {
  struct stat st {};
  const std::string path = options_.device_plugin_dir + "/kubelet.sock";
  if (stat(path.c_str(), &st) != 0) return 0;
  return (static_cast<uint64_t>(st.st_dev) << 40) ^ static_cast<uint64_t>(st.st_ino) ^
         (static_cast<uint64_t>(st.st_ctim.tv_nsec) << 20);
}

absl::Status PluginRegistrar::Restart() {
  for (auto& p : plugins_) p->Shutdown();
  for (auto& p : plugins_) {
    unlink(p->socket_path.c_str());  // a stale socket from an earlier run
    p->service = std::make_unique<DevicePluginService>(p->offering, guard_, health_,
                                                       plugin_options_, observer_);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + p->socket_path, grpc::InsecureServerCredentials());
    builder.RegisterService(p->service.get());
    p->server = builder.BuildAndStart();
    if (p->server == nullptr) {
      p->service.reset();
      return absl::UnavailableError(absl::StrCat("cannot serve the device plugin of ",
                                                 p->offering->resource(), " on ", p->socket_path));
    }
  }
  kubelet_identity_ = KubeletSocketIdentity();
  for (auto& p : plugins_) (void)Register(*p);
  return absl::OkStatus();
}

absl::Status PluginRegistrar::Register(Plugin& plugin) {
  auto channel = grpc::CreateChannel("unix://" + options_.device_plugin_dir + "/kubelet.sock",
                                     grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(absl::ToInt64Milliseconds(options_.register_timeout)));
  v1beta1::RegisterRequest req;
  req.set_version("v1beta1");
  req.set_endpoint(PluginSocketName(plugin.offering->resource()));
  req.set_resource_name(plugin.offering->resource());
  req.mutable_options()->set_get_preferred_allocation_available(true);
  req.mutable_options()->set_pre_start_required(plugin_options_.pre_start_required);
  v1beta1::Empty resp;
  grpc::Status st = stub->Register(&ctx, req, &resp);
  if (!st.ok()) {
    LogEvent("register_failed", {{"resource", plugin.offering->resource()},
                                 {"error", st.error_message()}});
    return absl::UnavailableError(st.error_message());
  }
  plugin.registered = true;
  registrations_.fetch_add(1);
  LogEvent("registered", {{"resource", plugin.offering->resource()},
                          {"endpoint", req.endpoint()},
                          {"devices", absl::StrCat(plugin.offering->device_count())}});
  return absl::OkStatus();
}

absl::Status PluginRegistrar::Start() {
  absl::Status s = Restart();
  {
    absl::MutexLock lock(&mu_);
    all_registered_ = std::all_of(plugins_.begin(), plugins_.end(),
                                  [](const auto& p) { return p->registered; });
  }
  if (!s.ok()) return s;
  watch_ = std::thread([this] { WatchLoop(); });
  return absl::OkStatus();
}

void PluginRegistrar::WatchLoop() {
  while (!stop_.load()) {
    absl::SleepFor(options_.poll_interval);
    if (stop_.load()) break;
    const uint64_t kubelet = KubeletSocketIdentity();
    bool sockets_gone = false;
    for (auto& p : plugins_) {
      if (access(p->socket_path.c_str(), F_OK) != 0) sockets_gone = true;
    }
    if (kubelet == 0) continue;  // kubelet is (re)starting: wait for its socket
    if (kubelet != kubelet_identity_ || sockets_gone) {
      LogEvent("kubelet_restart_detected",
               {{"reason", sockets_gone ? "plugin socket removed" : "kubelet.sock recreated"}});
      if (absl::Status s = Restart(); !s.ok()) {
        LogEvent("serve_failed", {{"error", std::string(s.message())}});
      }
    } else {
      for (auto& p : plugins_) {
        if (!p->registered) (void)Register(*p);
      }
    }
    absl::MutexLock lock(&mu_);
    all_registered_ = std::all_of(plugins_.begin(), plugins_.end(),
                                  [](const auto& p) { return p->registered; });
  }
}

void PluginRegistrar::Stop() {
  stop_.store(true);
  if (watch_.joinable()) watch_.join();
  for (auto& p : plugins_) {
    p->Shutdown();
    unlink(p->socket_path.c_str());
  }
  absl::MutexLock lock(&mu_);
  all_registered_ = false;
}

bool PluginRegistrar::registered() const {
  absl::MutexLock lock(&mu_);
  return all_registered_;
}

}  // namespace gse::agent
