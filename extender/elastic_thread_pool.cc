// ElasticThreadPool: see elastic_thread_pool.h.
#include "extender/elastic_thread_pool.h"

#include <algorithm>
#include <system_error>
#include <utility>
#include <vector>

namespace gse {

ElasticThreadPool::ElasticThreadPool(ElasticThreadPoolOptions options)
    : options_([&] {
        options.max = std::max<size_t>({options.max, options.warm, 1});
        return options;
      }()) {
  std::vector<int64_t> ids;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < options_.warm; ++i) ids.push_back(ReserveWorkerLocked());
  }
  for (int64_t id : ids) LaunchReserved(id);
  if (options_.spare > 0) {
    try {
      keeper_ = std::thread([this] { Keep(); });
      has_keeper_ = true;
    } catch (const std::system_error&) {
      // No keeper: Enqueue starts the spares itself, as it would start a worker for a task.
      absl::MutexLock lock(&mu_);
      ++start_failures_;
    }
  }
}

ElasticThreadPool::~ElasticThreadPool() { Shutdown(); }

int64_t ElasticThreadPool::ReserveWorkerLocked() {
  ++alive_;
  ++starting_;
  ++launching_;
  return next_id_++;
}

bool ElasticThreadPool::LaunchReserved(int64_t id) {
  std::thread t;
  try {
    t = std::thread([this, id] { Work(id); });
  } catch (const std::system_error&) {
    // The process is out of threads (RLIMIT_NPROC, a pids cgroup): the task waits for a
    // worker that is running now, as it would at `max`.
    absl::MutexLock lock(&mu_);
    --alive_;
    --starting_;
    if (--launching_ == 0) keep_.SignalAll();  // Shutdown may wait for it
    ++start_failures_;
    return false;
  }
  absl::MutexLock lock(&mu_);
  workers_.emplace(id, std::move(t));
  ++started_;
  if (--launching_ == 0) keep_.SignalAll();  // Shutdown may wait for it
  if (!ended_.empty()) {  // it may have ended already (JoinEnded left it for later)
    reap_ = true;
    keep_.Signal();
  }
  return true;
}

size_t ElasticThreadPool::SparesMissingLocked() const {
  const size_t want = tasks_.size() + options_.spare;
  const size_t have = idle_ + starting_;
  if (want <= have || alive_ >= options_.max) return 0;
  return std::min(want - have, options_.max - alive_);
}

void ElasticThreadPool::Enqueue(std::function<void()> task) {
  if (!has_keeper_) JoinEnded();  // else the keeper joins them, off the caller's path
  std::vector<int64_t> ids;
  bool shut_down = false;
  {
    absl::MutexLock lock(&mu_);
    shut_down = shutdown_;
    if (!shut_down) {
      tasks_.push_back(std::move(task));
      if (tasks_.size() > idle_ + starting_ && alive_ >= options_.max) ++waited_at_max_;
      // Each idle (or starting) worker takes one task; a task beyond them gets a worker
      // started here, since it would wait otherwise. Spares are the keeper's (without a
      // keeper, started here too).
      const size_t want = tasks_.size() + (has_keeper_ ? 0 : options_.spare);
      while (want > idle_ + starting_ && alive_ < options_.max) {
        ids.push_back(ReserveWorkerLocked());
      }
      work_.Signal();
      if (has_keeper_ && SparesMissingLocked() > 0) {
        spares_wanted_ = true;
        keep_.Signal();
      }
    }
  }
  if (shut_down) {
    task();  // after Shutdown no worker is left to run it (httplib never does this)
    return;
  }
  // Outside the lock: idle workers take their tasks meanwhile.
  for (int64_t id : ids) {
    if (!LaunchReserved(id)) continue;
    absl::MutexLock lock(&mu_);
    ++started_by_enqueue_;
  }
}

void ElasticThreadPool::Keep() {
  mu_.Lock();
  while (true) {
    while (!shutdown_ && !reap_ && !spares_wanted_) keep_.Wait(&mu_);
    if (shutdown_) break;
    // Spares only when Enqueue asks: workers that end idle must not be replaced.
    std::vector<int64_t> ids;
    const size_t missing = spares_wanted_ ? SparesMissingLocked() : 0;
    spares_wanted_ = false;
    for (size_t n = missing; n > 0; --n) ids.push_back(ReserveWorkerLocked());
    mu_.Unlock();
    bool refused = false;
    for (int64_t id : ids) refused = !LaunchReserved(id) || refused;
    JoinEnded();
    mu_.Lock();
    // Out of threads: try again a little later, or when asked again, not in a loop.
    if (refused && !shutdown_) {
      spares_wanted_ = true;
      keep_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    }
  }
  mu_.Unlock();
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
      // Beyond the warm ones an idle worker ends, unless it is one of the spares kept while
      // other workers are busy.
      const bool spare_needed = busy_ > 0 && idle_ + starting_ < options_.spare;
      if (timed_out && tasks_.empty() && !shutdown_ && alive_ > options_.warm && !spare_needed) {
        break;
      }
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
  reap_ = true;
  keep_.Signal();  // the keeper joins it
  mu_.Unlock();
}

void ElasticThreadPool::JoinEnded() {
  std::vector<std::thread> done;
  {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> not_yet;  // ended before LaunchReserved recorded its thread
    for (int64_t id : ended_) {
      auto it = workers_.find(id);
      if (it == workers_.end()) {
        not_yet.push_back(id);
        continue;
      }
      done.push_back(std::move(it->second));
      workers_.erase(it);
    }
    ended_ = std::move(not_yet);
    reap_ = false;  // LaunchReserved sets it again for those left
  }
  for (std::thread& t : done) t.join();  // each has returned or is returning from Work()
}

void ElasticThreadPool::Shutdown() {
  std::map<int64_t, std::thread> all;
  std::thread keeper;
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    work_.SignalAll();
    keep_.SignalAll();
    // No reservation follows shutdown_; wait for the threads being created to be recorded
    // (a CondVar, not Mutex::Await: the TSan build cannot see absl evaluate a Condition).
    while (launching_ > 0) keep_.Wait(&mu_);
    all = std::move(workers_);
    workers_.clear();
    ended_.clear();
    keeper = std::move(keeper_);  // only Shutdown touches it after the constructor
  }
  if (keeper.joinable()) keeper.join();
  for (auto& [id, t] : all) t.join();
}

ElasticThreadPool::Stats ElasticThreadPool::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.threads = alive_;
  s.busy = busy_;
  s.queued = tasks_.size();
  s.started = started_;
  s.started_by_enqueue = started_by_enqueue_;
  s.start_failures = start_failures_;
  s.waited_at_max = waited_at_max_;
  return s;
}

}  // namespace gse
