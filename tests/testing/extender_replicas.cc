// ExtenderReplicas: see the header.
#include "tests/testing/extender_replicas.h"

#include <httplib.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gse::testing {
namespace {

std::string Tail(const std::string& s, size_t bytes) {
  return s.size() <= bytes ? s : "..." + s.substr(s.size() - bytes);
}

// One GET and one POST, one after the other, before any concurrent request. Measured: the
// ThreadSanitizer build of a bare cpp-httplib 0.11 server with ".*" routes (as HttpServer
// registers them) reports a data race inside Debian's uninstrumented libcpp-httplib (its
// std::regex route matching fills a cache on first use) when its first GET and POST arrive
// concurrently, and none once one of each has been served. It is the library's, not the
// extender's, and would end a TSan replica (halt_on_error) before the run tested anything.
void WarmUp(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  (void)client.Get("/readyz");
  (void)client.Post("/filter", "{}", "application/json");
}

}  // namespace

ExtenderReplicas::ExtenderReplicas(std::string binary, std::vector<std::string> args, int count)
    : binary_(std::move(binary)), args_(std::move(args)), count_(count) {
  absl::MutexLock lock(&mu_);
  replicas_.resize(static_cast<size_t>(count));
}

ExtenderReplicas::~ExtenderReplicas() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (poller_.joinable()) poller_.join();
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i].process == nullptr) continue;
    replicas_[i].process->Signal(SIGKILL);
    (void)replicas_[i].process->Wait(absl::Seconds(10));
    SaveLogLocked(static_cast<int>(i));
  }
  // ChildProcess's destructor reaps what still runs.
}

void ExtenderReplicas::KeepLogsIn(std::string dir) {
  absl::MutexLock lock(&mu_);
  log_dir_ = std::move(dir);
}

void ExtenderReplicas::SaveLogLocked(int index) {
  const Replica& r = replicas_[static_cast<size_t>(index)];
  if (log_dir_.empty() || r.process == nullptr) return;
  std::ofstream out(absl::StrCat(log_dir_, "/replica-", index, "-", r.generation, ".log"));
  out << r.process->Stderr();
}

absl::Status ExtenderReplicas::Start() {
  for (int i = 0; i < count_; ++i) {
    if (absl::Status s = Restart(i); !s.ok()) return s;
  }
  poller_ = std::thread([this] { Poll(); });
  return absl::OkStatus();
}

absl::Status ExtenderReplicas::Restart(int index) {
  std::vector<std::string> args = args_;
  args.push_back("--listen=127.0.0.1:0");
  // Started and awaited outside the lock: clients keep asking for the ready replica meanwhile.
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Start(binary_, args);
  if (!child.ok()) return child.status();
  int port = -1;
  for (absl::Time until = absl::Now() + absl::Seconds(30); absl::Now() < until && port < 0;) {
    port = (*child)->ListenPort();
    if (port < 0 && (*child)->Wait(absl::Milliseconds(10)).has_value()) break;
  }
  if (port < 0) {
    return absl::InternalError(absl::StrCat("extender replica ", index, " did not start:\n",
                                            Tail((*child)->Stderr(), 4000)));
  }
  WarmUp(port);
  absl::MutexLock lock(&mu_);
  Replica& r = replicas_[static_cast<size_t>(index)];
  if (r.process != nullptr) {
    r.last_stderr = r.process->Stderr();
    SaveLogLocked(index);
  }
  r.process = *std::move(child);
  r.port = port;
  r.ready = false;
  r.killed = false;
  ++r.generation;
  return absl::OkStatus();
}

void ExtenderReplicas::Kill(int index, int sig, absl::Duration timeout) {
  ChildProcess* process = nullptr;
  {
    absl::MutexLock lock(&mu_);
    Replica& r = replicas_[static_cast<size_t>(index)];
    if (r.process == nullptr || r.killed) return;
    // From here the poller leaves this process alone; it is ours to reap.
    r.killed = true;
    r.ready = false;
    process = r.process.get();
  }
  process->Signal(sig);
  std::optional<int> code = process->Wait(timeout);
  if (!code.has_value()) {
    process->Signal(SIGKILL);
    code = process->Wait(absl::Seconds(10));
  }
  absl::MutexLock lock(&mu_);
  if (sig == SIGTERM && code != 0) {
    unexpected_.push_back(absl::StrCat("extender replica ", index, " exited with code ",
                                       code.value_or(-1), " after SIGTERM:\n",
                                       Tail(process->Stderr(), 4000)));
  }
}

bool ExtenderReplicas::Alive(int index) const {
  absl::MutexLock lock(&mu_);
  const Replica& r = replicas_[static_cast<size_t>(index)];
  return r.process != nullptr && !r.killed;
}

int ExtenderReplicas::ReadyReplica() const {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < replicas_.size(); ++i) {
    if (replicas_[i].ready && !replicas_[i].killed) return static_cast<int>(i);
  }
  return -1;
}

int ExtenderReplicas::ReadyPort() const {
  absl::MutexLock lock(&mu_);
  for (const Replica& r : replicas_) {
    if (r.ready && !r.killed) return r.port;
  }
  return -1;
}

bool ExtenderReplicas::WaitReady(absl::Duration timeout) const {
  for (absl::Time until = absl::Now() + timeout; absl::Now() < until;) {
    if (ReadyPort() >= 0) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return ReadyPort() >= 0;
}

std::vector<std::string> ExtenderReplicas::TakeUnexpectedExits() {
  absl::MutexLock lock(&mu_);
  NoticeExitsLocked();
  std::vector<std::string> out;
  out.swap(unexpected_);
  return out;
}

std::string ExtenderReplicas::StderrTail(int index, size_t bytes) const {
  absl::MutexLock lock(&mu_);
  const Replica& r = replicas_[static_cast<size_t>(index)];
  return Tail(r.process != nullptr ? r.process->Stderr() : r.last_stderr, bytes);
}

void ExtenderReplicas::NoticeExitsLocked() {
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    if (r.process == nullptr || r.killed) continue;
    if (std::optional<int> code = r.process->Wait(absl::ZeroDuration()); code.has_value()) {
      r.killed = true;  // reported once; Restart() may bring it back
      r.ready = false;
      unexpected_.push_back(absl::StrCat("extender replica ", i, " exited on its own with code ",
                                         *code, ":\n", Tail(r.process->Stderr(), 4000)));
    }
  }
}

void ExtenderReplicas::Poll() {
  // One keep-alive client per (replica, generation), as a kubelet's prober would reuse.
  std::map<std::pair<size_t, int>, std::unique_ptr<httplib::Client>> clients;
  while (true) {
    std::vector<std::tuple<size_t, int, int>> targets;  // index, generation, port
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      NoticeExitsLocked();
      for (size_t i = 0; i < replicas_.size(); ++i) {
        const Replica& r = replicas_[i];
        if (r.process != nullptr && !r.killed) targets.emplace_back(i, r.generation, r.port);
      }
    }
    for (const auto& [index, generation, port] : targets) {
      auto& client = clients[{index, generation}];
      if (client == nullptr) {
        client = std::make_unique<httplib::Client>("127.0.0.1", port);
        client->set_connection_timeout(0, 300000);
        client->set_read_timeout(0, 500000);
        client->set_keep_alive(true);
      }
      httplib::Result r = client->Get("/readyz");
      const bool ready = r && r->status == 200;
      absl::MutexLock lock(&mu_);
      Replica& replica = replicas_[index];
      if (replica.generation == generation && !replica.killed) replica.ready = ready;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace gse::testing
