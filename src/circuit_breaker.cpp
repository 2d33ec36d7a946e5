#include "idemledger/circuit_breaker.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <array>

#include "idemledger/connection.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

std::optional<BreakerState> parse_state(const std::optional<std::string>& text) {
  if (text == "closed") return BreakerState::kClosed;
  if (text == "open") return BreakerState::kOpen;
  if (text == "half_open") return BreakerState::kHalfOpen;
  return std::nullopt;
}

// This machine's name, for owner(); read once, it does not change under us.
std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  return host.data();
}

}  // namespace

std::string_view to_string(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed:
      return "closed";
    case BreakerState::kOpen:
      return "open";
    case BreakerState::kHalfOpen:
      return "half_open";
  }
  return "unknown";
}

std::string_view to_string(Admission admission) {
  switch (admission) {
    case Admission::kAllow:
      return "allow";
    case Admission::kProbe:
      return "probe";
    case Admission::kReject:
      return "reject";
  }
  return "unknown";
}

CircuitBreaker::CircuitBreaker(CircuitBreakerOptions options)
    : options_(std::move(options)),
      schema_status_(internal::validate_identifier("schema", options_.schema)),
      host_(options_.owner.empty() ? host_name() : std::string()),
      acquire_sql_(internal::with_schema(
          "SELECT {schema}.breaker_acquire($1, $2, $3::bigint, $4::bigint)", options_.schema)),
      record_sql_(internal::with_schema(
          "SELECT {schema}.breaker_record($1, $2, $3::boolean, $4::int)", options_.schema)) {
  if (options_.metrics != nullptr) {
    state_gauge_ = &options_.metrics->gauge(
        "idemledger_circuit_breaker_state",
        "Circuit breaker state as this process last saw it: 0 closed, 1 open, 2 half-open.",
        {{"breaker", options_.name}});
  }
}

std::string CircuitBreaker::owner() const {
  if (!options_.owner.empty()) return options_.owner;
  return fmt::format("{}:{}", host_, getpid());  // the pid per call: fork() makes a new owner
}

void CircuitBreaker::publish(BreakerState state) {
  if (state_gauge_ != nullptr) state_gauge_->set(static_cast<std::int64_t>(state));
}

BreakerDecision CircuitBreaker::acquire(Connection& conn) {
  const std::string open_ms = std::to_string(absl::ToInt64Milliseconds(options_.open_for));
  const std::string probe_ms = std::to_string(absl::ToInt64Milliseconds(options_.probe_lease));
  const std::string who = owner();
  absl::StatusOr<Result> r = schema_status_.ok()
                                 ? conn.execute(acquire_sql_, {Param(options_.name), Param(who),
                                                               Param(open_ms), Param(probe_ms)})
                                 : absl::StatusOr<Result>(schema_status_);
  internal::MutexLock lock(&mu_);
  if (!r.ok()) {
    const Admission local = acquire_locally();
    publish(state_);
    return {.admission = local, .local = true};
  }
  const std::optional<std::string>& answer = r->at(0, 0);
  const Admission shared = answer == "allow"   ? Admission::kAllow
                           : answer == "probe" ? Admission::kProbe
                                               : Admission::kReject;
  publish(shared == Admission::kAllow   ? BreakerState::kClosed
          : shared == Admission::kProbe ? BreakerState::kHalfOpen
                                        : BreakerState::kOpen);
  return {.admission = shared, .local = false};
}

void CircuitBreaker::record(Connection& conn, const BreakerDecision& decision, bool success) {
  {
    internal::MutexLock lock(&mu_);
    record_locally(decision.admission, success);
  }
  if (decision.admission == Admission::kReject) return;
  const std::string threshold = std::to_string(options_.failure_threshold);
  const std::string who = owner();
  absl::StatusOr<Result> r =
      schema_status_.ok()
          ? conn.execute(record_sql_, {Param(options_.name), Param(who),
                                       Param(success ? "true" : "false"), Param(threshold)})
          : absl::StatusOr<Result>(schema_status_);
  if (r.ok()) {
    if (std::optional<BreakerState> s = parse_state(r->at(0, 0))) publish(*s);
  } else {
    internal::MutexLock lock(&mu_);
    publish(state_);
  }
}

BreakerDecision CircuitBreaker::acquire() {
  internal::MutexLock lock(&mu_);
  const Admission local = acquire_locally();
  publish(state_);
  return {.admission = local, .local = true};
}

void CircuitBreaker::record(const BreakerDecision& decision, bool success) {
  internal::MutexLock lock(&mu_);
  record_locally(decision.admission, success);
  publish(state_);
}

BreakerState CircuitBreaker::local_state() const {
  internal::MutexLock lock(&mu_);
  return state_;
}

Admission CircuitBreaker::acquire_locally() {
  const absl::Time now = options_.now();
  switch (state_) {
    case BreakerState::kClosed:
      return Admission::kAllow;
    case BreakerState::kOpen:
      if (now < opened_at_ + options_.open_for) return Admission::kReject;
      break;
    case BreakerState::kHalfOpen:
      if (now < probe_until_) return Admission::kReject;  // a probe is out
      break;
  }
  state_ = BreakerState::kHalfOpen;
  probe_until_ = now + options_.probe_lease;
  return Admission::kProbe;
}

void CircuitBreaker::record_locally(Admission admission, bool success) {
  if (admission == Admission::kReject) return;
  if (success) {
    if (state_ == BreakerState::kClosed || admission == Admission::kProbe) {
      state_ = BreakerState::kClosed;
      failures_ = 0;
    }
    return;
  }
  ++failures_;
  if (admission == Admission::kProbe ||
      (state_ == BreakerState::kClosed && failures_ >= options_.failure_threshold)) {
    state_ = BreakerState::kOpen;
    opened_at_ = options_.now();
  }
}

}  // namespace idemledger
