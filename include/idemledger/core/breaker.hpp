// idemledger/core/breaker.hpp — circuit-breaker rules in one process.
//
//   idemledger::LocalBreaker rpc({.name = "eth_rpc"});
//   idemledger::BreakerDecision d = rpc.acquire();
//   if (d.admission == idemledger::Admission::kReject) return absl::UnavailableError("rpc down");
//   rpc.record(d, call_the_node().ok());
//
// closed: calls go through; failure_threshold consecutive failures open it.
// open: every call is refused for open_for; then the first caller to ask
// becomes the probe (half-open) and everyone else is still refused; its
// success closes the breaker, its failure opens it again. A probe that never
// reports back is handed on after probe_lease.
//
// These are the rules only, in this process. relay/circuit_breaker.hpp keeps
// the same state in PostgreSQL so every replica opens, waits and probes as one,
// with a LocalBreaker as its fallback when the database cannot answer.
//
// LocalBreaker is thread-safe.
#ifndef IDEMLEDGER_CORE_BREAKER_HPP
#define IDEMLEDGER_CORE_BREAKER_HPP

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/mutex.hpp"

namespace idemledger {

enum class BreakerState { kClosed, kOpen, kHalfOpen };
inline constexpr EnumNames<BreakerState, 3> kBreakerStateNames{{{
    {BreakerState::kClosed, "closed"},
    {BreakerState::kOpen, "open"},
    {BreakerState::kHalfOpen, "half_open"},
}}};
constexpr const auto& enum_names(BreakerState) { return kBreakerStateNames; }

// What the breaker lets one call do.
enum class Admission {
  kAllow,   // closed: call
  kProbe,   // half-open, and this caller is the one trial call
  kReject,  // open (or someone else is probing): do not call
};
inline constexpr EnumNames<Admission, 3> kAdmissionNames{{{
    {Admission::kAllow, "allow"},
    {Admission::kProbe, "probe"},
    {Admission::kReject, "reject"},
}}};
constexpr const auto& enum_names(Admission) { return kAdmissionNames; }

struct BreakerDecision {
  Admission admission = Admission::kAllow;
  bool local = false;  // decided by this process alone (no shared state asked, or it failed)
};

struct BreakerOptions {
  std::string name;  // one per dependency ("eth_rpc", "relay:notify_api")
  int failure_threshold = 5;
  absl::Duration open_for = absl::Seconds(30);
  absl::Duration probe_lease = absl::Seconds(10);
  // idemledger_circuit_breaker_state{breaker} (0 closed, 1 open, 2 half-open)
  // as last seen by this process; nullptr records nothing.
  prometheus::Registry* metrics = nullptr;
  // The clock; tests inject one.
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class LocalBreaker {
 public:
  explicit LocalBreaker(BreakerOptions options);

  // acquire(): may a call go now?
  [[nodiscard]] BreakerDecision acquire();
  // record(): the outcome of a call made under `decision`.
  void record(const BreakerDecision& decision, bool success);

  [[nodiscard]] BreakerState state() const;
  [[nodiscard]] const BreakerOptions& options() const { return options_; }

  // Sets the published state gauge (what this process last saw, locally or
  // from the shared state).
  void publish(BreakerState state) const;

 private:
  Admission acquire_locked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BreakerOptions options_;
  prometheus::Gauge* state_gauge_ = nullptr;
  mutable Mutex mu_;
  BreakerState state_ ABSL_GUARDED_BY(mu_) = BreakerState::kClosed;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time opened_at_ ABSL_GUARDED_BY(mu_);
  absl::Time probe_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_BREAKER_HPP
