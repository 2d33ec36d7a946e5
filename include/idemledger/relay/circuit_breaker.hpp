// idemledger/relay/circuit_breaker.hpp — stop calling a dependency that is
// down, together, and let exactly one process find out when it is back.
//
//   idemledger::CircuitBreaker api({.name = "notify_api", .schema = "idemledger"});
//   idemledger::BreakerDecision d = api.acquire(conn);
//   if (d.admission == idemledger::Admission::kReject) return absl::UnavailableError("api down");
//   const bool ok = call_the_api();
//   api.record(conn, d, ok);
//
// The rules are LocalBreaker's (core/breaker.hpp). The state lives in
// PostgreSQL (<schema>.circuit_breakers, one row per name, changed under its
// row lock), so every replica opens, waits and probes as one: exactly one
// probe across all of them. When the database itself cannot answer, the
// in-process breaker decides; it sees every outcome all along, so it is warm
// when it is needed.
//
// CircuitBreaker is thread-safe; each call needs a Connection no other
// thread uses meanwhile.
#ifndef IDEMLEDGER_RELAY_CIRCUIT_BREAKER_HPP
#define IDEMLEDGER_RELAY_CIRCUIT_BREAKER_HPP

#include <functional>
#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "idemledger/core/breaker.hpp"
#include "idemledger/core/metrics.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct CircuitBreakerOptions {
  std::string name;  // one per dependency ("eth_rpc", "notify_api")
  // REQUIRES: migrate() ran for it (otherwise every decision is local).
  Schema schema = kDefaultSchema;
  // This process among the replicas; empty means "<hostname>:<pid>" of the
  // calling process (so a breaker built before fork() still tells children apart).
  std::string owner;
  int failure_threshold = 5;
  absl::Duration open_for = absl::Seconds(30);
  absl::Duration probe_lease = absl::Seconds(10);
  // idemledger_circuit_breaker_state{breaker} as last seen; nullptr records nothing.
  prometheus::Registry* metrics = nullptr;
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

  // The in-process breaker (for callers without a session at hand).
  [[nodiscard]] LocalBreaker& local() { return local_; }
  [[nodiscard]] BreakerState local_state() const { return local_.state(); }

  // Who this process is among the replicas (see CircuitBreakerOptions::owner).
  [[nodiscard]] std::string owner() const;

 private:
  const CircuitBreakerOptions options_;
  std::string host_;  // for owner() when options_.owner is empty
  std::string acquire_sql_;
  std::string record_sql_;
  LocalBreaker local_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_RELAY_CIRCUIT_BREAKER_HPP
