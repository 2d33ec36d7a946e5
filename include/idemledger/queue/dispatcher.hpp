// idemledger/queue/dispatcher.hpp — PostgreSQL as the queue: claim, apply, retry, recover.
//
// Intake records events as `pending`; workers claim due ones with
// FOR UPDATE SKIP LOCKED into `enqueued` under a lease and apply them through
// the Ledger — a claim's events together in one transaction (process_steps),
// a credit waiting for chain finality in its own. run_once() claims and
// applies a claim of events that wait for nothing in ONE transaction and one
// commit: a crash before it rolls the claim back with the apply, so the
// events are pending again with no lease to wait out. A claim that holds a
// credit waiting for finality commits first and is applied after (the
// oracle is never called inside a transaction). Credits
// and single-phase debits, and the steps of two-phase withdrawals
// (withdrawal_requested holds, withdrawal_confirmed posts, withdrawal_failed
// voids; a post or void the hold no longer allows ends failed with a dead
// letter — and the ledger's critical alert, since the chain and the ledger
// then disagree). No broker can lose a task because there is none: a claim that is never finished
// (worker killed, hung) expires and is recovered.
//
//   idemledger::Dispatcher dispatcher(ledger, {.schema = "idemledger"});
//   for (;;) {
//     absl::StatusOr<int> n = dispatcher.run_once(conn);   // claim + apply a batch
//     dispatcher.recover_stale(conn);                      // expired leases -> pending
//   }
//
// Guarantees:
// - Each event is applied exactly once whatever the number of workers,
//   crashes or redeliveries (the Ledger's guarantee; the queue only decides
//   when, never whether twice).
// - Every claimed event ends confirmed or failed: a retryable failure goes
//   back to pending with full-jitter backoff (base 1 s, cap 60 s) at most
//   max_retries times; a permanent one, or exhausted retries, ends failed with
//   a dead_letter_queue row written in the same transaction. An expired lease
//   returns the event to pending at most max_recoveries times, then failed +
//   dead letter + critical alert.
// - One bad event never rolls back another's work: events are applied one
//   transaction each, or together in one Ledger::process_steps where each
//   runs as if alone and a refusal is that event's answer.
// - A claim made in the apply's transaction (run_once()) commits with it or
//   not at all: a worker killed in between leaves its events pending, due at
//   once, with no lease, no retry and no recovery counted.
//
// Dispatcher is thread-safe (configuration only); each call needs a
// Connection no other thread uses meanwhile.
#ifndef IDEMLEDGER_QUEUE_DISPATCHER_HPP
#define IDEMLEDGER_QUEUE_DISPATCHER_HPP

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/finality.hpp"
#include "idemledger/core/log.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/metrics.hpp"
#include "idemledger/queue/dlq.hpp"

