// idemledger/ledger/ledger.hpp — apply payment events to balances exactly once.
//
//   idemledger::Ledger ledger({.schema = "idemledger"});
//   absl::StatusOr<idemledger::Outcome> r = ledger.process_deposit(
//       conn, {.event_id = "evt_1", .type = EventType::kDeposit, .user_id = 7,
//              .amount = *idemledger::Amount::parse("50.25"), .asset = "USDC"});
//   // kApplied the first time, kAlreadyApplied on every redelivery.
//   absl::StatusOr<idemledger::HoldResult> h = ledger.hold(
//       conn, {.event_id = "wd_9", .user_id = 7, .asset = "USDC",
//              .amount = *idemledger::Amount::parse("20"), .fee =
//              *idemledger::Amount::parse("0.5")});
//   ... the chain transaction is final ...
//   ledger.post(conn, {.hold_id = "wd_9"});     // or void_hold() when it failed
//
// The model: balances per (user, asset) account — balance, held and available
// = balance - held — in double entry. Every applied event is a posting whose
// entries sum to zero per asset: a deposit credits the user and debits the
// asset's external (chain) account, a withdrawal the reverse, a fee moves
// from the user to the asset's fees account. User accounts never go below
// zero, nor hold more than they have; system accounts are the sum of their
// entries and may be negative. Events that name no asset use the default
// asset (migrate() names it), so the single-balance API works as before.
//
// Guarantees (each enforced by PostgreSQL, not by this process):
// - An event (event_id, type) applied N >= 1 times, concurrently or years
//   apart, changes the balance once and writes one posting: the idempotency
//   record's primary key and balance_events' UNIQUE (source_event_id,
//   event_type) are written in the same transaction as the balance change.
// - A replay with different content (user, asset, amount, type) is
//   kAlreadyExists and alerted, never treated as a duplicate.
// - A debit or hold locks the account row (NOWAIT) and checks the available
//   funds under the lock; CHECKs back it. Two withdrawals never spend the
//   same funds; held funds are spendable only by posting their hold.
// - Insufficient funds is an outcome, recorded durably: a replay answers
//   kInsufficientFunds again and never debits (a refused hold: state rejected).
// - Every operation is one transaction and, with the libpq adapter, one round
//   trip: the steps run in server-side functions installed by migrate().
//   process_deposit() first sends its common case (a new credit to an open
//   account) as one plain statement that writes all of it or nothing; when
//   it wrote nothing (a replay, a first credit in an asset, a queued event,
//   any refusal) the function decides, in a second round trip.
// - Inside a transaction the caller opened, an operation joins it (commits
//   nothing of its own, rolls back with it) and bounds its own statement with
//   LedgerOptions' lock_timeout and statement_timeout; the caller's own values
//   of both are back in effect when it returns (same round trip).
// - Names resolve the same whoever calls: each operation's statements and the
//   functions they call run with search_path = pg_catalog, pg_temp, so no
//   schema on the caller's search_path (public, writable by others on older
//   databases) can put its own function or operator in place of a built-in.
//   Inside the caller's transaction, its search_path is back when the
//   operation returns, as its timeouts are.
//
// Errors: kInvalidArgument (bad input, an amount beyond its asset's decimals,
// an unknown asset; nothing written), kNotFound (unknown user or hold),
// kAlreadyExists (conflicting replay), kFailedPrecondition (terminal or
// inconsistent event, a disabled asset, a compensation exceeding the
// available funds), and retryable statuses (is_retryable) for lock timeouts,
// deadlocks, lost connections and in-doubt commits. Every operation is keyed
// (open_account by its content), so its statuses are marked idempotent
// (core/status.hpp) and with_retries() retries even an in-doubt commit safely.
//
// Ledger is thread-safe (it holds only configuration); each call needs a
// Connection that no other thread uses meanwhile.
#ifndef IDEMLEDGER_LEDGER_LEDGER_HPP
#define IDEMLEDGER_LEDGER_LEDGER_HPP

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/alert.hpp"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/event_type.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/core/schema.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/hold.hpp"
#include "idemledger/ledger/metrics.hpp"

