// TestKubelet: Registration and pod-resources servers, and a device manager client.
#include "testsupport/kubelet/test_kubelet.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "podresources/v1/api.grpc.pb.h"

namespace gse::testsupport {
namespace {

std::chrono::system_clock::time_point Deadline(absl::Duration d) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// Kubelet's admission errors read "Allocate failed due to <err>, which is unexpected".
absl::Status Rejected(const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("UnexpectedAdmissionError: Allocate failed due to ", why,
                   ", which is unexpected"));
}

}  // namespace

struct TestKubelet::Plugin {
  std::string resource;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1beta1::DevicePlugin::Stub> stub;
  v1beta1::DevicePluginOptions options;
  grpc::ClientContext watch_ctx;
  std::thread reader;

  absl::Mutex mu;
  std::map<std::string, bool> devices ABSL_GUARDED_BY(mu);
  bool stream_open ABSL_GUARDED_BY(mu) = true;

  ~Plugin() {
    watch_ctx.TryCancel();
    if (reader.joinable()) reader.join();
  }
  void Read() {
    v1beta1::Empty empty;
    auto stream = stub->ListAndWatch(&watch_ctx, empty);
    v1beta1::ListAndWatchResponse resp;
    while (stream->Read(&resp)) {
      std::map<std::string, bool> list;
      for (const auto& d : resp.devices()) list[d.id()] = d.health() == "Healthy";
      absl::MutexLock lock(&mu);
      devices = std::move(list);
    }
    (void)stream->Finish();
    absl::MutexLock lock(&mu);
    stream_open = false;
    for (auto& [id, healthy] : devices) healthy = false;  // the endpoint is gone
  }
};

class TestKubelet::RegistrationService final : public v1beta1::Registration::Service {
 public:
  explicit RegistrationService(TestKubelet* k) : k_(k) {}
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* req,
                        v1beta1::Empty*) override {
    absl::Status s = k_->OnRegister(req->version(), req->endpoint(), req->resource_name());
    if (!s.ok()) return grpc::Status(grpc::StatusCode::UNKNOWN, std::string(s.message()));
    return grpc::Status::OK;
  }

 private:
  TestKubelet* k_;
};

class TestKubelet::PodResourcesService final : public v1::PodResourcesLister::Service {
 public:
  explicit PodResourcesService(TestKubelet* k) : k_(k) {}
  grpc::Status List(grpc::ServerContext*, const v1::ListPodResourcesRequest*,
                    v1::ListPodResourcesResponse* resp) override {
    absl::MutexLock lock(&k_->mu_);
    std::map<std::string, v1::PodResources*> pods;
    for (const BookEntry& e : k_->book_) Add(e, resp, pods);
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext*, const v1::GetPodResourcesRequest* req,
                   v1::GetPodResourcesResponse* resp) override {
    const std::string key = req->pod_namespace() + "/" + req->pod_name();
    absl::MutexLock lock(&k_->mu_);
    v1::ListPodResourcesResponse all;
    std::map<std::string, v1::PodResources*> pods;
    for (const BookEntry& e : k_->book_) {
      if (e.pod_key == key) Add(e, &all, pods);
    }
    if (all.pod_resources().empty()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "pod " + key + " not found");
    }
    *resp->mutable_pod_resources() = all.pod_resources(0);
    return grpc::Status::OK;
  }
  grpc::Status GetAllocatableResources(grpc::ServerContext*,
                                       const v1::AllocatableResourcesRequest*,
                                       v1::AllocatableResourcesResponse* resp) override {
    absl::MutexLock lock(&k_->mu_);
    for (const auto& [resource, plugin] : k_->plugins_) {
      absl::MutexLock plock(&plugin->mu);
      auto* d = resp->add_devices();
      d->set_resource_name(resource);
      for (const auto& [id, healthy] : plugin->devices) {
        if (healthy) d->add_device_ids(id);
      }
    }
    return grpc::Status::OK;
  }

 private:
  static void Add(const BookEntry& e, v1::ListPodResourcesResponse* resp,
                  std::map<std::string, v1::PodResources*>& pods) {
    v1::PodResources*& pod = pods[e.pod_key];
    if (pod == nullptr) {
      pod = resp->add_pod_resources();
      const size_t slash = e.pod_key.find('/');
      pod->set_namespace_(e.pod_key.substr(0, slash));
      pod->set_name(e.pod_key.substr(slash + 1));
    }
    v1::ContainerResources* c = nullptr;
    for (auto& existing : *pod->mutable_containers()) {
      if (existing.name() == e.container) c = &existing;
    }
    if (c == nullptr) {
      c = pod->add_containers();
      c->set_name(e.container);
    }
    auto* d = c->add_devices();
    d->set_resource_name(e.resource);
    for (const std::string& id : e.ids) d->add_device_ids(id);
  }
  TestKubelet* k_;
};

