#include "idemledger/queue/dispatcher.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <span>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/retry.hpp"
#include "idemledger/core/status.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {
namespace {

// The Ledger step a claimed event asks for.
LedgerStep step_of(const ClaimedEvent& claimed) {
  const PaymentEvent& e = claimed.event;
  switch (e.type) {
    case EventType::kWithdrawalRequested:
      return HoldRequest{.event_id = e.event_id,
                         .user_id = e.user_id,
                         .asset = e.asset,
                         .amount = e.amount,
                         .fee = claimed.fee.value_or(Amount()),
                         .expires_in = claimed.expires_in.value_or(absl::Hours(24))};
    case EventType::kWithdrawalConfirmed:
      return PostRequest{
          .hold_id = claimed.hold_id,
          .user_id = e.user_id,
          .amount = claimed.has_amount ? std::optional<Amount>(e.amount) : std::nullopt,
          .fee = claimed.fee,
          .event_id = e.event_id};
    case EventType::kWithdrawalFailed:
      return VoidRequest{.hold_id = claimed.hold_id, .user_id = e.user_id, .event_id = e.event_id};
    default:
      return e;
  }
}

// What the step's answer makes of the event, in the terms settle() reads: a
// refused hold step (the hold is in another final state; the ledger raised
// the alert) is a permanent failure of this event, with a dead letter for an
// operator.
absl::StatusOr<Outcome> outcome_of(const ClaimedEvent& claimed,
                                   const absl::StatusOr<StepResult>& result) {
  if (!result.ok()) return result.status();
  if (const auto* outcome = std::get_if<Outcome>(&*result)) return *outcome;
  const HoldResult& step = std::get<HoldResult>(*result);
  switch (step.outcome) {
    case HoldOutcome::kApplied:
      return Outcome::kApplied;
    case HoldOutcome::kAlreadyApplied:
      return Outcome::kAlreadyApplied;
    case HoldOutcome::kInsufficientFunds:
      return Outcome::kInsufficientFunds;
    case HoldOutcome::kRefused:
      break;
  }
  return absl::FailedPreconditionError(fmt::format("{} of hold {} refused: the hold is {}",
                                                   to_string(claimed.event.type), claimed.hold_id,
                                                   to_string(step.state)));
}

// Reason recorded in the dead letter for a permanent failure: the code's name.
std::string reason_for(const absl::Status& failure) {
  std::string name = absl::StatusCodeToString(failure.code());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

Dispatcher::Dispatcher(const Ledger& ledger, DispatcherOptions options)
    : ledger_(ledger), options_(options) {}

absl::StatusOr<std::vector<ClaimedEvent>> Dispatcher::claim(Connection& conn) const {
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT * FROM {schema}.claim_events($1::int, $2::bigint)"),
      Params(options_.batch_size, options_.lease));
  if (!r.ok()) return r.status();
  const absl::Time now = absl::Now();
  std::vector<ClaimedEvent> claimed;
  claimed.reserve(r->rows.size());
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    auto read =
        r->row(i)
            .read<std::string, std::int64_t, std::optional<Amount>, EventType, int,
                  std::optional<std::string>, std::int64_t, std::string, std::optional<Amount>,
                  std::optional<std::string>, std::optional<std::int64_t>>();
    // The claim committed: events it could not read come back after their lease.
    if (!read.ok()) return read.status();
    auto& [id, user, amount, type, retries, trace, age_us, asset, fee, hold_id, expires_ms] = *read;
    absl::StatusOr<AssetCode> code = AssetCode::create(asset);
    if (!code.ok())
      return absl::InternalError(fmt::format("claimed event {}: {}", id, code.status().message()));
    claimed.push_back(
        {.event = {.event_id = std::move(id),
                   .type = type,
                   .user_id = user,
                   .amount = amount.value_or(Amount()),
                   .asset = *code},
         .fee = fee,
         .hold_id = hold_id.value_or(""),
         .expires_in = expires_ms ? std::optional<absl::Duration>(absl::Milliseconds(*expires_ms))
                                  : std::nullopt,
         .has_amount = amount.has_value(),
         .retry_count = retries,
         .trace_id = trace.value_or(""),
         .age_at_claim = absl::Microseconds(age_us),
         .claimed_at = now});
  }
  return claimed;
}

