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
#include <memory>
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
  // (the lock still held) and wakes only a waiter whose condition holds. It
  // wakes at most one, and only once it has let go of the lock: the woken
  // thread finds the lock free instead of waking to wait for it, and of
  // several threads waiting for the same thing, one wakes to take it, not
  // all. Whoever wakes passes the turn on when it lets go in its turn, so
  // every waiter whose condition holds is woken, one after another.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    const std::shared_ptr<Waiter> next = take_ready_waiter(nullptr);
    mu_.unlock();
    if (next) next->cv.notify_one();
  }

  // AwaitWithDeadline()
  //
  // Releases the lock until `ready()` holds (checked with the lock held) or
  // `deadline` passes; returns whether it holds. REQUIRES: this is held.
  // Releasing it is an unlock too: what the caller changed before waiting
  // wakes the waiter it concerns. `ready` may be evaluated by other threads
  // (under the lock) while this one waits.
  template <typename Ready>
  bool AwaitWithDeadline(Ready ready, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> held(mu_, std::adopt_lock);
    bool ok = true;
    if (!ready()) {
      // On the heap, shared: an unlocker that chose it notifies it after
      // letting go of the lock, when this thread may already have returned.
      const auto me = std::make_shared<Waiter>(ready);
      me->next = waiters_;
      waiters_ = me.get();
      for (;;) {
        if (const std::shared_ptr<Waiter> next = take_ready_waiter(me.get())) {
          held.unlock();  // waiting lets go of the lock: pass the turn on first
          next->cv.notify_one();
          held.lock();
        } else if (!me->woken) {  // (chosen while the lock was let go: no sleep)
          if (deadline == absl::InfiniteFuture()) {
            me->cv.wait(held);  // time_point::max() would overflow inside wait_until
          } else {
            me->cv.wait_until(held, absl::ToChronoTime(deadline));
          }
        }
        if (ready()) break;
        if (absl::Now() >= deadline) {
          ok = false;
          break;
        }
        me->woken = false;  // spurious, or another thread got there first
      }
      unlink(me.get());
    }
    held.release();  // still locked: the caller's MutexLock unlocks it
    return ok;
  }

 private:
  // A waiting thread: its condition and its own condition variable, listed
  // while it waits. Its fields are only touched with mu_ held, but for the
  // notify that wakes it.
  struct Waiter : std::enable_shared_from_this<Waiter> {
    template <typename Ready>
    explicit Waiter(Ready& r)
        : ready(&r), check([](const void* f) { return (*static_cast<const Ready*>(f))(); }) {}
    const void* ready;
    bool (*check)(const void*);
    std::condition_variable cv;
    bool woken = false;  // chosen, and not yet back to check its condition
    Waiter* next = nullptr;
  };

  // The first waiter but `except` whose condition holds and that is not
  // already woken, marked woken; null if none. Called with mu_ held.
  std::shared_ptr<Waiter> take_ready_waiter(const Waiter* except) {
    for (Waiter* w = waiters_; w != nullptr; w = w->next) {
      if (w != except && !w->woken && w->check(w->ready)) {
        w->woken = true;
        return w->weak_from_this().lock();  // (owned by its waiting thread: never null)
      }
    }
    return nullptr;
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