TestKubelet::TestKubelet(Options options) : options_(std::move(options)), rng_(options_.seed) {}

TestKubelet::~TestKubelet() { Stop(); }

std::string TestKubelet::device_plugin_dir() const { return options_.root + "/device-plugins"; }
std::string TestKubelet::pod_resources_socket() const {
  return options_.root + "/pod-resources/kubelet.sock";
}

absl::Status TestKubelet::Start() {
  mkdir(options_.root.c_str(), 0755);
  mkdir(device_plugin_dir().c_str(), 0755);
  mkdir((options_.root + "/pod-resources").c_str(), 0750);
  absl::Status s = Serve();
  if (s.ok() && !retry_thread_.joinable()) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = false;
    }
    retry_thread_ = std::thread([this] { RetryLoop(); });
  }
  return s;
}

absl::Status TestKubelet::Serve() {
  registration_ = std::make_unique<RegistrationService>(this);
  pod_resources_ = std::make_unique<PodResourcesService>(this);
  const std::string kubelet_sock = device_plugin_dir() + "/kubelet.sock";
  unlink(kubelet_sock.c_str());
  unlink(pod_resources_socket().c_str());
  {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + kubelet_sock, grpc::InsecureServerCredentials());
    b.RegisterService(registration_.get());
    registration_server_ = b.BuildAndStart();
  }
  {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix://" + pod_resources_socket(), grpc::InsecureServerCredentials());
    b.RegisterService(pod_resources_.get());
    pod_resources_server_ = b.BuildAndStart();
  }
  if (registration_server_ == nullptr || pod_resources_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("test kubelet cannot serve under ", options_.root));
  }
  return absl::OkStatus();
}

void TestKubelet::Shutdown() {
  std::map<std::string, std::shared_ptr<Plugin>> plugins;
  {
    absl::MutexLock lock(&mu_);
    plugins.swap(plugins_);
  }
  plugins.clear();  // cancels the ListAndWatch readers
  for (auto* server : {&registration_server_, &pod_resources_server_}) {
    if (*server != nullptr) {
      (*server)->Shutdown(Deadline(absl::Seconds(1)));
      (*server)->Wait();
      server->reset();
    }
  }
}

void TestKubelet::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (retry_thread_.joinable()) retry_thread_.join();
  Shutdown();
}

absl::Status TestKubelet::Restart() {
  Shutdown();
  // gRPC unlinks a server's unix socket when its listener is torn down, which can happen
  // after Shutdown() returned; the new servers' sockets have the same paths, so an unlink
  // that late would delete them (pod-resources then stays unreachable for good). Wait until
  // the old sockets are gone.
  const std::string sockets[] = {device_plugin_dir() + "/kubelet.sock", pod_resources_socket()};
  for (const absl::Time until = absl::Now() + absl::Seconds(5); absl::Now() < until;) {
    if (access(sockets[0].c_str(), F_OK) != 0 && access(sockets[1].c_str(), F_OK) != 0) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
  // CleanupPluginDirectory: every file goes, except the checkpoint.
  if (DIR* dir = opendir(device_plugin_dir().c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name == "." || name == ".." || name == "kubelet_internal_checkpoint") continue;
      unlink((device_plugin_dir() + "/" + name).c_str());
    }
    closedir(dir);
  }
  return Serve();
}

