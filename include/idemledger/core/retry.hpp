// idemledger/core/retry.hpp — re-run a whole unit of work on retryable failures.
//
//   absl::StatusOr<Outcome> r = idemledger::with_retries(
//       idemledger::RetryPolicy{}, [&] { return ledger.process_deposit(conn, event); });
//
// The callback must be the *whole* unit of work (like pqxx::perform): it is
// run again from the start after a retryable status (is_retryable()), with
// full-jitter exponential backoff, until it succeeds, fails for good, or the
// policy's time budget (and, if set, attempt count) is spent. An in-doubt
// commit is retried only for keyed operations (status.hpp): for those the
// retry answers kAlreadyApplied when the first commit landed; any other
// callback gets the in-doubt status back and must find out itself. Change
// host state only after success.
//
// with_retries() is thread-safe; each thread draws its own jitter.
#ifndef IDEMLEDGER_CORE_RETRY_HPP
#define IDEMLEDGER_CORE_RETRY_HPP

#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/status.hpp"

namespace idemledger {

struct RetryPolicy {
  // How long to keep retrying, from the first try. The default outlasts the
  // ledger's default lock_timeout (2 s), so ordinary contention — a debit's
  // NOWAIT meeting another debit of the same account — is ridden out, and a
  // real outage still surfaces within seconds.
  absl::Duration budget = absl::Seconds(3);
  // At most this many tries in all; 0: only the budget bounds them.
  int max_attempts = 0;
  absl::Duration base_delay = absl::Milliseconds(5);
  absl::Duration max_delay = absl::Milliseconds(250);
};

// full_jitter_backoff()
//
// A uniformly random delay in [0, min(max_delay, base_delay * 2^retry)]
// (AWS "full jitter"): concurrent losers spread out instead of colliding
// again. `retry` counts from 0.
[[nodiscard]] absl::Duration full_jitter_backoff(const RetryPolicy& policy, int retry);

namespace internal {
inline const absl::Status& status_of(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& status_of(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

// with_retries()
//
// Calls `work()` (returning absl::Status or absl::StatusOr<T>) until it
// succeeds, fails with a status is_retryable() says no to, or the next try
// would start after the budget (or exceed max_attempts); returns the last
// result.
template <typename Work>
auto with_retries(const RetryPolicy& policy, Work&& work) -> std::invoke_result_t<Work&> {
  const absl::Time give_up_after = absl::Now() + policy.budget;
  for (int attempt = 1;; ++attempt) {
    auto result = work();
    if (!is_retryable(internal::status_of(result)) ||
        (policy.max_attempts > 0 && attempt >= policy.max_attempts)) {
      return result;
    }
    const absl::Duration pause = full_jitter_backoff(policy, attempt - 1);
    if (absl::Now() + pause > give_up_after) return result;
    absl::SleepFor(pause);
  }
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_RETRY_HPP
