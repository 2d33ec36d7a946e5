// idemledger/ledger/ledger.hpp — apply payment events to balances exactly once.
//
//   idemledger::Ledger ledger({.schema = "idemledger"});
//   absl::StatusOr<idemledger::Outcome> r = ledger.process_deposit(
//       conn, {.event_id = "evt_1", .type = EventType::kDeposit, .user_id = 7,
//              .amount = *idemledger::Amount::parse("50.25")});
//   // kApplied the first time, kAlreadyApplied on every redelivery.
//
// Guarantees (each enforced by PostgreSQL, not by this process):
// - An event (event_id, type) applied N >= 1 times, concurrently or years
//   apart, changes the balance once and writes one balance_events row: the
//   idempotency record's primary key and balance_events' UNIQUE (source_event_id,
//   event_type) are written in the same transaction as the balance change.
// - A replay with different content (user, amount, type) is kAlreadyExists
//   and alerted, never treated as a duplicate.
// - A debit locks the user row (NOWAIT) and checks the balance under the lock;
//   CHECK (balance >= 0) backs it. Two withdrawals never spend the same funds.
// - Insufficient funds is an outcome, recorded durably: a replay answers
//   kInsufficientFunds again and never debits.
// - Every operation is one transaction and, with the libpq adapter, one round
//   trip: the steps run in a server-side function installed by migrate().
//
// Errors: kInvalidArgument (bad input; nothing written), kNotFound (unknown
// user), kAlreadyExists (conflicting replay), kFailedPrecondition (terminal or
// inconsistent event, compensation exceeding the balance), and retryable
// statuses (is_retryable) for lock timeouts, deadlocks, lost connections and
// in-doubt commits. Every operation but open_account() is keyed, so its
// statuses are marked idempotent (core/status.hpp) and with_retries() (core/
// retry.hpp) retries even an in-doubt commit of it safely.
//
// Ledger is thread-safe (it holds only configuration); each call needs a
// Connection that no other thread uses meanwhile.
#ifndef IDEMLEDGER_LEDGER_LEDGER_HPP
#define IDEMLEDGER_LEDGER_LEDGER_HPP

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/event_type.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/metrics.hpp"

namespace idemledger {

class Connection;

// Longest event id accepted, in bytes.
inline constexpr std::size_t kMaxEventIdLength = 128;

enum class Outcome {
  kApplied,            // the balance changed now
  kAlreadyApplied,     // an earlier delivery changed it; nothing changed now
  kInsufficientFunds,  // a debit refused for lack of funds (now or earlier)
};
inline constexpr EnumNames<Outcome, 3> kOutcomeNames{{{
    {Outcome::kApplied, "applied"},
    {Outcome::kAlreadyApplied, "already_applied"},
    {Outcome::kInsufficientFunds, "insufficient_funds"},
}}};
constexpr const auto& enum_names(Outcome) { return kOutcomeNames; }

struct PaymentEvent {
  std::string event_id;  // the provider's id: 1..128 bytes of valid UTF-8, no NUL
  EventType type = EventType::kDeposit;
  std::int64_t user_id = 0;
  Amount amount;  // > 0
};

struct LedgerOptions {
  // Where migrate() put the tables.
  Schema schema = kDefaultSchema;
  // How long to wait for a row lock before answering retryable (55P03).
  absl::Duration lock_timeout = absl::Seconds(2);
  // Upper bound on one operation's server time (57014, retryable).
  absl::Duration statement_timeout = absl::Seconds(5);
  // Write a notification row into the outbox in the same transaction as the
  // outcome ("credited", "debited", "insufficient_funds").
  bool write_notifications = false;
  // Receives critical alerts; nullptr means stderr_alert_sink().
  AlertSink* alerts = nullptr;
  // Outcome counters and the apply latency histogram; nullptr records nothing.
  LedgerMetrics* metrics = nullptr;
};

// A user whose balance disagrees with initial_balance + SUM(balance_events).
struct BalanceMismatch {
  std::int64_t user_id;
  std::string balance;
  std::string expected;
};

class Ledger {
 public:
  explicit Ledger(LedgerOptions options = {});

  // process_deposit()
  //
  // Credits a deposit or airdrop. The event may be new to the database (it is
  // recorded in the same transaction) or recorded earlier by intake (pending)
  // and claimed by a worker (enqueued); either way it ends confirmed.
  // REQUIRES: event.type is kDeposit or kAirdrop.
  [[nodiscard]] absl::StatusOr<Outcome> process_deposit(Connection& conn,
                                                        const PaymentEvent& event) const;

  // process_withdrawal()
  //
  // Debits a withdrawal or withdrawal fee, or records kInsufficientFunds (the
  // event ends failed, the outcome is kept for replays).
  // REQUIRES: event.type is kWithdrawal or kWithdrawalFee.
  [[nodiscard]] absl::StatusOr<Outcome> process_withdrawal(Connection& conn,
                                                           const PaymentEvent& event) const;

  // process_event()
  //
  // Applies an event of any type: process_deposit() or process_withdrawal()
  // by type, and a reorg_compensation as a plain debit that answers
  // kFailedPrecondition when it exceeds the balance (without the dead letter
  // and alert process_compensation() adds). What the dispatcher and dead-letter
  // replays use.
  [[nodiscard]] absl::StatusOr<Outcome> process_event(Connection& conn,
                                                      const PaymentEvent& event) const;

  // process_compensation()
  //
  // Reverses a credit whose transaction a chain reorg removed: a negative
  // entry under its own key ("reorg:<tx_hash>", reorg_compensation). If the
  // funds are already gone it never drives the balance negative: it answers
  // kFailedPrecondition, writes a dead_letter_queue row and raises a critical
  // alert, and can be retried once funds arrive.
  [[nodiscard]] absl::StatusOr<Outcome> process_compensation(Connection& conn,
                                                             std::string_view original_tx_hash,
                                                             std::int64_t user_id,
                                                             const Amount& amount) const;

  // open_account()
  //
  // Creates user `user_id` with `initial_balance` (>= 0); kAlreadyExists if
  // the user exists. Not keyed: an in-doubt commit is answered to the caller
  // (with_retries() does not run it again), who must look whether the user
  // exists.
  [[nodiscard]] absl::Status open_account(Connection& conn, std::int64_t user_id,
                                          const Amount& initial_balance) const;

  // balance()
  //
  // The user's balance; kNotFound for an unknown user.
  [[nodiscard]] absl::StatusOr<Amount> balance(Connection& conn, std::int64_t user_id) const;

  // find_balance_mismatches()
  //
  // Users whose balance != initial_balance + SUM(balance_events), read in one
  // REPEATABLE READ snapshot. Empty means the ledger reconciles.
  [[nodiscard]] absl::StatusOr<std::vector<BalanceMismatch>> find_balance_mismatches(
      Connection& conn) const;

  [[nodiscard]] const LedgerOptions& options() const { return options_; }

 private:
  absl::StatusOr<Outcome> apply(Connection& conn, const PaymentEvent& event) const;
  absl::StatusOr<Outcome> apply_unmeasured(Connection& conn, const PaymentEvent& event) const;
  void raise_alert(AlertSeverity severity, std::string_view key, std::string_view message) const;

  LedgerOptions options_;
  std::string apply_sql_;
  std::string timeouts_sql_;
  std::string lock_timeout_text_;
  std::string statement_timeout_text_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_LEDGER_HPP