absl::Status TestKubelet::OnRegister(const std::string& version, const std::string& endpoint,
                                     const std::string& resource) {
  if (version != "v1beta1") return absl::InvalidArgumentError("unsupported version " + version);
  if (resource.empty() || endpoint.empty() || endpoint.find('/') != std::string::npos) {
    return absl::InvalidArgumentError("invalid resource or endpoint");
  }
  auto plugin = std::make_shared<Plugin>();
  plugin->resource = resource;
  plugin->channel = grpc::CreateChannel("unix://" + device_plugin_dir() + "/" + endpoint,
                                        grpc::InsecureChannelCredentials());
  plugin->stub = v1beta1::DevicePlugin::NewStub(plugin->channel);
  // Kubelet dials back and asks for the options while Register is pending.
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(10)));
  ctx.set_wait_for_ready(true);
  v1beta1::Empty empty;
  grpc::Status st = plugin->stub->GetDevicePluginOptions(&ctx, empty, &plugin->options);
  if (!st.ok()) {
    return absl::UnavailableError("cannot dial the plugin back: " + st.error_message());
  }
  Plugin* raw = plugin.get();
  plugin->reader = std::thread([raw] { raw->Read(); });
  std::shared_ptr<Plugin> old;
  {
    absl::MutexLock lock(&mu_);
    old = std::move(plugins_[resource]);
    plugins_[resource] = plugin;
    registrations_[resource] += 1;
  }
  old.reset();  // ends the previous endpoint's stream
  return absl::OkStatus();
}

std::shared_ptr<TestKubelet::Plugin> TestKubelet::FindPlugin(const std::string& resource) const {
  absl::MutexLock lock(&mu_);
  auto it = plugins_.find(resource);
  return it == plugins_.end() ? nullptr : it->second;
}

absl::StatusOr<absl::Duration> TestKubelet::TimeEmptyCall(const std::string& resource) {
  std::shared_ptr<Plugin> plugin = FindPlugin(resource);
  if (plugin == nullptr) return absl::NotFoundError("unregistered device " + resource);
  v1beta1::Empty empty;
  v1beta1::DevicePluginOptions options;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(10)));
  const absl::Time t0 = absl::Now();
  grpc::Status st = plugin->stub->GetDevicePluginOptions(&ctx, empty, &options);
  const absl::Duration d = absl::Now() - t0;
  if (!st.ok()) return absl::UnavailableError(st.error_message());
  return d;
}

