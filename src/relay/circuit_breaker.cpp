#include "idemledger/relay/circuit_breaker.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

#include "idemledger/core/connection.hpp"

namespace idemledger {
namespace {

// This machine's name, for owner(); read once, it does not change under us.
std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return host.data();
}

}  // namespace

CircuitBreaker::CircuitBreaker(CircuitBreakerOptions options)
    : options_(std::move(options)),
      host_(options_.owner.empty() ? host_name() : std::string()),
      acquire_sql_(options_.schema.qualify(
          "SELECT {schema}.breaker_acquire($1, $2, $3::bigint, $4::bigint)")),
      record_sql_(
          options_.schema.qualify("SELECT {schema}.breaker_record($1, $2, $3::boolean, $4::int)")),
      local_({.name = options_.name,
              .failure_threshold = options_.failure_threshold,
              .open_for = options_.open_for,
              .probe_lease = options_.probe_lease,
              .metrics = options_.metrics,
              .now = options_.now}) {}

std::string CircuitBreaker::owner() const {
  if (!options_.owner.empty()) return options_.owner;
  return fmt::format("{}:{}", host_, getpid());  // the pid per call: fork() makes a new owner
}

BreakerDecision CircuitBreaker::acquire(Connection& conn) {
  absl::StatusOr<Result> r = conn.execute(
      acquire_sql_, Params(options_.name, owner(), options_.open_for, options_.probe_lease));
  const absl::StatusOr<Admission> shared = r.ok() ? read_single<Admission>(*r, "breaker_acquire")
                                                  : absl::StatusOr<Admission>(r.status());
  if (!shared.ok()) return local_.acquire();
  local_.publish(*shared == Admission::kAllow   ? BreakerState::kClosed
                 : *shared == Admission::kProbe ? BreakerState::kHalfOpen
                                                : BreakerState::kOpen);
  return {.admission = *shared, .local = false};
}

void CircuitBreaker::record(Connection& conn, const BreakerDecision& decision, bool success) {
  local_.record(decision, success);
  if (decision.admission == Admission::kReject) return;
  absl::StatusOr<Result> r = conn.execute(
      record_sql_, Params(options_.name, owner(), success, options_.failure_threshold));
  if (!r.ok() || r->rows.size() != 1) return;  // the local state stays published
  if (absl::StatusOr<BreakerState> s = r->row(0).get<BreakerState>(0); s.ok()) local_.publish(*s);
}

}  // namespace idemledger
