#include "transport/two_level/cross_worker.h"

#include <pthread.h>

namespace hvdlite::transport::two_level {

CrossWorker::CrossWorker() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "hvdlite-cross");
    loop();
  });
}

CrossWorker::~CrossWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void CrossWorker::post(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  changed_.notify_all();
}

void CrossWorker::waitOldest() {
  std::exception_ptr failure;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !finished_.empty(); });
    failure = finished_.front();
    finished_.pop_front();
  }
  if (failure) std::rethrow_exception(failure);
}

void CrossWorker::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return queue_.empty(); });
  finished_.clear();
}

void CrossWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    auto job = queue_.front();
    lock.unlock();
    std::exception_ptr failure;
    try {
      job();
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    queue_.pop_front();  // only now: drain() waits for the job to be over
    finished_.push_back(failure);
    changed_.notify_all();
  }
}

}  // namespace hvdlite::transport::two_level