namespace idemledger {

class Connection;

struct DispatcherOptions {
  Schema schema = kDefaultSchema;
  int batch_size = 32;
  // How long a claim is exclusive; past it, recover_stale() takes it back.
  absl::Duration lease = absl::Seconds(30);
  // Durable retries of transient failures: full jitter in [0, min(cap, base * 2^n)].
  int max_retries = 5;
  absl::Duration retry_base = absl::Seconds(1);
  absl::Duration retry_cap = absl::Seconds(60);
  // Expired leases tolerated per event before it is failed.
  int max_recoveries = 10;
  // Receives critical alerts; nullptr means stderr_alert_sink().
  AlertSink* alerts = nullptr;
  // Where a failure goes when the database cannot record it (the session
  // died): a spooled dead letter. The lease still brings the event back.
  const DeadLetterQueue* dead_letters = nullptr;
  // Retries, dead letters, recoveries and time-to-confirm; nullptr records
  // nothing. (Give the Ledger the same object for outcomes and latency.)
  LedgerMetrics* metrics = nullptr;
  // Credits that carry a tx_hash wait until this oracle says their chain
  // transaction is final (not yet, or the oracle cannot answer: back to
  // pending for finality_recheck, retry budget untouched; reverted, or any
  // other permanent answer: failed + dead letter "reverted" / the code's
  // name). nullptr credits at once.
  FinalityOracle* finality = nullptr;
  absl::Duration finality_recheck = absl::Seconds(15);
  // A credit still not final this long after intake recorded it (a dropped
  // transaction, a node that never answers) fails with a dead letter
  // "not_final_in_time" for an operator, instead of waiting forever.
  absl::Duration finality_deadline = absl::Hours(24);
  // One structured line per processed event (with intake's trace id) and per
  // recovery; nullptr logs nothing.
  LogSink* log = nullptr;
  // run_once() applies a claim's events that wait for nothing (hold steps
  // too) in one Ledger::process_steps (one transaction); false: one by one.
  bool apply_in_batches = true;
  // run_once() claims and applies a claim whose events all wait for nothing
  // in one transaction (BEGIN, claim, apply, COMMIT: one commit for both);
  // false: the claim commits first, as claim() then process_all() do. Needs
  // apply_in_batches. (Measured: docs/performance.md, "Claim and apply in
  // one commit".)
  bool apply_with_claim = true;
  // That shared transaction's idle limit (TransactionOptions::idle_limit):
  // the claimed events stay locked until it ends, so a worker cut off
  // between its claim and its apply holds them this long at most; then the
  // server ends its session, the claim rolls back, and other workers claim
  // the events. Zero leaves it to the server's setting. At most one hour
  // (run_once() answers kInvalidArgument).
  absl::Duration idle_in_transaction_limit = kIdleInTransactionLimit;
  // After a claim that came back short of batch_size (the queue ran dry),
  // how long a worker lets new events gather before it claims again
  // (linger_after()). Fuller claims cost the server less per event — fewer
  // claim and apply calls, each amortised over more events — at the price of
  // up to this much time-to-confirm. Zero (the default) claims again at once.
  absl::Duration claim_linger = absl::ZeroDuration();
};

// An event a worker owns until its lease expires.
struct ClaimedEvent {
  PaymentEvent event;  // for a void, amount is zero (it carries none)
  // A two-phase withdrawal's step: the fee to hold or capture (nullopt: none
  // given), the hold a post or void acts on, a hold's time left.
  std::optional<Amount> fee;
  std::string hold_id;
  std::optional<absl::Duration> expires_in;
  // Whether the event named its amount (a post without one captures all).
  bool has_amount = true;
  int retry_count = 0;
  std::string trace_id;
  // Since intake recorded it, as the server saw at claim time, and when the
  // claim returned here: time-to-confirm without comparing two clocks.
  absl::Duration age_at_claim;
  absl::Time claimed_at;
};

// What became of one claimed event.
enum class Disposition {
  kApplied,
  kAlreadyApplied,
  kInsufficientFunds,
  kRetryScheduled,  // transient failure: pending again, due after a backoff
  kFailed,          // permanent failure or retries exhausted: failed + dead letter
  kNotClaimed,      // the claim was lost meanwhile (lease expired and recovered)
  kDeferred,        // a credit whose transaction is not final yet: pending again, later
};
inline constexpr EnumNames<Disposition, 7> kDispositionNames{{{
    {Disposition::kApplied, "applied"},
    {Disposition::kAlreadyApplied, "already_applied"},
    {Disposition::kInsufficientFunds, "insufficient_funds"},
    {Disposition::kRetryScheduled, "retry_scheduled"},
    {Disposition::kFailed, "failed"},
    {Disposition::kNotClaimed, "not_claimed"},
    {Disposition::kDeferred, "deferred"},
}}};
constexpr const auto& enum_names(Disposition) { return kDispositionNames; }

struct RecoveryReport {
  int recovered = 0;  // back to pending
  int failed = 0;     // recoveries exhausted: failed + dead letter
};

class Dispatcher {
 public:
  // REQUIRES: `ledger` outlives the Dispatcher and uses the same schema.
  Dispatcher(const Ledger& ledger, DispatcherOptions options);

  // claim()
  //
  // Claims up to batch_size due pending events (pending -> enqueued, lease
  // set) and commits before returning them.
  [[nodiscard]] absl::StatusOr<std::vector<ClaimedEvent>> claim(Connection& conn) const;

  // process()
  //
  // Applies one claimed event through the Ledger and records what became of
  // it. A non-OK status means the outcome could not be recorded (e.g. the
  // connection died); the lease then brings the event back.
  [[nodiscard]] absl::StatusOr<Disposition> process(Connection& conn,
                                                    const ClaimedEvent& claimed) const;

  // process_all()
  //
  // Applies claimed events in claim order: each run of events that wait for
  // nothing — single-phase events and hold steps — in one
  // Ledger::process_steps (one transaction, one round trip; each answer
  // then settled as process() settles it, so a poisoned event still ends
  // alone in the DLQ with its reason), a credit waiting for finality through
  // process() alone (every event so when apply_in_batches is false). If the batch fails as a whole
  // (a lock or statement timeout) each of its events takes its own turn. Non-OK only when the
  // session is gone: the leases bring the rest back.
  [[nodiscard]] absl::Status process_all(Connection& conn,
                                         std::span<const ClaimedEvent> claimed) const;

