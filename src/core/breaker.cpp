#include "idemledger/core/breaker.hpp"

namespace idemledger {

LocalBreaker::LocalBreaker(BreakerOptions options) : options_(std::move(options)) {
  if (options_.metrics != nullptr) {
    state_gauge_ =
        &gauge(*options_.metrics, "idemledger_circuit_breaker_state",
               "Circuit breaker state as this process last saw it: 0 closed, 1 open, 2 half-open.",
               {{"breaker", options_.name}});
  }
}

void LocalBreaker::publish(BreakerState state) const {
  if (state_gauge_ != nullptr) state_gauge_->Set(static_cast<double>(state));
}

BreakerState LocalBreaker::state() const {
  MutexLock lock(&mu_);
  return state_;
}

BreakerDecision LocalBreaker::acquire() {
  MutexLock lock(&mu_);
  const Admission admission = acquire_locked();
  publish(state_);
  return {.admission = admission, .local = true};
}

Admission LocalBreaker::acquire_locked() {
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

void LocalBreaker::record(const BreakerDecision& decision, bool success) {
  MutexLock lock(&mu_);
  if (decision.admission == Admission::kReject) return;
  if (success) {
    if (state_ == BreakerState::kClosed || decision.admission == Admission::kProbe) {
      state_ = BreakerState::kClosed;
      failures_ = 0;
    }
  } else {
    ++failures_;
    if (decision.admission == Admission::kProbe ||
        (state_ == BreakerState::kClosed && failures_ >= options_.failure_threshold)) {
      state_ = BreakerState::kOpen;
      opened_at_ = options_.now();
    }
  }
  publish(state_);
}

}  // namespace idemledger