bool TestKubelet::WaitForDevices(
    const std::string& resource,
    const std::function<bool(const std::map<std::string, bool>&)>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (auto p = FindPlugin(resource)) {
      absl::MutexLock lock(&p->mu);
      if (p->stream_open && pred(p->devices)) return true;
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return false;
}

bool TestKubelet::WaitForResource(const std::string& resource, size_t min_devices,
                                  absl::Duration timeout) {
  return WaitForDevices(
      resource, [min_devices](const auto& d) { return !d.empty() && d.size() >= min_devices; },
      timeout);
}

std::map<std::string, bool> TestKubelet::Devices(const std::string& resource) const {
  auto p = FindPlugin(resource);
  if (p == nullptr) return {};
  absl::MutexLock lock(&p->mu);
  return p->devices;
}

int64_t TestKubelet::Registrations(const std::string& resource) const {
  absl::MutexLock lock(&mu_);
  auto it = registrations_.find(resource);
  return it == registrations_.end() ? 0 : it->second;
}

void TestKubelet::SetPicker(Picker picker) {
  absl::MutexLock lock(&mu_);
  picker_ = std::move(picker);
}

absl::Status TestKubelet::AllocateContainer(const TestPod& pod, const TestContainer& c,
                                            const std::string& resource, int32_t count,
                                            AdmitResult* out) {
  std::shared_ptr<Plugin> plugin = FindPlugin(resource);
  if (plugin == nullptr) return Rejected("unregistered device " + resource);
  std::vector<std::string> available;
  {
    absl::MutexLock lock(&mu_);
    std::set<std::string> in_use;
    for (const BookEntry& e : book_) {
      if (e.resource == resource) in_use.insert(e.ids.begin(), e.ids.end());
    }
    absl::MutexLock plock(&plugin->mu);
    for (const auto& [id, healthy] : plugin->devices) {
      if (healthy && in_use.count(id) == 0) available.push_back(id);
    }
  }
  if (available.size() < static_cast<size_t>(count)) {
    return Rejected(absl::StrCat("requested number of devices unavailable for ", resource,
                                 ". Requested: ", count, ", Available: ", available.size()));
  }
  std::vector<std::string> preferred;
  if (plugin->options.get_preferred_allocation_available()) {
    out->preferred_called = true;
    v1beta1::PreferredAllocationRequest req;
    auto* cr = req.add_container_requests();
    for (const std::string& id : available) cr->add_available_deviceids(id);
    cr->set_allocation_size(count);
    v1beta1::PreferredAllocationResponse resp;
    grpc::ClientContext ctx;  // kubelet sets no deadline; a test must not hang forever
    ctx.set_deadline(Deadline(absl::Seconds(60)));
    const absl::Time t0 = absl::Now();
    grpc::Status st = plugin->stub->GetPreferredAllocation(&ctx, req, &resp);
    out->preferred_time += absl::Now() - t0;
    if (!st.ok()) return Rejected(st.error_message());
    if (resp.container_responses_size() > 0) {
      for (const auto& id : resp.container_responses(0).deviceids()) preferred.push_back(id);
    }
  }
  std::vector<std::string> picks;
  {
    absl::MutexLock lock(&mu_);
    if (picker_) {
      picks = picker_(available, preferred, count);
    } else {
      // Keep preferred IDs that are available (invalid ones silently ignored), then fill the
      // shortfall in random order.
      std::set<std::string> avail(available.begin(), available.end());
      for (const std::string& id : preferred) {
        if (picks.size() < static_cast<size_t>(count) && avail.erase(id) == 1) picks.push_back(id);
      }
      std::vector<std::string> rest(avail.begin(), avail.end());
      std::shuffle(rest.begin(), rest.end(), rng_);
      for (const std::string& id : rest) {
        if (picks.size() >= static_cast<size_t>(count)) break;
        picks.push_back(id);
      }
    }
  }
  v1beta1::AllocateRequest req;
  auto* cr = req.add_container_requests();
  for (const std::string& id : picks) cr->add_devices_ids(id);
  v1beta1::AllocateResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(absl::Seconds(60)));
  const absl::Time t0 = absl::Now();
  grpc::Status st = plugin->stub->Allocate(&ctx, req, &resp);
  out->allocate_time += absl::Now() - t0;
  if (!st.ok()) return Rejected(st.error_message());
  if (resp.container_responses_size() < 1) return Rejected("empty AllocateResponse");
  const auto& r = resp.container_responses(0);
  ContainerAllocation& a = out->containers[c.name];
  a.resource = resource;
  a.ids = picks;
  a.envs.insert(r.envs().begin(), r.envs().end());
  a.annotations.insert(r.annotations().begin(), r.annotations().end());
  for (const auto& d : r.cdi_devices()) a.cdi_devices.push_back(d.name());
  absl::MutexLock lock(&mu_);
  book_.push_back(BookEntry{pod.Key(), c.name, resource, picks});
  return absl::OkStatus();
}

