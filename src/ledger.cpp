#include "idemledger/ledger.hpp"

#include <fmt/format.h>

#include <array>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "idemledger/idempotency_key.hpp"
#include "idemledger/status.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/dead_letter.hpp"
#include "src/internal/schema_name.hpp"
#include "src/internal/sqlstates.hpp"
#include "src/internal/text.hpp"

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

}  // namespace

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::kApplied:
      return "applied";
    case Outcome::kAlreadyApplied:
      return "already_applied";
    case Outcome::kInsufficientFunds:
      return "insufficient_funds";
  }
  return "unknown";
}

Ledger::Ledger(LedgerOptions options)
    : options_(std::move(options)),
      schema_status_(internal::validate_identifier("schema", options_.schema)),
      apply_sql_(internal::with_schema(
          "SELECT {schema}.apply_event($1, $2, $3::bigint, $4::numeric, $5, $6, $7::boolean)",
          options_.schema)),
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
  const absl::Status dlq = internal::insert_dead_letter(
      conn, options_.schema,
      {.event_id = event.event_id,
       .event_type = std::string(to_string(event.type)),
       .user_id = event.user_id,
       .amount = event.amount.to_string(),
       .reason = "error",
       .error = std::string(internal::to_std(outcome.status().message()))},
      /*spool_id=*/"");
  raise_alert(AlertSeverity::kCritical, fmt::format("reorg_compensation_failed:{}", event.event_id),
              fmt::format("{}{}", outcome.status().message(),
                          dlq.ok() ? "; recorded in dead_letter_queue"
                                   : fmt::format("; DLQ write failed: {}", dlq.message())));
  return outcome;
}

absl::StatusOr<Outcome> Ledger::apply(Connection& conn, const PaymentEvent& event) const {
  if (options_.metrics == nullptr) return apply_unmeasured(conn, event);
  const absl::Time start = absl::Now();
  absl::StatusOr<Outcome> outcome = apply_unmeasured(conn, event);
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
  if (!schema_status_.ok()) return schema_status_;

  const std::string_view type = to_string(event.type);
  const std::string user = fmt::format("{}", event.user_id);
  const std::string amount = event.amount.to_string();
  const std::string key = idempotency_key(event.event_id, type);
  const std::string fingerprint = payload_fingerprint(event.user_id, event.amount, type);

  const std::array<Param, 2> timeout_params = {Param(lock_timeout_text_),
                                               Param(statement_timeout_text_)};
  const std::array<Param, 7> apply_params = {
      Param(event.event_id),
      Param(type),
      Param(user),
      Param(amount),
      Param(key),
      Param(fingerprint),
      Param(options_.write_notifications ? "true" : "false")};
  const std::array<Statement, 2> batch = {Statement{timeouts_sql_, timeout_params},
                                          Statement{apply_sql_, apply_params}};

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
  const std::optional<std::string>& answer = result->at(0, 0);
  if (answer == "applied") return Outcome::kApplied;
  if (answer == "already_applied") return Outcome::kAlreadyApplied;
  if (answer == "insufficient_funds") return Outcome::kInsufficientFunds;
  if (answer == "orphan_applied" || answer == "orphan_insufficient_funds") {
    raise_alert(
        AlertSeverity::kCritical, fmt::format("orphan_{}:{}", type, event.event_id),
        fmt::format("orphan {} event {}: idempotency record exists but payment event not found",
                    type, event.event_id));
    return answer == "orphan_applied" ? Outcome::kAlreadyApplied : Outcome::kInsufficientFunds;
  }
  return absl::InternalError(
      fmt::format("apply_event answered an unknown outcome: {}", answer.value_or("NULL")));
}

absl::Status Ledger::open_account(Connection& conn, std::int64_t user_id,
                                  const Amount& initial_balance) const {
  if (!schema_status_.ok()) return schema_status_;
  if (initial_balance.is_negative()) {
    return absl::InvalidArgumentError("initial_balance must not be negative");
  }
  const std::string user = fmt::format("{}", user_id);
  const std::string amount = initial_balance.to_string();
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema("INSERT INTO {schema}.users (id, balance, initial_balance) "
                            "VALUES ($1::bigint, $2::numeric, $2::numeric) ON CONFLICT DO NOTHING",
                            options_.schema),
      {Param(user), Param(amount)});
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) {
    return absl::AlreadyExistsError(fmt::format("user {} already exists", user_id));
  }
  return absl::OkStatus();
}

absl::StatusOr<Amount> Ledger::balance(Connection& conn, std::int64_t user_id) const {
  if (!schema_status_.ok()) return schema_status_;
  const std::string user = fmt::format("{}", user_id);
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema("SELECT balance::text FROM {schema}.users WHERE id = $1::bigint",
                            options_.schema),
      {Param(user)});
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("user {} not found", user_id));
  return Amount::parse_balance(r->at(0, 0).value_or(""));
}

absl::StatusOr<std::vector<BalanceMismatch>> Ledger::find_balance_mismatches(
    Connection& conn) const {
  if (!schema_status_.ok()) return schema_status_;
  absl::StatusOr<Transaction> tx = Transaction::begin(conn, IsolationLevel::kRepeatableRead);
  if (!tx.ok()) return tx.status();
  absl::StatusOr<Result> r = conn.execute(internal::with_schema(
      "SELECT u.id, u.balance::text, (u.initial_balance + coalesce(s.total, 0))::text "
      "FROM {schema}.users u LEFT JOIN (SELECT user_id, sum(amount) AS total "
      "FROM {schema}.balance_events GROUP BY user_id) s ON s.user_id = u.id "
      "WHERE u.balance <> u.initial_balance + coalesce(s.total, 0) ORDER BY u.id",
      options_.schema));
  if (!r.ok()) return r.status();
  std::vector<BalanceMismatch> mismatches;
  for (const auto& row : r->rows) {
    BalanceMismatch m{
        .user_id = 0, .balance = row[1].value_or(""), .expected = row[2].value_or("")};
    (void)absl::SimpleAtoi(row[0].value_or(""), &m.user_id);
    mismatches.push_back(std::move(m));
  }
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  return mismatches;
}

}  // namespace idemledger
