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
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace idemledger {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }

  // Like absl::Mutex, the unlocking thread evaluates the waiters' conditions
  // (the lock still held) and wakes only those whose condition now holds:
  // no herd of threads waking to find they must sleep again.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    wake_ready_waiters();
    mu_.unlock();
  }

  // AwaitWithDeadline()
  //
  // Releases the lock until `ready()` holds (checked with the lock held) or
  // `deadline` passes; returns whether it holds. REQUIRES: this is held.
  // Releasing it is an unlock too: what the caller changed before waiting
  // wakes the waiters it concerns. `ready` may be evaluated by other threads
  // (under the lock) while this one waits.
  template <typename Ready>
  bool AwaitWithDeadline(Ready ready, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
    bool ok = true;
    if (!ready()) {
      Waiter me(ready);
      wake_ready_waiters();  // waiting lets go of the lock: an unlock
      me.next = waiters_;
      waiters_ = &me;
      for (;;) {
        if (deadline == absl::InfiniteFuture()) {
          me.cv.wait(held);  // time_point::max() would overflow inside wait_until
        } else {
          me.cv.wait_until(held, absl::ToChronoTime(deadline));
        }
        if (ready()) break;
        if (absl::Now() >= deadline) {
          ok = false;
          break;
        }
        me.woken = false;  // spurious, or another thread got there first
      }
      unlink(&me);
    }
    held.release();  // still locked: the caller's MutexLock unlocks it
    return ok;
  }

 private:
  // A waiting thread: its condition and its own condition variable, on its
  // stack, listed while it waits. Only touched with mu_ held.
  struct Waiter {
    template <typename Ready>
    explicit Waiter(Ready& r)
        : ready(&r), check([](const void* f) { return (*static_cast<const Ready*>(f))(); }) {}
    const void* ready;
    bool (*check)(const void*);
    std::condition_variable cv;
    bool woken = false;
    Waiter* next = nullptr;
  };

  void wake_ready_waiters() {
    for (Waiter* w = waiters_; w != nullptr; w = w->next) {
      if (!w->woken && w->check(w->ready)) {
        w->woken = true;
        w->cv.notify_one();  // it runs once this thread lets go of mu_
      }
    }
  }

  void unlink(const Waiter* me) {
    for (Waiter** p = &waiters_; *p != nullptr; p = &(*p)->next) {
      if (*p == me) {
        *p = me->next;
        return;
      }
    }
  }

  std::mutex mu_;
  Waiter* waiters_ = nullptr;  // guarded by mu_ (a std::mutex cannot carry the annotation)
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