namespace idemledger {

class Connection;
struct Result;

// Longest event id accepted, in bytes.
inline constexpr std::size_t kMaxEventIdLength = 128;
// Event ids the library makes itself: a reorg compensation is keyed
// "reorg:<tx_hash>". A provider's event may not use the prefix (intake
// refuses it), so it can never take a compensation's key.
inline constexpr std::string_view kReorgEventIdPrefix = "reorg:";

// Most events process_batch() takes in one call.
inline constexpr std::size_t kMaxBatchSize = 1000;

// What a single-phase event did. (A hold step answers a HoldResult.)
enum class Outcome {
  kApplied,            // it happened now
  kAlreadyApplied,     // an earlier delivery did it; nothing changed now
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
  Amount amount;                   // > 0, within the asset's decimals
  std::optional<AssetCode> asset;  // nullopt: the default asset
};

// One step of a mixed batch (Ledger::process_steps()): a single-phase event,
// or a hold step.
using LedgerStep = std::variant<PaymentEvent, HoldRequest, PostRequest, VoidRequest>;

// What a step answered: an Outcome for a PaymentEvent, a HoldResult for a
// hold step — the same as the single call.
using StepResult = std::variant<Outcome, HoldResult>;

// An account: one user's holdings of one asset.
struct Account {
  std::int64_t user_id = 0;
  AssetCode asset = "DEFAULT";
  Amount balance;
  Amount held;
  Amount initial_balance;
  [[nodiscard]] Amount available() const;  // balance - held
};

struct LedgerOptions {
  // Where migrate() put the tables.
  Schema schema = kDefaultSchema;
  // How long to wait for a row lock before answering retryable (55P03).
  absl::Duration lock_timeout = absl::Seconds(2);
  // Upper bound on one operation's server time (57014, retryable).
  absl::Duration statement_timeout = absl::Seconds(5);
  // Write a notification row into the outbox in the same transaction as the
  // outcome (topics: ledger/topics.hpp).
  bool write_notifications = false;
  // Receives critical alerts; nullptr means stderr_alert_sink().
  AlertSink* alerts = nullptr;
  // Outcome counters and the apply latency histogram; nullptr records nothing.
  LedgerMetrics* metrics = nullptr;
};

// An account whose stored balance or held amount disagrees with its ledger:
// balance != initial_balance + SUM(its entries), or held != SUM(its open holds).
struct BalanceMismatch {
  std::int64_t user_id = 0;
  std::string balance;
  std::string expected;
  std::string asset;
  std::string held;
  std::string expected_held;
};

class Ledger {
 public:
  explicit Ledger(LedgerOptions options = {});

  // process_deposit()
  //
  // Credits a deposit or airdrop. The event may be new to the database (it is
  // recorded in the same transaction) or recorded earlier by intake (pending)
  // and claimed by a worker (enqueued); either way it ends confirmed. A
  // user's first credit in an asset opens that account.
  // REQUIRES: event.type is kDeposit or kAirdrop.
  [[nodiscard]] absl::StatusOr<Outcome> process_deposit(Connection& conn,
                                                        const PaymentEvent& event) const;

  // process_withdrawal()
  //
  // Debits a withdrawal or withdrawal fee at once (single phase), or records
  // kInsufficientFunds (the event ends failed, the outcome is kept for
  // replays). Only available funds (not held ones) can be spent.
  // REQUIRES: event.type is kWithdrawal or kWithdrawalFee.
  [[nodiscard]] absl::StatusOr<Outcome> process_withdrawal(Connection& conn,
                                                           const PaymentEvent& event) const;

  // process_event()
  //
  // Applies a single-phase event of any type (a hold step's type is
  // kInvalidArgument): process_deposit() or
  // process_withdrawal() by type, and a reorg_compensation as a plain debit
  // that answers kFailedPrecondition when it exceeds the available funds
  // (without the dead letter and alert process_compensation() adds).
  [[nodiscard]] absl::StatusOr<Outcome> process_event(Connection& conn,
                                                      const PaymentEvent& event) const;

