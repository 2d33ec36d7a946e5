#include "idemledger/core/retry.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "gtest/gtest.h"

namespace idemledger {
namespace {

TEST(FullJitterBackoff, StaysWithinTheExponentialCeilingAndTheCap) {
  const RetryPolicy policy{.max_attempts = 6,
                           .base_delay = absl::Milliseconds(10),
                           .max_delay = absl::Milliseconds(100)};
  for (int retry = 0; retry < 12; ++retry) {
    absl::Duration ceiling = absl::Milliseconds(10);
    for (int i = 0; i < retry; ++i) ceiling = std::min(ceiling * 2, absl::Milliseconds(100));
    for (int draw = 0; draw < 200; ++draw) {
      const absl::Duration d = full_jitter_backoff(policy, retry);
      EXPECT_GE(d, absl::ZeroDuration());
      EXPECT_LE(d, ceiling) << "retry " << retry;
    }
  }
}

TEST(FullJitterBackoff, SpreadsDelays) {
  const RetryPolicy policy{
      .max_attempts = 6, .base_delay = absl::Seconds(1), .max_delay = absl::Seconds(60)};
  std::set<std::int64_t> distinct;
  for (int i = 0; i < 50; ++i)
    distinct.insert(absl::ToInt64Microseconds(full_jitter_backoff(policy, 3)));
  EXPECT_GT(distinct.size(), 40u);
}

TEST(WithRetries, RerunsRetryableFailuresUpToTheLimit) {
  const RetryPolicy policy{
      .max_attempts = 4, .base_delay = absl::Microseconds(1), .max_delay = absl::Microseconds(10)};
  int calls = 0;
  absl::Status s = with_retries(policy, [&] {
    ++calls;
    return absl::UnavailableError("lock not available");
  });
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
}

TEST(WithRetries, StopsOnSuccessOrPermanentFailure) {
  const RetryPolicy policy{
      .max_attempts = 5, .base_delay = absl::Microseconds(1), .max_delay = absl::Microseconds(10)};
  int calls = 0;
  absl::StatusOr<int> r = with_retries(policy, [&]() -> absl::StatusOr<int> {
    if (++calls < 3) return absl::AbortedError("deadlock");
    return 42;
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(*r, 42);
  calls = 0;
  absl::Status bad = with_retries(policy, [&] {
    ++calls;
    return absl::InvalidArgumentError("bad amount");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
}

TEST(WithRetries, ATimeBudgetBoundsRetriesNotACount) {
  const RetryPolicy policy{.budget = absl::Milliseconds(200),
                           .base_delay = absl::Milliseconds(1),
                           .max_delay = absl::Milliseconds(20)};
  int calls = 0;
  const absl::Time start = absl::Now();
  absl::Status s = with_retries(policy, [&] {
    ++calls;
    return absl::UnavailableError("lock not available");
  });
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_GT(calls, 6) << "far more tries than the old fixed count, within the budget";
  EXPECT_LE(took, absl::Milliseconds(200) + absl::Milliseconds(100)) << "never sleeps past it";
}

TEST(WithRetries, AnInDoubtCommitIsRetriedOnlyWhenTheOperationIsKeyed) {
  const RetryPolicy policy{.base_delay = absl::Microseconds(1),
                           .max_delay = absl::Microseconds(10)};
  const auto in_doubt = [] {
    absl::Status s = absl::UnavailableError("connection lost before the COMMIT's answer");
    mark_commit_in_doubt(s);
    return s;
  };
  int calls = 0;
  absl::Status plain = with_retries(policy, [&] {
    ++calls;
    return in_doubt();
  });
  EXPECT_EQ(calls, 1) << "an unkeyed write may have landed: the caller must find out";
  EXPECT_TRUE(commit_in_doubt(plain));
  calls = 0;
  absl::StatusOr<int> keyed = with_retries(policy, [&]() -> absl::StatusOr<int> {
    if (++calls == 1) return mark_idempotent(in_doubt());
    return 7;  // the retry learns what the first try did
  });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(*keyed, 7);
}

}  // namespace
}  // namespace idemledger

namespace idemledger {
namespace {

// Forked workers must not back off in lockstep: each process draws its own jitter.
TEST(FullJitterBackoff, ForkedChildrenDrawDifferentJitter) {
  const RetryPolicy policy{
      .max_attempts = 6, .base_delay = absl::Seconds(1), .max_delay = absl::Seconds(60)};
  (void)full_jitter_backoff(policy, 5);  // the parent's generator is seeded before fork
  std::set<std::int64_t> draws;
  for (int child = 0; child < 4; ++child) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      const std::int64_t us = absl::ToInt64Microseconds(full_jitter_backoff(policy, 5));
      (void)!write(fds[1], &us, sizeof us);
      _exit(0);
    }
    std::int64_t us = -1;
    ASSERT_EQ(read(fds[0], &us, sizeof us), static_cast<ssize_t>(sizeof us));
    waitpid(pid, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
    draws.insert(us);
  }
  EXPECT_EQ(draws.size(), 4u);
}

}  // namespace
}  // namespace idemledger
