#include "idemledger/dispatcher.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <span>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "idemledger/retry.hpp"
#include "idemledger/status.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

// Reason recorded in the dead letter for a permanent failure: the code's name.
std::string reason_for(const absl::Status& failure) {
  std::string name = absl::StatusCodeToString(failure.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

std::string_view to_string(Disposition d) {
  switch (d) {
    case Disposition::kApplied:
      return "applied";
    case Disposition::kAlreadyApplied:
      return "already_applied";
    case Disposition::kInsufficientFunds:
      return "insufficient_funds";
    case Disposition::kRetryScheduled:
      return "retry_scheduled";
    case Disposition::kFailed:
      return "failed";
    case Disposition::kNotClaimed:
      return "not_claimed";
    case Disposition::kDeferred:
      return "deferred";
  }
  return "unknown";
}

Dispatcher::Dispatcher(const Ledger& ledger, DispatcherOptions options)
    : ledger_(ledger),
      options_(std::move(options)),
      schema_status_(internal::validate_identifier("schema", options_.schema)) {}

absl::StatusOr<std::vector<ClaimedEvent>> Dispatcher::claim(Connection& conn) const {
  if (!schema_status_.ok()) return schema_status_;
  const std::string limit = std::to_string(options_.batch_size);
  const std::string lease_ms = std::to_string(absl::ToInt64Milliseconds(options_.lease));
  absl::StatusOr<Result> r =
      conn.execute(internal::with_schema("SELECT * FROM {schema}.claim_events($1::int, $2::bigint)",
                                         options_.schema),
                   {Param(limit), Param(lease_ms)});
  if (!r.ok()) return r.status();
  const absl::Time now = absl::Now();
  std::vector<ClaimedEvent> claimed;
  claimed.reserve(r->rows.size());
  for (const auto& row : r->rows) {
    ClaimedEvent c;
    c.event.event_id = row[0].value_or("");
    (void)absl::SimpleAtoi(row[1].value_or(""), &c.event.user_id);
    absl::StatusOr<Amount> amount = Amount::parse(row[2].value_or(""));
    std::optional<EventType> type = parse_event_type(row[3].value_or(""));
    if (!amount.ok() || !type) {
      return absl::InternalError(
          fmt::format("claimed event {} has an unreadable amount or type", c.event.event_id));
    }
    c.event.amount = *amount;
    c.event.type = *type;
    (void)absl::SimpleAtoi(row[4].value_or("0"), &c.retry_count);
    c.trace_id = row[5].value_or("");
    std::int64_t age_us = 0;
    (void)absl::SimpleAtoi(row[6].value_or("0"), &age_us);
    c.age_at_claim = absl::Microseconds(age_us);
    c.claimed_at = now;
    claimed.push_back(std::move(c));
  }
  return claimed;
}

absl::StatusOr<Disposition> Dispatcher::process(Connection& conn,
                                                const ClaimedEvent& claimed) const {
  absl::StatusOr<Disposition> d = process_unmeasured(conn, claimed);
  if (d.ok() && (*d == Disposition::kApplied || *d == Disposition::kAlreadyApplied ||
                 *d == Disposition::kInsufficientFunds)) {
    log_disposition(claimed, *d, "");  // failures are logged with their error where recorded
  }
  if (options_.metrics == nullptr || !d.ok()) return d;
  LedgerMetrics& m = *options_.metrics;
  // Final now (kAlreadyApplied was final before this claim; the Ledger counts it).
  if (*d == Disposition::kApplied || *d == Disposition::kInsufficientFunds ||
      *d == Disposition::kFailed) {
    m.time_to_confirm.observe(claimed.age_at_claim + (absl::Now() - claimed.claimed_at));
  }
  if (*d == Disposition::kFailed) m.dead_lettered_failed.increment();
  if (*d == Disposition::kRetryScheduled) m.retries_scheduled.increment();
  return d;
}

absl::StatusOr<Disposition> Dispatcher::process_unmeasured(Connection& conn,
                                                           const ClaimedEvent& claimed) const {
  if (!schema_status_.ok()) return schema_status_;
  if (options_.finality != nullptr && is_credit(claimed.event.type)) {
    absl::StatusOr<std::optional<Disposition>> held = hold_until_final(conn, claimed);
    if (!held.ok()) return held.status();
    if (*held) return **held;
  }
  absl::StatusOr<Outcome> outcome = ledger_.process_event(conn, claimed.event);
  if (!outcome.ok()) return record_failure(conn, claimed, outcome.status());
  switch (*outcome) {
    case Outcome::kApplied:
      return Disposition::kApplied;
    case Outcome::kAlreadyApplied:
      return Disposition::kAlreadyApplied;
    case Outcome::kInsufficientFunds:
      return Disposition::kInsufficientFunds;
  }
  return absl::InternalError("unknown ledger outcome");
}

absl::StatusOr<std::optional<Disposition>> Dispatcher::hold_until_final(
    Connection& conn, const ClaimedEvent& claimed) const {
  const std::string& id = claimed.event.event_id;
  absl::StatusOr<Result> hash = conn.execute(
      internal::with_schema("SELECT tx_hash FROM {schema}.payment_events WHERE event_id = $1",
                            options_.schema),
      {Param(id)});
  if (!hash.ok()) return hash.status();
  if (hash->rows.empty() || !hash->at(0, 0)) return std::nullopt;  // nothing to wait for
  absl::StatusOr<bool> final = options_.finality->is_finalized(*hash->at(0, 0));
  if (final.ok() && *final) return std::nullopt;
  // A permanent answer (reverted, or a hash no node will ever know) ends it
  // the way any permanent failure ends, and so does the deadline; anything
  // else only delays it.
  if (!final.ok() && !is_retryable(final.status())) {
    const bool reverted = final.status().code() == absl::StatusCode::kFailedPrecondition;
    return record_failure(conn, claimed, final.status(), reverted ? "reverted" : "");
  }
  if (claimed.age_at_claim >= options_.finality_deadline) {
    return record_failure(
        conn, claimed,
        absl::FailedPreconditionError(
            fmt::format("not final {} after intake{}", absl::FormatDuration(claimed.age_at_claim),
                        final.ok() ? "" : fmt::format(" ({})", final.status().message()))),
        "not_final_in_time");
  }
  const std::string delay_ms = std::to_string(absl::ToInt64Milliseconds(options_.finality_recheck));
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema("SELECT {schema}.defer_event($1, $2::bigint)", options_.schema),
      {Param(id), Param(delay_ms)});
  if (!r.ok()) return r.status();
  const Disposition d =
      r->at(0, 0) == "deferred" ? Disposition::kDeferred : Disposition::kNotClaimed;
  log_disposition(claimed, d, final.ok() ? "" : internal::to_std(final.status().message()));
  return d;
}

absl::StatusOr<Disposition> Dispatcher::record_failure(Connection& conn,
                                                       const ClaimedEvent& claimed,
                                                       const absl::Status& failure,
                                                       std::string_view reason) const {
  const std::string error = failure.ToString();
  absl::StatusOr<Result> r;
  if (is_retryable(failure)) {
    const RetryPolicy backoff{.max_attempts = options_.max_retries + 1,
                              .base_delay = options_.retry_base,
                              .max_delay = options_.retry_cap};
    const std::string delay_ms = std::to_string(
        absl::ToInt64Milliseconds(full_jitter_backoff(backoff, claimed.retry_count)));
    const std::string max_retries = std::to_string(options_.max_retries);
    r = conn.execute(
        internal::with_schema("SELECT {schema}.retry_event($1, $2, $3::bigint, $4::int)",
                              options_.schema),
        {Param(claimed.event.event_id), Param(error), Param(delay_ms), Param(max_retries)});
  } else {
    const std::string dead_letter_reason =
        reason.empty() ? reason_for(failure) : std::string(reason);
    r = conn.execute(
        internal::with_schema("SELECT {schema}.fail_event($1, $2, $3)", options_.schema),
        {Param(claimed.event.event_id), Param(dead_letter_reason), Param(error)});
  }
  if (!r.ok()) {
    emit_log(options_.log, LogLevel::kError, "event failure not recorded; its lease brings it back",
             claimed.trace_id, claimed.event.event_id,
             {{"error", error}, {"recording_error", r.status().ToString()}});
    if (options_.dead_letters != nullptr) {
      const PaymentEvent& e = claimed.event;
      (void)options_.dead_letters->spool(
          {.event_id = e.event_id,
           .event_type = std::string(to_string(e.type)),
           .user_id = e.user_id,
           .amount = e.amount.to_string(),
           .reason = "failure_unrecorded",
           .error = fmt::format("{}; recording it failed: {}", error, r.status().ToString()),
           .trace_id = claimed.trace_id});
    }
    return r.status();
  }
  const std::optional<std::string>& answer = r->at(0, 0);
  const Disposition d = answer == "retry_scheduled" ? Disposition::kRetryScheduled
                        : answer == "failed"        ? Disposition::kFailed
                                                    : Disposition::kNotClaimed;
  log_disposition(claimed, d, error);
  return d;
}

void Dispatcher::log_disposition(const ClaimedEvent& claimed, Disposition d,
                                 std::string_view error) const {
  if (options_.log == nullptr) return;
  const LogLevel level = d == Disposition::kFailed ? LogLevel::kError
                         : d == Disposition::kRetryScheduled || d == Disposition::kNotClaimed
                             ? LogLevel::kWarning
                             : LogLevel::kInfo;  // incl. kDeferred: waiting is normal
  const std::string amount = claimed.event.amount.to_string();
  const std::array<LogField, 6> fields = {{{"event_type", to_string(claimed.event.type)},
                                           {"user_id", claimed.event.user_id},
                                           {"amount", amount},
                                           {"result", to_string(d)},
                                           {"retry_count", std::int64_t{claimed.retry_count}},
                                           {"error", error}}};
  // The error field (last) only when there is one.
  emit_log(options_.log, level, "event", claimed.trace_id, claimed.event.event_id,
           std::span<const LogField>(fields).first(error.empty() ? 5 : 6));
}

absl::StatusOr<int> Dispatcher::run_once(Connection& conn) const {
  absl::StatusOr<std::vector<ClaimedEvent>> batch = claim(conn);
  if (!batch.ok()) return batch.status();
  for (const ClaimedEvent& c : *batch) {
    // A failure to record one outcome leaves that event to its lease; the
    // rest of the batch still gets its turn unless the session is gone.
    absl::StatusOr<Disposition> d = process(conn, c);
    if (!d.ok() && connection_broken(d.status())) return d.status();
  }
  return static_cast<int>(batch->size());
}

absl::Status Dispatcher::listen(Connection& conn) const {
  if (!schema_status_.ok()) return schema_status_;
  return conn.execute(internal::with_schema("LISTEN {schema}_events", options_.schema)).status();
}

absl::StatusOr<bool> Dispatcher::wait_for_work(Connection& conn, absl::Duration max_wait) const {
  return conn.wait_for_notification(max_wait);
}

absl::StatusOr<RecoveryReport> Dispatcher::recover_stale(Connection& conn) const {
  if (!schema_status_.ok()) return schema_status_;
  const std::string max_recoveries = std::to_string(options_.max_recoveries);
  const std::string limit = std::to_string(options_.batch_size);
  absl::StatusOr<Result> r = conn.execute(
      internal::with_schema("SELECT * FROM {schema}.recover_stale_events($1::int, $2::int)",
                            options_.schema),
      {Param(max_recoveries), Param(limit)});
  if (!r.ok()) return r.status();
  RecoveryReport report;
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  for (const auto& row : r->rows) {
    const std::string id = row[0].value_or("");
    if (row[1] == "recovered") {
      ++report.recovered;
      emit_log(options_.log, LogLevel::kWarning, "lease expired; event back to pending", "", id);
      continue;
    }
    ++report.failed;
    emit_log(options_.log, LogLevel::kError, "lease expired too often; event failed", "", id,
             {{"reason", "stale_recoveries_exhausted"}});
    const std::string key = "stale_recoveries_exhausted:" + id;
    const std::string message = fmt::format(
        "event {} failed: its lease expired {} times (workers died or hung); see dead_letter_queue",
        id, options_.max_recoveries + 1);
    sink.alert({.severity = AlertSeverity::kCritical, .key = key, .message = message});
  }
  if (options_.metrics != nullptr) {
    options_.metrics->recovered.increment(static_cast<std::uint64_t>(report.recovered));
    options_.metrics->dead_lettered_stale.increment(static_cast<std::uint64_t>(report.failed));
  }
  return report;
}

}  // namespace idemledger
