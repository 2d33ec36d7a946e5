#include "idemledger/ledger/ledger.hpp"

#include <fmt/format.h>

#include <array>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
#include "idemledger/ledger/dead_letter.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/text.hpp"
#include "src/ledger/internal/balance_check.hpp"
#include "src/ledger/internal/sqlstates.hpp"

namespace idemledger {
namespace {

absl::Status validate_event(const PaymentEvent& e) {
  if (e.event_id.empty() || e.event_id.size() > kMaxEventIdLength) {
    return absl::InvalidArgumentError(
        fmt::format("event_id must be 1..{} bytes, got {}", kMaxEventIdLength, e.event_id.size()));
  }
  if (e.event_id.find('\0') != std::string::npos || !internal::is_valid_utf8(e.event_id)) {
    return absl::InvalidArgumentError("event_id must be valid UTF-8 without NUL bytes");
  }
  if (e.user_id <= 0) {
    return absl::InvalidArgumentError(fmt::format("user_id must be positive, got {}", e.user_id));
  }
  if (e.amount.is_zero() || e.amount.is_negative()) {
    return absl::InvalidArgumentError("amount must be greater than zero");
  }
  return absl::OkStatus();
}

std::string postgres_milliseconds(absl::Duration d) {
  return fmt::format("{}ms", absl::ToInt64Milliseconds(d));
}

// What apply_event() answers, read once at the edge.
enum class ApplyAnswer {
  kApplied,
  kAlreadyApplied,
  kInsufficientFunds,
  kOrphanApplied,
  kOrphanInsufficientFunds,
};
constexpr EnumNames<ApplyAnswer, 5> kApplyAnswerNames{{{
    {ApplyAnswer::kApplied, "applied"},
    {ApplyAnswer::kAlreadyApplied, "already_applied"},
    {ApplyAnswer::kInsufficientFunds, "insufficient_funds"},
    {ApplyAnswer::kOrphanApplied, "orphan_applied"},
    {ApplyAnswer::kOrphanInsufficientFunds, "orphan_insufficient_funds"},
}}};
constexpr const auto& enum_names(ApplyAnswer) { return kApplyAnswerNames; }

}  // namespace

Ledger::Ledger(LedgerOptions options)
    : options_(std::move(options)),
      apply_sql_(options_.schema.qualify(
          "SELECT {schema}.apply_event($1, $2, $3::bigint, $4::numeric, $5, $6, $7::boolean)")),
      // Transaction-scoped (is_local = true) so a pooled or PgBouncer-shared
      // session keeps its own settings; sent in the same batch as the apply.
      timeouts_sql_(
          "SELECT set_config('lock_timeout', $1, true), "
          "set_config('statement_timeout', $2, true)"),
      lock_timeout_text_(postgres_milliseconds(options_.lock_timeout)),
      statement_timeout_text_(postgres_milliseconds(options_.statement_timeout)) {}

void Ledger::raise_alert(AlertSeverity severity, std::string_view key,
                         std::string_view message) const {
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  sink.alert({.severity = severity, .key = key, .message = message});
}

absl::StatusOr<Outcome> Ledger::process_deposit(Connection& conn, const PaymentEvent& event) const {
  if (!is_credit(event.type)) {
    return absl::InvalidArgumentError(fmt::format(
        "process_deposit takes deposit or airdrop events, got {}", to_string(event.type)));
  }
  return apply(conn, event);
}

absl::StatusOr<Outcome> Ledger::process_withdrawal(Connection& conn,
                                                   const PaymentEvent& event) const {
  if (event.type != EventType::kWithdrawal && event.type != EventType::kWithdrawalFee) {
    return absl::InvalidArgumentError(
        fmt::format("process_withdrawal takes withdrawal or withdrawal_fee events, got {}",
                    to_string(event.type)));
  }
  return apply(conn, event);
}

absl::StatusOr<Outcome> Ledger::process_event(Connection& conn, const PaymentEvent& event) const {
  return apply(conn, event);
}

absl::StatusOr<Outcome> Ledger::process_compensation(Connection& conn,
                                                     std::string_view original_tx_hash,
                                                     std::int64_t user_id,
                                                     const Amount& amount) const {
  const PaymentEvent event{.event_id = fmt::format("reorg:{}", original_tx_hash),
                           .type = EventType::kReorgCompensation,
                           .user_id = user_id,
                           .amount = amount};
  absl::StatusOr<Outcome> outcome = apply(conn, event);
  if (outcome.ok() || sqlstate(outcome.status()) != internal::kCompensationExceedsBalance) {
    return outcome;
  }
  // The funds are gone: nothing was debited. Make it impossible to miss.
  const absl::Status dlq =
      append_dead_letter(conn, options_.schema,
                         {.event_id = event.event_id,
                          .event_type = std::string(to_string(event.type)),
                          .user_id = event.user_id,
                          .amount = event.amount.to_string(),
                          .reason = "error",
                          .error = std::string(internal::to_std(outcome.status().message()))});
  raise_alert(AlertSeverity::kCritical, fmt::format("reorg_compensation_failed:{}", event.event_id),
              fmt::format("{}{}", outcome.status().message(),
                          dlq.ok() ? "; recorded in dead_letter_queue"
                                   : fmt::format("; DLQ write failed: {}", dlq.message())));
  return outcome;
}

absl::StatusOr<Outcome> Ledger::apply(Connection& conn, const PaymentEvent& event) const {
  const absl::Time start = options_.metrics != nullptr ? absl::Now() : absl::Time();
  absl::StatusOr<Outcome> outcome = apply_unmeasured(conn, event);
  // Every apply is keyed by (event_id, type): running it again can never
  // apply it twice, so even an in-doubt commit may be retried.
  if (!outcome.ok()) outcome = mark_idempotent(outcome.status());
  if (options_.metrics == nullptr) return outcome;
  LedgerMetrics& m = *options_.metrics;
  m.apply_duration.observe(absl::Now() - start);
  if (!outcome.ok()) {
    (outcome.status().code() == absl::StatusCode::kAlreadyExists ? m.conflicts : m.errors)
        .increment();
    return outcome;
  }
  switch (*outcome) {
    case Outcome::kApplied:
      m.applied.increment();
      break;
    case Outcome::kAlreadyApplied:
      m.duplicates.increment();
      break;
    case Outcome::kInsufficientFunds:
      m.insufficient_funds.increment();
      break;
  }
  return outcome;
}

absl::StatusOr<Outcome> Ledger::apply_unmeasured(Connection& conn,
                                                 const PaymentEvent& event) const {
  if (absl::Status s = validate_event(event); !s.ok()) return s;

  const std::string_view type = to_string(event.type);
  const std::string key = idempotency_key(event.event_id, type);
  const std::string fingerprint = payload_fingerprint(event.user_id, event.amount, type);
  const Params timeouts(lock_timeout_text_, statement_timeout_text_);
  const Params apply(event.event_id, type, event.user_id, event.amount, key, fingerprint,
                     options_.write_notifications);
  const std::array<Statement, 2> batch = {Statement{timeouts_sql_, timeouts.span()},
                                          Statement{apply_sql_, apply.span()}};

  absl::StatusOr<Result> result = conn.execute_atomically(batch);
  if (!result.ok()) {
    absl::Status status = internal::interpret_ledger_error(result.status());
    const std::optional<std::string> state = sqlstate(status);
    if (state == internal::kConflictingReplay) {
      raise_alert(AlertSeverity::kCritical, fmt::format("conflicting_replay:{}", event.event_id),
                  internal::to_std(status.message()));
    } else if (state == internal::kInconsistentRecord) {
      raise_alert(AlertSeverity::kCritical, fmt::format("inconsistent_event:{}", event.event_id),
                  internal::to_std(status.message()));
    } else if (state == internal::kGuardWithoutRecord) {
      // balance_events proves it was applied once; nothing changed now.
      raise_alert(AlertSeverity::kCritical, fmt::format("guard_without_record:{}", event.event_id),
                  internal::to_std(status.message()));
      return Outcome::kAlreadyApplied;
    }
    return status;
  }
  absl::StatusOr<ApplyAnswer> answer = read_single<ApplyAnswer>(*result, "apply_event");
  if (!answer.ok()) return answer.status();
  switch (*answer) {
    case ApplyAnswer::kApplied:
      return Outcome::kApplied;
    case ApplyAnswer::kAlreadyApplied:
      return Outcome::kAlreadyApplied;
    case ApplyAnswer::kInsufficientFunds:
      return Outcome::kInsufficientFunds;
    case ApplyAnswer::kOrphanApplied:
    case ApplyAnswer::kOrphanInsufficientFunds:
      break;
  }
  raise_alert(
      AlertSeverity::kCritical, fmt::format("orphan_{}:{}", type, event.event_id),
      fmt::format("orphan {} event {}: idempotency record exists but payment event not found", type,
                  event.event_id));
  return *answer == ApplyAnswer::kOrphanApplied ? Outcome::kAlreadyApplied
                                                : Outcome::kInsufficientFunds;
}

absl::Status Ledger::open_account(Connection& conn, std::int64_t user_id,
                                  const Amount& initial_balance) const {
  if (initial_balance.is_negative()) {
    return absl::InvalidArgumentError("initial_balance must not be negative");
  }
  absl::StatusOr<Result> r =
      conn.execute(options_.schema.qualify(
                       "INSERT INTO {schema}.users (id, balance, initial_balance) "
                       "VALUES ($1::bigint, $2::numeric, $2::numeric) ON CONFLICT DO NOTHING"),
                   Params(user_id, initial_balance));
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) {
    return absl::AlreadyExistsError(fmt::format("user {} already exists", user_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<Amount> Ledger::balance(Connection& conn, std::int64_t user_id) const {
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT balance FROM {schema}.users WHERE id = $1::bigint"),
      Params(user_id));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("user {} not found", user_id));
  return read_single<Amount>(*r, "balance");
}

absl::StatusOr<std::vector<BalanceMismatch>> Ledger::find_balance_mismatches(
    Connection& conn) const {
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, IsolationLevel::kRepeatableRead);
  if (!tx.ok()) return tx.status();
  internal::BalanceCheck check;
  if (absl::Status s = internal::check_user_balances(
          conn, options_.schema, options_.schema.qualify("SELECT id FROM {schema}.users"), {},
          check);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return std::move(check.mismatches);
}

}  // namespace idemledger
