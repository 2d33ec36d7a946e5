// The relay's delivery threads: a fixed set of workers taking claimed
// messages from a queue, and the count that bounds what the relay may claim.
// "In flight" is queued + being delivered, so the relay never claims more
// than it has threads for; dead letters are also bounded separately (the
// drain concurrency). stop() delivers everything already handed over.
//
// DeliveryPool is thread-safe.
#ifndef IDEMLEDGER_SRC_RELAY_INTERNAL_DELIVERY_POOL_HPP
#define IDEMLEDGER_SRC_RELAY_INTERNAL_DELIVERY_POOL_HPP

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "idemledger/core/mutex.hpp"
#include "idemledger/relay/policy.hpp"

namespace idemledger::internal {

class DeliveryPool {
 public:
  // `deliver` runs on a pool thread for each message; `in_flight_changed`
  // is told the new count after every change (for a gauge), under the pool's lock so the
  // counts arrive in order; it must not call back into the pool.
  DeliveryPool(int threads, std::function<void(const RelayMessage&)> deliver,
               std::function<void(int)> in_flight_changed);
  ~DeliveryPool();
  DeliveryPool(const DeliveryPool&) = delete;
  DeliveryPool& operator=(const DeliveryPool&) = delete;

  // How many more messages may be handed over now: free threads, and for
  // dead letters (draining) at most `drain_limit` in flight.
  [[nodiscard]] int free_slots(bool draining, int drain_limit) const;

  // Hands `messages` to the threads. REQUIRES: no more than free_slots().
  void submit(std::vector<RelayMessage> messages);

  // Returns once a delivery finished, or after `timeout`.
  void wait_for_slot(absl::Duration timeout);

  // Lets the threads finish everything handed over, then joins them.
  void stop();

 private:
  void work();

  const int threads_;
  const std::function<void(const RelayMessage&)> deliver_;
  const std::function<void(int)> in_flight_changed_;
  mutable Mutex mu_;
  std::deque<RelayMessage> queue_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int dead_letters_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::uint64_t finished_ ABSL_GUARDED_BY(mu_) = 0;  // deliveries done, for wait_for_slot()
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_RELAY_INTERNAL_DELIVERY_POOL_HPP
