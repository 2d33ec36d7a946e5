// idemledger/circuit_breaker.hpp — stop calling a dependency that is down,
// together, and let exactly one process find out when it is back.
//
//   idemledger::CircuitBreaker rpc({.name = "eth_rpc", .schema = "idemledger"});
//   idemledger::BreakerDecision d = rpc.acquire(conn);
//   if (d.admission == idemledger::Admission::kReject) return absl::UnavailableError("rpc down");
//   const bool ok = call_the_node();
//   rpc.record(conn, d, ok);
//
// closed: calls go through; failure_threshold consecutive failures open it.
// open: every call is refused for open_for; then the first caller to ask
// becomes the probe (half-open) and everyone else is still refused; its
// success closes the breaker, its failure opens it again. A probe whose
// process died is handed on after probe_lease.
//
// The state lives in PostgreSQL (<schema>.circuit_breakers, one row per name,
// changed under its row lock), so every replica opens, waits and probes as
// one: exactly one probe across all of them. When the database itself cannot
// answer, an in-process breaker with the same rules decides; it sees every
// outcome all along, so it is warm when it is needed.
//
// CircuitBreaker is thread-safe; each call needs a Connection no other
// thread uses meanwhile.
#ifndef IDEMLEDGER_CIRCUIT_BREAKER_HPP
#define IDEMLEDGER_CIRCUIT_BREAKER_HPP

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/internal/mutex.hpp"
#include "idemledger/metrics.hpp"
#include "idemledger/migrate.hpp"

namespace idemledger {

class Connection;

enum class BreakerState { kClosed, kOpen, kHalfOpen };
[[nodiscard]] std::string_view to_string(BreakerState state);

// What the breaker lets one call do.
enum class Admission {
  kAllow,   // closed: call
  kProbe,   // half-open, and this caller is the one trial call
  kReject,  // open (or someone else is probing): do not call
};
[[nodiscard]] std::string_view to_string(Admission admission);

struct BreakerDecision {
  Admission admission = Admission::kAllow;
  bool local = false;  // the database could not answer; the in-process breaker decided
};

struct CircuitBreakerOptions {
  std::string name;  // one per dependency ("eth_rpc", "notify_api")
  // REQUIRES: migrate() ran for it (otherwise every decision is local).
  std::string schema = std::string(kDefaultSchema);
  // This process among the replicas; empty means "<hostname>:<pid>" of the
  // calling process (so a breaker built before fork() still tells children apart).
  std::string owner;
  int failure_threshold = 5;
  absl::Duration open_for = absl::Seconds(30);
  absl::Duration probe_lease = absl::Seconds(10);
  // idemledger_circuit_breaker_state{breaker} (0 closed, 1 open, 2 half-open)
  // as last seen by this process; nullptr records nothing.
  MetricsRegistry* metrics = nullptr;
  // The in-process breaker's clock; tests inject one.
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

class CircuitBreaker {
 public:
  explicit CircuitBreaker(CircuitBreakerOptions options);

  // acquire()
  //
  // Asks the shared state whether a call may go; if the database cannot
  // answer, the in-process breaker decides (`local` is then true).
  [[nodiscard]] BreakerDecision acquire(Connection& conn);

  // record()
  //
  // The outcome of a call made under `decision` (kAllow or kProbe), written
  // to the shared state and to the in-process breaker.
  void record(Connection& conn, const BreakerDecision& decision, bool success);

  // acquire() / record() without a database session: the in-process breaker
  // alone (for callers that have no connection at hand).
  [[nodiscard]] BreakerDecision acquire();
  void record(const BreakerDecision& decision, bool success);

  // The in-process breaker's state.
  [[nodiscard]] BreakerState local_state() const;

  // Who this process is among the replicas (see CircuitBreakerOptions::owner).
  [[nodiscard]] std::string owner() const;

 private:
  Admission acquire_locally() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void record_locally(Admission admission, bool success) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void publish(BreakerState state);

  CircuitBreakerOptions options_;
  absl::Status schema_status_;
  std::string host_;  // for owner() when options_.owner is empty
  std::string acquire_sql_;
  std::string record_sql_;
  Gauge* state_gauge_ = nullptr;

  mutable internal::Mutex mu_;
  BreakerState state_ ABSL_GUARDED_BY(mu_) = BreakerState::kClosed;
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time opened_at_ ABSL_GUARDED_BY(mu_);
  absl::Time probe_until_ ABSL_GUARDED_BY(mu_);
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CIRCUIT_BREAKER_HPP