  // process_batch()
  //
  // Applies up to kMaxBatchSize single-phase events — deposits, airdrops,
  // withdrawals, withdrawal fees, reorg compensations; any users, any assets
  // — in one transaction and one round trip, and answers one result per
  // event, in input order: exactly what process_event() would have answered
  // had the events been sent one by one in that order. A duplicate within
  // the batch or of an earlier call is kAlreadyApplied, a conflicting replay
  // kAlreadyExists (alerted), a debit is judged against the funds the events
  // before it left, an unknown user is kNotFound, an invalid event is
  // kInvalidArgument (and not sent); one event's refusal never aborts the
  // others. A hold step is kInvalidArgument here: process_steps() takes
  // them.
  //
  // The returned status is the batch's own: kInvalidArgument for more than
  // kMaxBatchSize events, or a retryable error (a lock or statement timeout,
  // a lost connection, an in-doubt commit) after which all of it or none of
  // it was applied; sending the same batch again answers exactly.
  //
  // Concurrent batches lock their accounts in one order and never deadlock
  // each other. Credits to accounts the batch does not debit are written
  // set-based (one update per account); every other event runs as its own
  // subtransaction, so keep those under 64 per batch: past that PostgreSQL's
  // per-backend subtransaction cache overflows and other sessions' snapshots
  // slow down while the batch runs.
  [[nodiscard]] absl::StatusOr<std::vector<absl::StatusOr<Outcome>>> process_batch(
      Connection& conn, std::span<const PaymentEvent> events) const;

  // process_steps()
  //
  // process_batch() for every kind of step: single-phase events and holds,
  // posts and voids (hold(), post(), void_hold()), mixed, in one transaction
  // and one round trip, each answered exactly as its single call answers
  // when the steps are sent one by one in input order — a post of a hold
  // held earlier in the same batch captures it, a hold is judged against the
  // funds the steps before it left, a refused post or void is
  // HoldOutcome::kRefused (alerted, as alone). The batch's own status, the
  // lock order and the subtransaction advice are process_batch()'s; the
  // holds a batch posts or voids are locked first, by id, then its
  // accounts — the order a single post, void or expiry sweep takes — so
  // batches never deadlock each other, nor those single calls. (A batch and
  // a single call racing on the same new event id can: PostgreSQL then
  // aborts one with 40P01, retryable, and the key makes the retry exact.)
  [[nodiscard]] absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> process_steps(
      Connection& conn, std::span<const LedgerStep> steps) const;

  // process_step(): one step through its own call — process_event(), hold(),
  // post() or void_hold(), by its kind.
  [[nodiscard]] absl::StatusOr<StepResult> process_step(Connection& conn,
                                                        const LedgerStep& step) const;

  // process_compensation()
  //
  // Reverses a credit whose transaction a chain reorg removed: a negative
  // entry under its own key ("reorg:<tx_hash>", reorg_compensation; a hash
  // of 0x + 64 hex digits is keyed in lower case, so any spelling of one
  // transaction is one compensation). If the
  // funds are already gone it never drives the balance negative: it answers
  // kFailedPrecondition, writes a dead_letter_queue row and raises a critical
  // alert, and can be retried once funds arrive.
  [[nodiscard]] absl::StatusOr<Outcome> process_compensation(
      Connection& conn, std::string_view original_tx_hash, std::int64_t user_id,
      const Amount& amount, std::optional<AssetCode> asset = std::nullopt) const;

  // hold()
  //
  // Reserves request.amount + request.fee of the account's available funds
  // until request.expires_in from now: {kApplied, kHeld}; or records the
  // refusal for lack of funds: {kInsufficientFunds, kRejected}. A repeated
  // hold answers the first one's outcome and the hold's state now; the same
  // id with other content is kAlreadyExists.
  [[nodiscard]] absl::StatusOr<HoldResult> hold(Connection& conn, const HoldRequest& request) const;

  // post()
  //
  // Captures a held hold — the withdrawal and fee entries as one posting;
  // what is not captured is released: {kApplied, kPosted}. Already posted
  // with the same amounts: {kAlreadyApplied, kPosted}. Voided, expired (also
  // past expires_at before the sweeper came) or rejected: {kRefused, that
  // state} — never posted. Capturing more than is held is kInvalidArgument;
  // a hold whose withdrawal is still queued is kAborted (retry); none at all
  // kNotFound.
  [[nodiscard]] absl::StatusOr<HoldResult> post(Connection& conn, const PostRequest& request) const;