  // run_once()
  //
  // Claims up to batch_size due events and applies them; returns how many
  // were claimed. With apply_with_claim (the default) a claim whose events
  // all wait for nothing is claimed, applied and settled in one transaction,
  // and what cannot be settled there — a refused event's retry or dead
  // letter — is recorded after the commit, as process_all() records it. If
  // that transaction fails as a whole (a lock or statement timeout), nothing
  // of it happened, and this call claims again the two-commit way: claim()
  // then process_all(), where each event of a failed batch takes its own
  // turn. Otherwise, and for a claim holding a credit waiting for finality,
  // it is claim() then process_all(). Outcome metrics and logs are written
  // after the commit; the Ledger's own counters and alerts are written as it
  // answers, before it. REQUIRES: `conn` is not inside a transaction.
  [[nodiscard]] absl::StatusOr<int> run_once(Connection& conn) const;

  // linger_after()
  //
  // How long a worker loop should wait before its next claim, given how many
  // events the last one returned: claim_linger after a claim that was short
  // but not empty, zero after a full one (more is waiting). After an empty
  // claim, wait_for_work() instead.
  [[nodiscard]] absl::Duration linger_after(std::size_t claimed) const;

  // listen()
  //
  // Subscribes `conn` to the "<schema>_events" notifications intake sends.
  // Not available behind PgBouncer in transaction mode: poll instead.
  [[nodiscard]] absl::Status listen(Connection& conn) const;

  // wait_for_work()
  //
  // Returns when intake notified new events on a listening `conn`, or after
  // `max_wait` (the poll fallback); true if a notification arrived.
  [[nodiscard]] absl::StatusOr<bool> wait_for_work(Connection& conn, absl::Duration max_wait) const;

  // recover_stale()
  //
  // Returns expired claims to pending, or fails them (dead letter + critical
  // alert) once they have been recovered max_recoveries times.
  [[nodiscard]] absl::StatusOr<RecoveryReport> recover_stale(Connection& conn) const;

 private:
  absl::StatusOr<Disposition> process_unmeasured(Connection& conn,
                                                 const ClaimedEvent& claimed) const;
  // Logs and counts what became of `claimed`.
  absl::StatusOr<Disposition> measured(const ClaimedEvent& claimed,
                                       absl::StatusOr<Disposition> d) const;
  // What the ledger's answer makes of the event: its disposition, or a
  // recorded failure (durable retry, or failed + dead letter).
  absl::StatusOr<Disposition> settle(Connection& conn, const ClaimedEvent& claimed,
                                     const absl::StatusOr<Outcome>& outcome) const;
  // Events applied in one process_steps and settled one by one.
  absl::Status process_together(Connection& conn,
                                std::span<const ClaimedEvent* const> claimed) const;
  // The Ledger's answers to `claimed`, applied in one process_steps.
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> apply_together(
      Connection& conn, std::span<const ClaimedEvent* const> claimed) const;
  // What each answer makes of its event (logged and counted); non-OK only
  // when the session is gone.
  absl::Status settle_together(Connection& conn, std::span<const ClaimedEvent* const> claimed,
                               std::span<const absl::StatusOr<StepResult>> answers) const;
  // run_once() with the claim committed before anything is applied.
  absl::StatusOr<int> claim_then_process(Connection& conn) const;
  // A credit that must wait until its chain transaction is final.
  bool needs_finality(const ClaimedEvent& claimed) const;
  // The Ledger call for the event's type.
  absl::StatusOr<Outcome> apply(Connection& conn, const ClaimedEvent& claimed) const;
  void log_disposition(const ClaimedEvent& claimed, Disposition d, std::string_view error) const;
  // nullopt: go ahead and apply it; otherwise what became of the event instead.
  absl::StatusOr<std::optional<Disposition>> hold_until_final(Connection& conn,
                                                              const ClaimedEvent& claimed) const;
  // Retryable `failure`: a durable retry; otherwise failed + a dead letter
  // with `reason` (empty: the code's name).
  absl::StatusOr<Disposition> record_failure(Connection& conn, const ClaimedEvent& claimed,
                                             const absl::Status& failure,
                                             std::string_view reason = {}) const;

  const Ledger& ledger_;
  DispatcherOptions options_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_QUEUE_DISPATCHER_HPP