absl::StatusOr<Disposition> Dispatcher::process(Connection& conn,
                                                const ClaimedEvent& claimed) const {
  return measured(claimed, process_unmeasured(conn, claimed));
}

absl::StatusOr<Disposition> Dispatcher::measured(const ClaimedEvent& claimed,
                                                 absl::StatusOr<Disposition> d) const {
  if (d.ok() && (*d == Disposition::kApplied || *d == Disposition::kAlreadyApplied ||
                 *d == Disposition::kInsufficientFunds)) {
    log_disposition(claimed, *d, "");  // failures are logged with their error where recorded
  }
  if (options_.metrics == nullptr || !d.ok()) return d;
  LedgerMetrics& m = *options_.metrics;
  // Final now (kAlreadyApplied was final before this claim; the Ledger counts it).
  if (*d == Disposition::kApplied || *d == Disposition::kInsufficientFunds ||
      *d == Disposition::kFailed) {
    observe(m.time_to_confirm, claimed.age_at_claim + (absl::Now() - claimed.claimed_at));
  }
  if (*d == Disposition::kFailed) m.dead_lettered_failed.Increment();
  if (*d == Disposition::kRetryScheduled) m.retries_scheduled.Increment();
  return d;
}

absl::StatusOr<Disposition> Dispatcher::process_unmeasured(Connection& conn,
                                                           const ClaimedEvent& claimed) const {
  if (needs_finality(claimed)) {
    absl::StatusOr<std::optional<Disposition>> held = hold_until_final(conn, claimed);
    if (!held.ok()) return held.status();
    if (*held) return **held;
  }
  return settle(conn, claimed, apply(conn, claimed));
}

bool Dispatcher::needs_finality(const ClaimedEvent& claimed) const {
  return options_.finality != nullptr && is_credit(claimed.event.type);
}