AdmitResult TestKubelet::Admit(const TestPod& pod) {
  // One admission at a time, as kubelet's single syncLoop goroutine.
  static absl::Mutex admit_mu(absl::kConstInit);
  absl::MutexLock admit(&admit_mu);
  AdmitResult out;
  for (const TestContainer& c : pod.containers) {
    for (const auto& [resource, count] : c.devices) {
      out.status = AllocateContainer(pod, c, resource, count, &out);
      if (!out.status.ok()) {
        RemovePod(pod.Key());  // the pod is rejected; its devices are freed
        return out;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  auto& containers = admitted_[pod.Key()];
  for (const TestContainer& c : pod.containers) {
    auto& resources = containers[c.name];
    for (const auto& [resource, count] : c.devices) {
      if (count > 0) resources.push_back(resource);
    }
  }
  return out;
}

absl::Status TestKubelet::TryStart(const std::string& pod_key, const std::string& container) {
  std::vector<BookEntry> entries;
  {
    absl::MutexLock lock(&mu_);
    auto pod = admitted_.find(pod_key);
    auto c = pod == admitted_.end() ? nullptr : &pod->second;
    if (c == nullptr || c->count(container) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CreateContainerConfigError: pod ", pod_key, " container ", container,
          " is not admitted on this kubelet"));
    }
    for (const std::string& resource : c->at(container)) {
      size_t found = 0;
      for (const BookEntry& e : book_) {
        if (e.pod_key == pod_key && e.container == container && e.resource == resource) {
          entries.push_back(e);
          ++found;
        }
      }
      // pkg/kubelet/cm/devicemanager/manager.go, callPreStartContainerIfNeeded.
      if (found == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "CreateContainerConfigError: no devices found allocated in local cache for pod ",
            pod_key, ", container ", container, ", resource ", resource));
      }
    }
  }
  for (const BookEntry& e : entries) {
    std::shared_ptr<Plugin> plugin = FindPlugin(e.resource);
    if (plugin == nullptr) return absl::UnavailableError("unregistered device " + e.resource);
    if (!plugin->options.pre_start_required()) continue;
    v1beta1::PreStartContainerRequest req;
    for (const std::string& id : e.ids) req.add_devices_ids(id);
    v1beta1::PreStartContainerResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(Deadline(absl::Seconds(30)));  // kubelet's PreStartContainer timeout
    grpc::Status st = plugin->stub->PreStartContainer(&ctx, req, &resp);
    if (!st.ok()) {
      return absl::FailedPreconditionError("CreateContainerConfigError: " + st.error_message());
    }
  }
  return absl::OkStatus();
}

absl::Status TestKubelet::StartContainer(const std::string& pod_key,
                                         const std::string& container) {
  absl::Status s = TryStart(pod_key, container);
  absl::MutexLock lock(&mu_);
  retries_.erase(std::remove_if(retries_.begin(), retries_.end(),
                                [&](const StartRetry& r) {
                                  return r.pod_key == pod_key && r.container == container;
                                }),
                 retries_.end());
  if (!s.ok() && admitted_.count(pod_key) != 0) {
    retries_.push_back(StartRetry{pod_key, container, absl::Now() + options_.start_backoff});
  }
  return s;
}

void TestKubelet::RetryLoop() {
  while (true) {
    std::vector<StartRetry> due;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      const absl::Time now = absl::Now();
      for (auto it = retries_.begin(); it != retries_.end();) {
        if (it->due <= now) {
          due.push_back(*it);
          it = retries_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const StartRetry& r : due) {
      absl::Status s = TryStart(r.pod_key, r.container);
      {
        absl::MutexLock lock(&mu_);
        // Removed meanwhile (killed): no more retries, nobody to tell.
        if (admitted_.count(r.pod_key) == 0) continue;
        if (!s.ok()) {
          retries_.push_back(StartRetry{r.pod_key, r.container, absl::Now() + options_.start_backoff});
        }
      }
      absl::MutexLock lock(&listener_mu_);
      if (listener_) listener_(r.pod_key, r.container, s);
    }
    absl::SleepFor(std::min(options_.start_backoff / 4, absl::Milliseconds(20)));
  }
}

void TestKubelet::SetStartListener(StartListener listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = std::move(listener);
}

std::vector<std::string> TestKubelet::StartsWaiting() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const StartRetry& r : retries_) out.push_back(r.pod_key + "/" + r.container);
  return out;
}

void TestKubelet::RemovePod(const std::string& pod_key) {
  absl::MutexLock lock(&mu_);
  admitted_.erase(pod_key);
  retries_.erase(std::remove_if(retries_.begin(), retries_.end(),
                                [&](const StartRetry& r) { return r.pod_key == pod_key; }),
                 retries_.end());
  book_.erase(std::remove_if(book_.begin(), book_.end(),
                             [&](const BookEntry& e) { return e.pod_key == pod_key; }),
              book_.end());
}

std::map<std::string, std::vector<std::string>> TestKubelet::AllocatedIds(
    const std::string& pod_key) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::vector<std::string>> out;
  for (const BookEntry& e : book_) {
    if (e.pod_key == pod_key) {
      auto& v = out[e.container];
      v.insert(v.end(), e.ids.begin(), e.ids.end());
    }
  }
  return out;
}

}  // namespace gse::testsupport
