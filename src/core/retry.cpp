#include "idemledger/core/retry.hpp"

#include <algorithm>
#include <cstdint>

#include "absl/random/random.h"
#include "src/core/internal/random.hpp"

namespace idemledger {

absl::Duration full_jitter_backoff(const RetryPolicy& policy, int retry) {
  // Integer nanoseconds throughout: the cap is reached long before the shift
  // could overflow, and it keeps floating point out of this library.
  const std::int64_t base = absl::ToInt64Nanoseconds(policy.base_delay);
  const std::int64_t cap = absl::ToInt64Nanoseconds(policy.max_delay);
  std::int64_t ceiling = base;
  for (int i = 0; i < retry && ceiling < cap; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap);
  if (ceiling <= 0) return absl::ZeroDuration();
  return absl::Nanoseconds(absl::Uniform<std::int64_t>(
      absl::IntervalClosed, internal::process_local_bitgen(), 0, ceiling));
}

}  // namespace idemledger