absl::StatusOr<Disposition> Dispatcher::settle(Connection& conn, const ClaimedEvent& claimed,
                                               const absl::StatusOr<Outcome>& outcome) const {
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

absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> Dispatcher::apply_together(
    Connection& conn, std::span<const ClaimedEvent* const> claimed) const {
  std::vector<LedgerStep> steps;
  steps.reserve(claimed.size());
  for (const ClaimedEvent* c : claimed) steps.push_back(step_of(*c));
  return ledger_.process_steps(conn, steps);
}

absl::Status Dispatcher::settle_together(
    Connection& conn, std::span<const ClaimedEvent* const> claimed,
    std::span<const absl::StatusOr<StepResult>> answers) const {
  for (std::size_t i = 0; i < claimed.size(); ++i) {
    absl::StatusOr<Disposition> d =
        measured(*claimed[i], settle(conn, *claimed[i], outcome_of(*claimed[i], answers[i])));
    if (!d.ok() && connection_broken(d.status())) return d.status();
  }
  return absl::OkStatus();
}

absl::Status Dispatcher::process_together(Connection& conn,
                                          std::span<const ClaimedEvent* const> claimed) const {
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> answers = apply_together(conn, claimed);
  if (answers.ok()) return settle_together(conn, claimed, *answers);
  if (connection_broken(answers.status())) {
    return answers.status();  // in doubt or not, the leases bring them back; the keys make it exact
  }
  // The batch as a whole failed (a lock or statement timeout): nothing of it
  // was applied, and each event takes its own turn.
  for (const ClaimedEvent* c : claimed) {
    absl::StatusOr<Disposition> d = process(conn, *c);
    if (!d.ok() && connection_broken(d.status())) return d.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<Outcome> Dispatcher::apply(Connection& conn, const ClaimedEvent& claimed) const {
  return outcome_of(claimed, ledger_.process_step(conn, step_of(claimed)));
}

absl::StatusOr<std::optional<Disposition>> Dispatcher::hold_until_final(
    Connection& conn, const ClaimedEvent& claimed) const {
  const std::string& id = claimed.event.event_id;
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      options_.schema.qualify("SELECT tx_hash FROM {schema}.payment_events WHERE event_id = $1"),
      Params(id));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return std::nullopt;
  absl::StatusOr<std::optional<std::string>> hash = r->row(0).get_optional<std::string>(0);
  if (!hash.ok()) return hash.status();
  if (!*hash) return std::nullopt;  // nothing to wait for
  absl::StatusOr<bool> final = options_.finality->is_finalized(**hash);
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
  absl::StatusOr<Result> deferred =
      conn.execute(options_.schema.qualify("SELECT {schema}.defer_event($1, $2::bigint)"),
                   Params(id, options_.finality_recheck));
  if (!deferred.ok()) return deferred.status();
  absl::StatusOr<Disposition> d = read_single<Disposition>(*deferred, "defer_event");
  if (!d.ok()) return d.status();
  log_disposition(claimed, *d, final.ok() ? "" : internal::to_std(final.status().message()));
  return *d;
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
    r = conn.execute(
        options_.schema.qualify("SELECT {schema}.retry_event($1, $2, $3::bigint, $4::int)"),
        Params(claimed.event.event_id, error, full_jitter_backoff(backoff, claimed.retry_count),
               options_.max_retries));
  } else {
    r = conn.execute(options_.schema.qualify("SELECT {schema}.fail_event($1, $2, $3)"),
                     Params(claimed.event.event_id,
                            reason.empty() ? reason_for(failure) : std::string(reason), error));
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
           .asset = e.asset ? std::string(e.asset->code()) : std::string(),
           .amount = claimed.has_amount ? e.amount.to_string() : std::string(),
           .reason = "failure_unrecorded",
           .error = fmt::format("{}; recording it failed: {}", error, r.status().ToString()),
           .trace_id = claimed.trace_id});
    }
    return r.status();
  }
  // retry_event / fail_event answer retry_scheduled | failed | not_claimed.
  absl::StatusOr<Disposition> d = read_single<Disposition>(*r, "record failure");
  if (!d.ok()) return d.status();
  log_disposition(claimed, *d, error);
  return *d;
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
  if (!options_.apply_with_claim || !options_.apply_in_batches || conn.in_transaction() ||
      static_cast<std::size_t>(std::max(options_.batch_size, 0)) > kMaxBatchSize) {
    return claim_then_process(conn);
  }
  // The claimed events stay locked until this transaction ends: should this
  // worker be cut off before its apply, the server ends it after the idle
  // limit, and other workers' claims find the events again.
  absl::StatusOr<Transaction> tx = Transaction::begin(
      conn, {.idle_limit = options_.idle_in_transaction_limit, .pin_search_path = true});
  if (!tx.ok()) return tx.status();
  absl::StatusOr<std::vector<ClaimedEvent>> batch = claim(conn);
  if (!batch.ok()) return batch.status();  // rolled back: nothing claimed
  const auto waits = [&](const ClaimedEvent& c) { return needs_finality(c); };
  if (batch->empty() || std::any_of(batch->begin(), batch->end(), waits)) {
    // Nothing to apply, or a credit the oracle must clear first, outside any
    // transaction: the claim commits now and the rest goes as process_all()
    // takes it.
    if (absl::Status s = tx->commit(); !s.ok()) return s;
    if (absl::Status s = process_all(conn, *batch); !s.ok()) return s;
    return static_cast<int>(batch->size());
  }
  std::vector<const ClaimedEvent*> claimed;
  claimed.reserve(batch->size());
  for (const ClaimedEvent& c : *batch) claimed.push_back(&c);
  absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> answers = apply_together(conn, claimed);
  if (!answers.ok()) {
    // Nothing of the claim or the apply happened (the events are pending
    // again, with no lease). A batch that fails as a whole (a lock or
    // statement timeout) is claimed again the two-commit way, where each of
    // its events takes its own turn.
    (void)tx->rollback();
    if (connection_broken(answers.status())) return answers.status();
    return claim_then_process(conn);
  }
  // In doubt or rolled back: all of it or none of it, and the keys make a
  // second apply exact.
  if (absl::Status s = tx->commit(); !s.ok()) return s;
  if (absl::Status s = settle_together(conn, claimed, *answers); !s.ok()) return s;
  return static_cast<int>(batch->size());
}

