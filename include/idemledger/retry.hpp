// idemledger/retry.hpp — re-run a whole transaction on retryable failures.
//
//   absl::StatusOr<Outcome> r = idemledger::with_retries(
//       idemledger::RetryPolicy{}, [&] { return ledger.process_deposit(conn, event); });
//
// The callback must be the *whole* unit of work (like pqxx::perform): it is run
// again from the start after a retryable status (is_retryable), with
// full-jitter exponential backoff, at most policy.max_attempts times. Because
// every ledger operation is idempotent, a retry after an in-doubt commit
// answers kAlreadyApplied when the first commit landed. Change host state only
// after success.
//
// with_retries() is thread-safe; each thread draws its own jitter.
#ifndef IDEMLEDGER_RETRY_HPP
#define IDEMLEDGER_RETRY_HPP

#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/status.hpp"

namespace idemledger {

struct RetryPolicy {
  int max_attempts = 6;  // the first try + 5 retries
  absl::Duration base_delay = absl::Milliseconds(5);
  absl::Duration max_delay = absl::Milliseconds(500);
};

// full_jitter_backoff()
//
// A uniformly random delay in [0, min(max_delay, base_delay * 2^retry)]
// (AWS "full jitter"): concurrent losers spread out instead of colliding again.
// `retry` counts from 0.
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
// succeeds, fails with a non-retryable status, or max_attempts is used up;
// returns the last result.
template <typename Work>
auto with_retries(const RetryPolicy& policy, Work&& work) -> std::invoke_result_t<Work&> {
  for (int attempt = 1;; ++attempt) {
    auto result = work();
    if (attempt >= policy.max_attempts || !is_retryable(internal::status_of(result))) {
      return result;
    }
    absl::SleepFor(full_jitter_backoff(policy, attempt - 1));
  }
}

}  // namespace idemledger

#endif  // IDEMLEDGER_RETRY_HPP