  // void_hold()
  //
  // Releases a held hold: {kApplied, kVoided}; already voided:
  // {kAlreadyApplied, kVoided}; posted, expired or rejected: {kRefused, that
  // state}.
  [[nodiscard]] absl::StatusOr<HoldResult> void_hold(Connection& conn,
                                                     const VoidRequest& request) const;

  // expire_holds()
  //
  // The sweeper: releases up to `limit` holds past their expiry, each
  // exactly once (others running at the same time skip them). Returns how
  // many it expired.
  [[nodiscard]] absl::StatusOr<int> expire_holds(Connection& conn, int limit = 1000) const;

  // find_hold(): the hold `hold_id` as it stands; kNotFound if there is none.
  [[nodiscard]] absl::StatusOr<Hold> find_hold(Connection& conn, std::string_view hold_id) const;

  // open_account()
  //
  // Opens `user_id`'s account in `asset` (nullopt: the default asset) with
  // `initial_balance` (>= 0), creating the user if new. Idempotent: opening
  // it again with the same initial balance is OK; with another,
  // kAlreadyExists. An unknown asset is kInvalidArgument.
  [[nodiscard]] absl::Status open_account(Connection& conn, std::int64_t user_id,
                                          const Amount& initial_balance,
                                          std::optional<AssetCode> asset = std::nullopt) const;

  // account(): balance, held and initial balance; kNotFound if never opened.
  [[nodiscard]] absl::StatusOr<Account> account(
      Connection& conn, std::int64_t user_id, std::optional<AssetCode> asset = std::nullopt) const;

  // balance(): the account's balance (held funds included); kNotFound if none.
  [[nodiscard]] absl::StatusOr<Amount> balance(Connection& conn, std::int64_t user_id,
                                               std::optional<AssetCode> asset = std::nullopt) const;

  // find_balance_mismatches()
  //
  // Accounts whose balance != initial_balance + SUM(entries) or whose held
  // != SUM(open holds), read in one REPEATABLE READ snapshot. Empty means
  // every account reconciles (ops/reconcile.hpp adds the per-asset zero-sum,
  // in batches).
  [[nodiscard]] absl::StatusOr<std::vector<BalanceMismatch>> find_balance_mismatches(
      Connection& conn) const;

  [[nodiscard]] const LedgerOptions& options() const { return options_; }

 private:
  // How an event is applied: by apply_event() alone, or first by one
  // statement that applies a new credit to an existing account or writes
  // nothing (the host's deposit, ledger.cpp kFastCreditSql).
  enum class Route { kProcedure, kOneStatementFirst };
  absl::StatusOr<Outcome> apply(Connection& conn, const PaymentEvent& event, Route route) const;
  absl::StatusOr<Outcome> apply_unmeasured(Connection& conn, const PaymentEvent& event,
                                           Route route) const;
  // `sql` pipelined after the call's transaction-scoped settings (timeouts,
  // search_path): one transaction, one round trip. Inside the caller's
  // transaction, the caller's own values are put back after `sql`, in the
  // same round trip.
  absl::StatusOr<Result> execute_with_call_settings(Connection& conn, std::string_view sql,
                                                    std::span<const Param> params) const;
  // One hold step's statement, pipelined after the call's settings.
  absl::StatusOr<HoldResult> run_hold_step(Connection& conn, std::string_view sql,
                                           std::span<const Param> params, std::string_view what,
                                           std::string_view id) const;
  void raise_alert(AlertSeverity severity, std::string_view key, std::string_view message) const;
  // Counts one call: its latency, its outcome (by name; "" for an error),
  // and the same by asset when `asset` is known.
  void record(absl::Time start, const absl::Status& status, std::string_view outcome,
              std::optional<std::string_view> asset) const;
  // The outcome counters of record(), without the latency.
  void count(const absl::Status& status, std::string_view outcome,
             std::optional<std::string_view> asset) const;

  LedgerOptions options_;
  std::string apply_sql_;
  std::string fast_credit_sql_;
  std::string batch_sql_;
  std::string hold_sql_;
  std::string post_sql_;
  std::string void_sql_;
  std::string lock_timeout_text_;
  std::string statement_timeout_text_;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_LEDGER_HPP
