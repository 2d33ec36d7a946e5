// Claimers — which of outbox_worker's threads claim events now.
//
// Thread 0 always claims. The others are spares: each holds its session and
// claims nothing while thread 0 keeps up, and joins in while the queue is
// deep (the last claim came back full) or while thread 0 has spent longer
// than `stuck_after` in one claim (waiting on a finality node, or on a lock);
// it goes back to standby after a claim of its own comes back short.
//
// Why: without a backlog, more claimers only cut the same events into
// smaller claims, each paying a claim's fixed work, and claims with users in
// common queue on the same account locks. On 2 cores, 2 workers with both
// threads always claiming ran deposits at 0.7-0.85x the events/s of one
// claimer and a spare each, at about twice the workers' server CPU per event
// (docs/performance.md, "One claimer per worker"). The price is paid where
// the machine is saturated (the demo's mix): more throughput, and the queue
// that forms sits in `pending` rather than before intake's 200, so
// time-to-confirm's tail grows. IDEMLEDGER_SPARE_AFTER_MS=0 makes every
// thread claim, as before.
//
// Thread-safety: every member may be called from any thread.
#ifndef IDEMLEDGER_EXAMPLES_OUTBOX_WORKER_CLAIMERS_HPP
#define IDEMLEDGER_EXAMPLES_OUTBOX_WORKER_CLAIMERS_HPP

#include <cstddef>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/mutex.hpp"

namespace example {

class Claimers {
 public:
  Claimers(std::size_t batch_size, absl::Duration stuck_after)
      : batch_size_(batch_size), stuck_after_(stuck_after) {}

  // Thread 0, around each claim (Dispatcher::run_once).
  void first_started() {
    idemledger::MutexLock lock(&mu_);
    first_since_ = absl::Now();
  }
  void first_finished() {
    idemledger::MutexLock lock(&mu_);
    first_since_ = absl::InfiniteFuture();
  }

  // Any thread, after a claim that answered: `count` events claimed. A full
  // claim wakes the spares at once.
  void claimed(std::size_t count) {
    idemledger::MutexLock lock(&mu_);
    deep_ = count >= batch_size_;
  }

  // A spare: waits at most `tick` for a reason to claim; true if it should
  // claim now. Call again after `tick` to see whether thread 0 got stuck.
  bool spare_may_claim(absl::Duration tick) {
    idemledger::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline([this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return deep_; },
                          absl::Now() + tick);
    return deep_ || absl::Now() - first_since_ > stuck_after_;
  }

 private:
  const std::size_t batch_size_;
  const absl::Duration stuck_after_;
  idemledger::Mutex mu_;
  bool deep_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time first_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
};

}  // namespace example

#endif  // IDEMLEDGER_EXAMPLES_OUTBOX_WORKER_CLAIMERS_HPP
