#include "src/relay/internal/delivery_pool.hpp"

#include <algorithm>

#include "absl/time/clock.h"

namespace idemledger::internal {

DeliveryPool::DeliveryPool(int threads, std::function<void(const RelayMessage&)> deliver,
                           std::function<void(int)> in_flight_changed)
    : threads_(threads),
      deliver_(std::move(deliver)),
      in_flight_changed_(std::move(in_flight_changed)) {
  workers_.reserve(static_cast<std::size_t>(threads));
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
}

DeliveryPool::~DeliveryPool() { stop(); }

int DeliveryPool::free_slots(bool draining, int drain_limit) const {
  MutexLock lock(&mu_);
  const int free = threads_ - in_flight_;
  return draining ? std::min(free, drain_limit - dead_letters_in_flight_) : free;
}

void DeliveryPool::submit(std::vector<RelayMessage> messages) {
  MutexLock lock(&mu_);
  for (RelayMessage& m : messages) {
    ++in_flight_;
    if (m.from_dead_letters()) ++dead_letters_in_flight_;
    queue_.push_back(std::move(m));
  }
  // Reported under the lock: two workers finishing together must not publish their counts
  // out of order and leave the gauge at a stale value.
  in_flight_changed_(in_flight_);
}  // the unlock wakes the workers

void DeliveryPool::wait_for_slot(absl::Duration timeout) {
  MutexLock lock(&mu_);
  const std::uint64_t seen = finished_;
  mu_.AwaitWithDeadline([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return finished_ != seen; },
                        absl::Now() + timeout);
}

void DeliveryPool::work() {
  for (;;) {
    RelayMessage message;
    {
      MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(
          [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !queue_.empty(); },
          absl::InfiniteFuture());
      if (queue_.empty()) return;  // stopping, and everything handed over is delivered
      message = std::move(queue_.front());
      queue_.pop_front();
    }
    deliver_(message);
    MutexLock lock(&mu_);
    --in_flight_;
    if (message.from_dead_letters()) --dead_letters_in_flight_;
    ++finished_;
    in_flight_changed_(in_flight_);
  }
}

void DeliveryPool::stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace idemledger::internal
