// Mutex: the waits absl::Mutex callers rely on.
#include "idemledger/core/mutex.hpp"

#include <thread>
#include <vector>

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

// Eight threads wait, each for its own turn; each turn given wakes exactly
// the thread it was for (the unlocker evaluates the conditions), and none
// of the others returns before its turn.
TEST(Mutex, EachWaiterWakesWhenItsOwnConditionHolds) {
  constexpr int kThreads = 8;
  Mutex mu;
  int turn = -1;
  std::vector<int> order;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MutexLock lock(&mu);
      EXPECT_TRUE(mu.AwaitWithDeadline([&] { return turn == t; }, absl::Now() + absl::Seconds(30)));
      order.push_back(t);
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  for (int t = kThreads - 1; t >= 0; --t) {
    {
      MutexLock lock(&mu);
      turn = t;
    }
    for (absl::Time until = absl::Now() + absl::Seconds(10); absl::Now() < until;) {
      MutexLock lock(&mu);
      if (order.size() == static_cast<std::size_t>(kThreads - t)) break;
    }
  }
  for (auto& th : threads) th.join();
  std::vector<int> expected;
  for (int t = kThreads - 1; t >= 0; --t) expected.push_back(t);
  EXPECT_EQ(order, expected);
}

// Threads waiting for the same thing: one token given wakes one of them to
// take it, not the herd (counted as evaluations of the shared condition,
// which each woken thread makes once more); every token given is taken, each
// by its own thread, the last ones passed on from one woken thread to the next.
TEST(Mutex, OneTokenWakesOneOfTheThreadsWaitingForIt) {
  constexpr int kThreads = 6;
  Mutex mu;
  int tokens = 0, taken = 0, evaluations = 0;
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      MutexLock lock(&mu);
      EXPECT_TRUE(mu.AwaitWithDeadline(
          [&] {
            ++evaluations;
            return tokens > 0;
          },
          absl::Now() + absl::Seconds(30)));
      --tokens;
      ++taken;
    });
  }
  absl::SleepFor(absl::Milliseconds(100));  // every thread waits by now
  {
    MutexLock lock(&mu);
    evaluations = 0;
    tokens = 1;
  }
  absl::SleepFor(absl::Milliseconds(100));
  {
    MutexLock lock(&mu);
    EXPECT_EQ(taken, 1);
    // The unlocker's checks until it finds one that holds, the woken thread's
    // own, its unlock's checks of the others: at most 2 * kThreads - 1 (the
    // herd, every thread woken to check again, makes more than 2 * kThreads).
    EXPECT_LE(evaluations, 2 * kThreads - 1);
    tokens = kThreads - 1;  // the rest: one unlock, a chain of wake-ups
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(taken, kThreads);
  EXPECT_EQ(tokens, 0);
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
