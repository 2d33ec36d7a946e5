// Mutex: the waits absl::Mutex callers rely on.
#include "idemledger/core/mutex.hpp"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace idemledger {
namespace {

// A thread that changes the state and then waits itself (RecordBatcher's
// follower closing a full batch) must wake the thread waiting for that
// change then, not at that thread's deadline.
TEST(Mutex, WaitingReleasesTheLockAndWakesWhoseConditionItMadeTrue) {
  Mutex mu;
  bool closed = false, done = false;
  absl::Duration leader_waited;
  std::thread leader([&] {
    MutexLock lock(&mu);
    const absl::Time start = absl::Now();
    EXPECT_TRUE(mu.AwaitWithDeadline([&] { return closed; }, start + absl::Seconds(30)));
    leader_waited = absl::Now() - start;
    done = true;
  });
  absl::SleepFor(absl::Milliseconds(50));  // the leader waits by now (if not, it sees `closed`)
  {
    MutexLock lock(&mu);
    closed = true;
    EXPECT_TRUE(mu.AwaitWithDeadline([&] { return done; }, absl::Now() + absl::Seconds(30)));
  }
  leader.join();
  EXPECT_LT(leader_waited, absl::Seconds(10));
}

TEST(Mutex, AwaitReturnsFalseAtTheDeadline) {
  Mutex mu;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(mu.AwaitWithDeadline([] { return false; }, start + absl::Milliseconds(30)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(30));
}

}  // namespace
}  // namespace idemledger
