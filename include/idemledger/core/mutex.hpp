// idemledger/core/mutex.hpp — the lock idemledger's classes hold: a mutex that
// ThreadSanitizer can see. Public because classes with a lock keep one as a
// member (so their headers need its definition); hosts may use it too.
//
// Why not absl::Mutex: Debian's abseil is built without TSan, so
// absl::Mutex's lock, unlock and wait happen in uninstrumented code and TSan
// reports every access it protects as a race — which would drown any real
// one. This is std::mutex and std::condition_variable (pthreads, which TSan
// intercepts) behind absl::Mutex's names, as an annotated capability, so
// ABSL_GUARDED_BY and clang's -Wthread-safety keep working.
//
// Mutex and MutexLock are thread-safe by definition; a Mutex is not movable.
#ifndef IDEMLEDGER_CORE_MUTEX_HPP
#define IDEMLEDGER_CORE_MUTEX_HPP

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace idemledger {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }

  // Like absl::Mutex, every unlock lets waiters re-check their condition.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    const bool wake = waiters_ > 0;
    mu_.unlock();
    if (wake) changed_.notify_all();
  }

  // AwaitWithDeadline()
  //
  // Releases the lock until `ready()` holds (checked with the lock held) or
  // `deadline` passes; returns whether it holds. REQUIRES: this is held.
  // Releasing it is an unlock too: what the caller changed before waiting
  // wakes the other waiters.
  template <typename Ready>
  bool AwaitWithDeadline(Ready ready, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
    if (waiters_ > 0) changed_.notify_all();  // they re-check once the wait below unlocks
    ++waiters_;
    bool ok = true;
    if (deadline == absl::InfiniteFuture()) {
      changed_.wait(held, ready);  // time_point::max() would overflow inside wait_until
    } else {
      ok = changed_.wait_until(held, absl::ToChronoTime(deadline), ready);
    }
    --waiters_;
    held.release();  // still locked: the caller's MutexLock unlocks it
    return ok;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int waiters_ = 0;  // guarded by mu_ (a std::mutex cannot carry the annotation)
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_MUTEX_HPP
