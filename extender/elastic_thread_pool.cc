// ElasticThreadPool: see elastic_thread_pool.h.
#include "extender/elastic_thread_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>

namespace gse {

ElasticThreadPool::ElasticThreadPool(ElasticThreadPoolOptions options)
    : options_([&] {
        options.max = std::max<size_t>({options.max, options.warm, 1});
        return options;
      }()) {
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < options_.warm; ++i) StartWorkerLocked();
}

ElasticThreadPool::~ElasticThreadPool() { Shutdown(); }

bool ElasticThreadPool::StartWorkerLocked() {
  const int64_t id = started_;
  try {
    workers_.emplace(id, std::thread([this, id] { Work(id); }));
  } catch (const std::system_error&) {
    // The process is out of threads (RLIMIT_NPROC, a pids cgroup): the task waits for a
    // worker that is running now, as it would at `max`.
    ++start_failures_;
    return false;
  }
  ++started_;
  ++alive_;
  ++starting_;
  return true;
}

void ElasticThreadPool::Enqueue(std::function<void()> task) {
  JoinEnded();
  {
    absl::MutexLock lock(&mu_);
    if (!shutdown_) {
      tasks_.push_back(std::move(task));
      if (tasks_.size() > idle_ + starting_ && alive_ >= options_.max) ++waited_at_max_;
      // Each idle (or starting) worker takes one task; beyond them, and to keep `spare` idle
      // ahead of demand, new workers start (below `max`).
      while (tasks_.size() + options_.spare > idle_ + starting_ && alive_ < options_.max) {
        if (!StartWorkerLocked()) break;
      }
      work_.Signal();
      return;
    }
  }
  task();  // after Shutdown no worker is left to run it (httplib never does this)
}

void ElasticThreadPool::Work(int64_t id) {
  if (options_.on_thread_start) options_.on_thread_start();
  mu_.Lock();
  --starting_;
  while (true) {
    bool timed_out = false;
    while (tasks_.empty() && !shutdown_) {
      ++idle_;
      timed_out = work_.WaitWithTimeout(&mu_, options_.idle_timeout);
      --idle_;
      if (timed_out && tasks_.empty() && !shutdown_ && alive_ > options_.warm) break;
    }
    if (tasks_.empty()) break;  // shut down with nothing left, or idle beyond the warm ones
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    ++busy_;
    mu_.Unlock();
    task();
    task = nullptr;  // the connection's state goes with its task, before we count idle again
    mu_.Lock();
    --busy_;
  }
  --alive_;
  ended_.push_back(id);
  mu_.Unlock();
}

void ElasticThreadPool::JoinEnded() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : ended_) {
      auto it = workers_.find(id);
      if (it == workers_.end()) continue;
      done.push_back(std::move(it->second));
      workers_.erase(it);
    }
    ended_.clear();
  }
  for (std::thread& t : done) t.join();  // each has returned or is returning from Work()
}

void ElasticThreadPool::Shutdown() {
  std::map<int64_t, std::thread> all;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    work_.SignalAll();
    all = std::move(workers_);
    workers_.clear();
    ended_.clear();
  }
  for (auto& [id, t] : all) t.join();
}

ElasticThreadPool::Stats ElasticThreadPool::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.threads = alive_;
  s.busy = busy_;
  s.queued = tasks_.size();
  s.started = started_;
  s.start_failures = start_failures_;
  s.waited_at_max = waited_at_max_;
  return s;
}

}  // namespace gse