absl::StatusOr<int> Dispatcher::claim_then_process(Connection& conn) const {
  absl::StatusOr<std::vector<ClaimedEvent>> batch = claim(conn);
  if (!batch.ok()) return batch.status();
  if (absl::Status s = process_all(conn, *batch); !s.ok()) return s;
  return static_cast<int>(batch->size());
}

absl::Duration Dispatcher::linger_after(std::size_t claimed) const {
  const bool short_of_full =
      claimed > 0 && claimed < static_cast<std::size_t>(std::max(options_.batch_size, 0));
  return short_of_full ? std::max(options_.claim_linger, absl::ZeroDuration())
                       : absl::ZeroDuration();
}

absl::Status Dispatcher::process_all(Connection& conn,
                                     std::span<const ClaimedEvent> claimed) const {
  // In claim order: each run of events that wait for nothing — single-phase
  // events and hold steps alike — is applied together (one transaction, one
  // round trip, answered in claim order, so a hold sees the deposit claimed
  // ahead of it); a credit waiting for finality goes alone, after the run
  // before it.
  std::vector<const ClaimedEvent*> run;
  const auto flush = [&]() -> absl::Status {
    for (std::size_t at = 0; at < run.size(); at += kMaxBatchSize) {
      const std::size_t n = std::min(kMaxBatchSize, run.size() - at);
      if (absl::Status s = process_together(conn, std::span(run).subspan(at, n)); !s.ok()) {
        return s;
      }
    }
    run.clear();
    return absl::OkStatus();
  };
  for (const ClaimedEvent& c : claimed) {
    if (options_.apply_in_batches && !needs_finality(c)) {
      run.push_back(&c);
      continue;
    }
    if (absl::Status s = flush(); !s.ok()) return s;
    // A failure to record one outcome leaves that event to its lease; the
    // rest still get their turn unless the session is gone.
    absl::StatusOr<Disposition> d = process(conn, c);
    if (!d.ok() && connection_broken(d.status())) return d.status();
  }
  return flush();
}

absl::Status Dispatcher::listen(Connection& conn) const {
  return conn.execute(options_.schema.qualify("LISTEN {schema}_events")).status();
}

absl::StatusOr<bool> Dispatcher::wait_for_work(Connection& conn, absl::Duration max_wait) const {
  return conn.wait_for_notification(max_wait);
}

absl::StatusOr<RecoveryReport> Dispatcher::recover_stale(Connection& conn) const {
  absl::StatusOr<Result> r = conn.execute(
      options_.schema.qualify("SELECT * FROM {schema}.recover_stale_events($1::int, $2::int)"),
      Params(options_.max_recoveries, options_.batch_size));
  if (!r.ok()) return r.status();
  RecoveryReport report;
  AlertSink& sink = alert_sink_or_default(options_.alerts);
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    absl::StatusOr<std::string> id_or = r->row(i).get<std::string>(0);
    absl::StatusOr<std::string> result = r->row(i).get<std::string>(1);
    if (!id_or.ok()) return id_or.status();
    if (!result.ok()) return result.status();
    const std::string& id = *id_or;
    if (*result == "recovered") {
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
    options_.metrics->recovered.Increment(static_cast<double>(report.recovered));
    options_.metrics->dead_lettered_stale.Increment(static_cast<double>(report.failed));
  }
  return report;
}

}  // namespace idemledger
