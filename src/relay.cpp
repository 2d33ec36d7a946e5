#include "idemledger/relay.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "absl/strings/numbers.h"
#include "idemledger/connection.hpp"
#include "idemledger/status.hpp"
#include "src/internal/absl_compat.hpp"
#include "src/internal/schema_name.hpp"

namespace idemledger {
namespace {

constexpr std::string_view kDeadlineExceeded = "deadline_exceeded";
constexpr std::string_view kObsolete = "event_obsolete";
constexpr std::string_view kExpired = "expired";
constexpr std::string_view kQueryFailed = "relevance_query_failed";
constexpr std::string_view kMaxRetries = "max_retries_exceeded";

std::string millis(absl::Duration d) { return std::to_string(absl::ToInt64Milliseconds(d)); }

absl::StatusOr<std::int64_t> to_int64(const std::optional<std::string>& text) {
  std::int64_t v = 0;
  if (!text || !absl::SimpleAtoi(internal::to_absl(*text), &v)) {
    return absl::InternalError("relay: the server returned a malformed integer");
  }
  return v;
}

}  // namespace

std::string_view to_string(Relevance relevance) {
  switch (relevance) {
    case Relevance::kMatch:
      return "match";
    case Relevance::kMismatch:
      return "mismatch";
    case Relevance::kExpired:
      return "expired";
    case Relevance::kQueryFailed:
      return "query_failed";
  }
  return "unknown";
}

std::string_view to_string(RelayMode mode) {
  switch (mode) {
    case RelayMode::kNormal:
      return "normal";
    case RelayMode::kPaused:
      return "paused";
    case RelayMode::kDraining:
      return "draining";
  }
  return "unknown";
}

std::string_view to_string(RelayDisposition disposition) {
  switch (disposition) {
    case RelayDisposition::kDelivered:
      return "delivered";
    case RelayDisposition::kDeadLettered:
      return "dead_lettered";
    case RelayDisposition::kDropped:
      return "dropped";
    case RelayDisposition::kQuarantined:
      return "quarantined";
    case RelayDisposition::kNotClaimed:
      return "not_claimed";
  }
  return "unknown";
}

RelayPolicy RelayPolicy::retries(int max_retries, MessageValidator validate) {
  RelayPolicy policy;
  policy.max_retries = max_retries;
  policy.validate = std::move(validate);
  return policy;
}

RelayPolicy RelayPolicy::deadline(absl::Duration deadline, RelevanceCheck relevance,
                                  MessageValidator validate) {
  RelayPolicy policy;
  policy.deadline_after = deadline;
  policy.relevance = std::move(relevance);
  policy.validate = std::move(validate);
  return policy;
}

RelevanceCheck ledger_relevance(std::string_view schema) {
  if (!internal::validate_identifier("schema", schema).ok()) {
    return [](Connection&, const RelayMessage&) { return Relevance::kQueryFailed; };
  }
  // The event's status, and whether a confirmed reorg compensation reversed it.
  std::string sql = internal::with_schema(
      R"sql(SELECT e.status,
                   EXISTS (SELECT 1 FROM {schema}.payment_events r
                            WHERE e.tx_hash IS NOT NULL AND r.event_id = 'reorg:' || e.tx_hash
                              AND r.status = 'confirmed')
              FROM {schema}.payment_events e
             WHERE e.event_id = ($1::jsonb)->>'event_id')sql",
      schema);
  return [sql = std::move(sql)](Connection& conn, const RelayMessage& message) {
    const bool credit_or_debit = message.topic == "credited" || message.topic == "debited";
    if (!credit_or_debit && message.topic != "insufficient_funds") return Relevance::kExpired;
    absl::StatusOr<Result> r = conn.execute(sql, {Param(message.payload)});
    if (!r.ok()) return Relevance::kQueryFailed;
    if (r->rows.empty()) return Relevance::kMismatch;
    const bool reversed = r->at(0, 1) == "t";
    if (credit_or_debit) {
      return r->at(0, 0) == "confirmed" && !reversed ? Relevance::kMatch : Relevance::kMismatch;
    }
    return r->at(0, 0) == "failed" ? Relevance::kMatch : Relevance::kMismatch;
  };
}

// Every statement, with the schema spliced in once.
struct Relay::Sql {
  explicit Sql(std::string_view schema)
      : decide(internal::with_schema(
            R"sql(SELECT EXISTS (SELECT 1 FROM {schema}.relay_dead_letters d
                                  WHERE d.resolution IS NULL AND d.next_attempt_at <= now()),
                         EXISTS (SELECT 1 FROM {schema}.outbox o
                                  WHERE o.published_at IS NULL AND o.diverted_at IS NULL
                                    AND (o.claimed_until IS NULL OR o.claimed_until < now())),
                         (SELECT b.state FROM {schema}.circuit_breakers b WHERE b.name = $1))sql",
            schema)),
        claim_outbox(internal::with_schema(
            R"sql(UPDATE {schema}.outbox o
                     SET claimed_by = $1, claimed_until = now() + $2::bigint * interval '1 millisecond'
                   WHERE o.id IN (SELECT c.id FROM {schema}.outbox c
                                   WHERE c.published_at IS NULL AND c.diverted_at IS NULL
                                     AND (c.claimed_until IS NULL OR c.claimed_until < now())
                                   ORDER BY c.id LIMIT $3::int FOR UPDATE SKIP LOCKED)
               RETURNING o.id, o.topic, o.payload::text)sql",
            schema)),
        claim_dead_letters(internal::with_schema(
            R"sql(UPDATE {schema}.relay_dead_letters d
                     SET claimed_by = $1, claimed_until = now() + $2::bigint * interval '1 millisecond'
                   WHERE d.id IN (SELECT c.id FROM {schema}.relay_dead_letters c
                                   WHERE c.resolution IS NULL AND c.next_attempt_at <= now()
                                     AND (c.claimed_until IS NULL OR c.claimed_until < now())
                                   ORDER BY c.next_attempt_at, c.id LIMIT $3::int
                                   FOR UPDATE SKIP LOCKED)
               RETURNING d.outbox_id, d.topic, d.message::text, d.id, d.dlq_retries,
                         (extract(epoch FROM now() - d.first_dlq_at) * 1000)::bigint, d.reason)sql",
            schema)),
        delivered_from_outbox(internal::with_schema(
            R"sql(UPDATE {schema}.outbox o SET published_at = now(), claimed_until = NULL
                   WHERE o.id = $1::bigint AND o.claimed_by = $2
                     AND o.published_at IS NULL AND o.diverted_at IS NULL)sql",
            schema)),
        delivered_from_dead_letters(internal::with_schema(
            R"sql(WITH letter AS (
                    UPDATE {schema}.relay_dead_letters d
                       SET resolution = 'delivered', resolved_at = now(), claimed_until = NULL
                     WHERE d.id = $1::bigint AND d.claimed_by = $2 AND d.resolution IS NULL
                 RETURNING d.outbox_id)
                  UPDATE {schema}.outbox o SET published_at = now()
                    FROM letter WHERE o.id = letter.outbox_id)sql",
            schema)),
        // Off the outbox and into an envelope in one statement: a row is in
        // exactly one place. A first letter that is already over budget (or
        // refused outright) is born dropped.
        dead_letter_from_outbox(internal::with_schema(
            R"sql(WITH moved AS (
                    UPDATE {schema}.outbox o SET diverted_at = now(), claimed_until = NULL
                     WHERE o.id = $1::bigint AND o.claimed_by = $2
                       AND o.published_at IS NULL AND o.diverted_at IS NULL
                 RETURNING o.id, o.topic, o.payload)
                  INSERT INTO {schema}.relay_dead_letters
                         (outbox_id, topic, message, dlq_retries, reason, next_attempt_at,
                          resolution, drop_reason, resolved_at)
                  SELECT m.id, m.topic, m.payload, 1, $3,
                         now() + $4::bigint * interval '1 millisecond',
                         CASE WHEN $5::text IS NOT NULL THEN 'dropped' END, $5::text,
                         CASE WHEN $5::text IS NOT NULL THEN now() END
                    FROM moved m)sql",
            schema)),
        // dlq_retries grows by the write itself; past the budget ($5, NULL
        // for none) the letter is dropped by the same statement.
        dead_letter_again(internal::with_schema(
            R"sql(UPDATE {schema}.relay_dead_letters d
                     SET dlq_retries = d.dlq_retries + 1, last_dlq_at = now(), reason = $3,
                         next_attempt_at = now() + $4::bigint * interval '1 millisecond',
                         claimed_by = NULL, claimed_until = NULL,
                         resolution = CASE WHEN d.dlq_retries + 1 > $5::int THEN 'dropped' END,
                         drop_reason = CASE WHEN d.dlq_retries + 1 > $5::int
                                            THEN 'max_retries_exceeded' END,
                         resolved_at = CASE WHEN d.dlq_retries + 1 > $5::int THEN now() END
                   WHERE d.id = $1::bigint AND d.claimed_by = $2 AND d.resolution IS NULL
               RETURNING d.resolution)sql",
            schema)),
        drop_dead_letter(internal::with_schema(
            R"sql(UPDATE {schema}.relay_dead_letters d
                     SET resolution = 'dropped', drop_reason = $3, resolved_at = now(),
                         claimed_until = NULL
                   WHERE d.id = $1::bigint AND d.claimed_by = $2 AND d.resolution IS NULL)sql",
            schema)),
        quarantine(internal::with_schema(
            R"sql(WITH moved AS (
                    UPDATE {schema}.outbox o SET diverted_at = now(), claimed_until = NULL
                     WHERE o.id = $1::bigint AND o.claimed_by = $2
                       AND o.published_at IS NULL AND o.diverted_at IS NULL
                 RETURNING o.id, o.topic, o.payload)
                  INSERT INTO {schema}.relay_quarantine (outbox_id, topic, message, reason)
                  SELECT m.id, m.topic, m.payload, $3 FROM moved m)sql",
            schema)),
        release_outbox(internal::with_schema("UPDATE {schema}.outbox o SET claimed_until = NULL "
                                             "WHERE o.id = ANY($1::bigint[]) AND o.claimed_by = $2",
                                             schema)),
        release_dead_letters(internal::with_schema(
            "UPDATE {schema}.relay_dead_letters d SET claimed_until = NULL "
            "WHERE d.id = ANY($1::bigint[]) AND d.claimed_by = $2 AND d.resolution IS NULL",
            schema)) {}

  std::string decide;
  std::string claim_outbox;
  std::string claim_dead_letters;
  std::string delivered_from_outbox;
  std::string delivered_from_dead_letters;
  std::string dead_letter_from_outbox;
  std::string dead_letter_again;
  std::string drop_dead_letter;
  std::string quarantine;
  std::string release_outbox;
  std::string release_dead_letters;
};

Relay::Relay(RelayOptions options)
    : options_(std::move(options)),
      options_status_(validate_options()),
      sql_(options_status_.ok() ? std::make_unique<const Sql>(options_.schema) : nullptr),
      marker_name_("relay:" + options_.name),
      breaker_({.name = marker_name_,
                .schema = options_.schema,
                .owner = options_.owner,
                .failure_threshold = options_.failure_threshold,
                .open_for = options_.marker_ttl,
                .probe_lease = options_.probe_lease,
                .metrics = options_.metrics}) {
  if (options_.metrics != nullptr) {
    MetricsRegistry& m = *options_.metrics;
    constexpr std::string_view kHelp =
        "Messages the delivery relay finished, by what became of them.";
    for (const RelayDisposition d :
         {RelayDisposition::kDelivered, RelayDisposition::kDeadLettered, RelayDisposition::kDropped,
          RelayDisposition::kQuarantined, RelayDisposition::kNotClaimed}) {
      results_[static_cast<int>(d)] = &m.counter("idemledger_relay_messages_total", kHelp,
                                                 {{"result", std::string(to_string(d))}});
    }
    mode_gauge_ = &m.gauge("idemledger_relay_mode",
                           "Relay mode this process is in: 0 normal, 1 paused, 2 draining.");
    in_flight_gauge_ =
        &m.gauge("idemledger_relay_in_flight", "Deliveries this process holds right now.");
  }
}

Relay::~Relay() = default;

absl::Status Relay::validate_options() const {
  if (absl::Status s = internal::validate_identifier("schema", options_.schema); !s.ok()) return s;
  if (!options_.transport) return absl::InvalidArgumentError("relay: transport is required");
  if (options_.max_in_flight < 1 || options_.drain_concurrency < 1 ||
      options_.drain_concurrency > options_.max_in_flight) {
    return absl::InvalidArgumentError("relay: need 1 <= drain_concurrency <= max_in_flight");
  }
  if (options_.retry.max_attempts < 1) {
    return absl::InvalidArgumentError("relay: retry.max_attempts must be at least 1");
  }
  for (const auto& [topic, policy] : options_.policies) {
    const bool budget = policy.max_retries.has_value();
    const bool deadline = static_cast<bool>(policy.relevance);
    if (budget == deadline) {
      return absl::InvalidArgumentError(fmt::format(
          "relay: topic \"{}\" needs exactly one policy: a retry budget or a deadline with a "
          "relevance check",
          topic));
    }
    if ((budget && *policy.max_retries < 0) ||
        (deadline && policy.deadline_after <= absl::ZeroDuration())) {
      return absl::InvalidArgumentError(
          fmt::format("relay: topic \"{}\": the budget must be >= 0 and the deadline > 0", topic));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Relay::Decision> Relay::decide(Connection& conn) {
  if (!options_status_.ok()) return options_status_;
  absl::StatusOr<Result> r = conn.execute(sql_->decide, {Param(marker_name_)});
  if (!r.ok()) return r.status();
  const bool due_dead_letters = r->at(0, 0) == "t";
  const bool outbox_waiting = r->at(0, 1) == "t";
  const bool marker_set = r->at(0, 2) == "open" || r->at(0, 2) == "half_open";
  Decision decision;
  if (!marker_set || (!due_dead_letters && !outbox_waiting)) {
    // Closed: every call may go, no need to take the marker row's lock (a
    // write) on every cycle. Nothing to send: no need to ask for a probe.
    decision.mode = marker_set         ? RelayMode::kPaused
                    : due_dead_letters ? RelayMode::kDraining
                                       : RelayMode::kNormal;
  } else {
    const BreakerDecision admission = breaker_.acquire(conn);
    decision.probe = admission.admission == Admission::kProbe;
    decision.mode = admission.admission == Admission::kReject ? RelayMode::kPaused
                    : due_dead_letters                        ? RelayMode::kDraining
                                                              : RelayMode::kNormal;
  }
  set_mode(decision.mode);
  return decision;
}

absl::StatusOr<std::vector<RelayMessage>> Relay::claim_outbox(Connection& conn, int limit) {
  if (!options_status_.ok()) return options_status_;
  absl::StatusOr<Result> r =
      conn.execute(sql_->claim_outbox,
                   {Param(owner()), Param(millis(options_.lease)), Param(std::to_string(limit))});
  if (!r.ok()) return r.status();
  std::vector<RelayMessage> messages;
  messages.reserve(r->rows.size());
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    absl::StatusOr<std::int64_t> id = to_int64(r->at(i, 0));
    if (!id.ok()) return id.status();
    messages.push_back(
        {.outbox_id = *id, .topic = r->at(i, 1).value_or(""), .payload = r->at(i, 2).value_or("")});
  }
  std::sort(messages.begin(), messages.end(),
            [](const RelayMessage& a, const RelayMessage& b) { return a.outbox_id < b.outbox_id; });
  return messages;
}

absl::StatusOr<std::vector<RelayMessage>> Relay::claim_dead_letters(Connection& conn, int limit) {
  if (!options_status_.ok()) return options_status_;
  absl::StatusOr<Result> r =
      conn.execute(sql_->claim_dead_letters,
                   {Param(owner()), Param(millis(options_.lease)), Param(std::to_string(limit))});
  if (!r.ok()) return r.status();
  std::vector<RelayMessage> messages;
  messages.reserve(r->rows.size());
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    absl::StatusOr<std::int64_t> outbox_id = to_int64(r->at(i, 0));
    absl::StatusOr<std::int64_t> letter_id = to_int64(r->at(i, 3));
    absl::StatusOr<std::int64_t> retries = to_int64(r->at(i, 4));
    absl::StatusOr<std::int64_t> age_ms = to_int64(r->at(i, 5));
    for (const auto* v : {&outbox_id, &letter_id, &retries, &age_ms}) {
      if (!v->ok()) return v->status();
    }
    messages.push_back({.outbox_id = *outbox_id,
                        .topic = r->at(i, 1).value_or(""),
                        .payload = r->at(i, 2).value_or(""),
                        .dead_letter_id = *letter_id,
                        .dlq_retries = static_cast<int>(*retries),
                        .since_first_dlq = absl::Milliseconds(*age_ms),
                        .reason = r->at(i, 6).value_or("")});
  }
  return messages;
}

absl::Status Relay::decode(const RelayMessage& message) const {
  const auto policy = options_.policies.find(message.topic);
  if (policy == options_.policies.end()) {
    return absl::InvalidArgumentError(
        fmt::format("no relay policy for topic \"{}\"", message.topic));
  }
  const nlohmann::json payload = nlohmann::json::parse(message.payload, nullptr, false);
  if (payload.is_discarded() || !payload.is_object()) {
    return absl::InvalidArgumentError("the payload is not a JSON object");
  }
  return policy->second.validate ? policy->second.validate(message) : absl::OkStatus();
}

Relay::Verdict Relay::judge(Connection& conn, const RelayMessage& message,
                            const RelayPolicy& policy) const {
  if (!policy.relevance) return {};  // the budget was applied when it was written
  if (message.since_first_dlq >= policy.deadline_after) {
    return {.drop_reason = std::string(kDeadlineExceeded)};
  }
  switch (policy.relevance(conn, message)) {
    case Relevance::kMatch:
      return {};
    case Relevance::kMismatch:
      return {.drop_reason = std::string(kObsolete)};
    case Relevance::kExpired:
      return {.drop_reason = std::string(kExpired)};
    case Relevance::kQueryFailed:
      return {.requeue = true};
  }
  return {.requeue = true};
}

absl::Status Relay::send_with_retries(const RelayMessage& message) const {
  return with_retries(options_.retry, [&] { return options_.transport(message); });
}

absl::StatusOr<Relay::Outcome> Relay::deliver(Connection& conn, const RelayMessage& message,
                                              bool probe) {
  if (!options_status_.ok()) return options_status_;
  return finish(conn, attempt(conn, message, probe));
}

absl::StatusOr<Relay::Outcome> Relay::finish(Connection& conn, const Attempt& attempt) {
  absl::StatusOr<RelayDisposition> recorded = attempt.record(conn);
  if (!recorded.ok()) return recorded.status();
  count(*recorded);
  return Outcome{.disposition = *recorded, .called_downstream = attempt.called_downstream};
}

Relay::Attempt Relay::attempt(Connection& conn, const RelayMessage& message, bool probe) {
  if (absl::Status decoded = decode(message); !decoded.ok()) {
    // A letter that decoded once but no longer does (its policy was
    // removed) is already off the outbox: it ends dropped, with the reason.
    std::string reason = fmt::format("undecodable: {}", decoded.message());
    return {.record = [this, message, reason = std::move(reason)](Connection& c) {
      return message.from_dead_letters() ? record_dropped(c, message, reason)
                                         : record_quarantined(c, message, reason);
    }};
  }
  const RelayPolicy* policy = &options_.policies.find(message.topic)->second;
  const Verdict verdict = message.from_dead_letters() ? judge(conn, message, *policy) : Verdict{};
  if (verdict.drop_reason) {
    return {.record = [this, message, reason = *verdict.drop_reason](Connection& c) {
      return record_dropped(c, message, reason);
    }};
  }
  if (verdict.requeue) {
    return {.record = [this, message, policy](Connection& c) {
      return record_dead_letter(c, message, *policy, kQueryFailed);
    }};
  }
  const absl::Status sent = send_with_retries(message);
  // A refusal is an answer: the downstream is up, the message is wrong.
  report_downstream(conn, probe, sent.ok() || !is_retryable(sent));
  Attempt sent_attempt{.called_downstream = true};
  if (sent.ok()) {
    sent_attempt.record = [this, message](Connection& c) { return record_delivered(c, message); };
  } else if (is_retryable(sent)) {
    sent_attempt.record = [this, message, policy,
                           reason = std::string(sent.ToString())](Connection& c) {
      return record_dead_letter(c, message, *policy, reason);
    };
  } else {
    sent_attempt.record = [this, message,
                           reason = fmt::format("rejected: {}", internal::to_std(sent.message()))](
                              Connection& c) { return record_dropped(c, message, reason); };
  }
  return sent_attempt;
}

absl::StatusOr<RelayDisposition> Relay::record_delivered(Connection& conn,
                                                         const RelayMessage& message) {
  const std::string id =
      std::to_string(message.from_dead_letters() ? message.dead_letter_id : message.outbox_id);
  absl::StatusOr<Result> r = conn.execute(
      message.from_dead_letters() ? sql_->delivered_from_dead_letters : sql_->delivered_from_outbox,
      {Param(id), Param(owner())});
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) {
    log_message(LogLevel::kWarning, "delivered, but the claim was lost meanwhile", message, "");
    return RelayDisposition::kNotClaimed;
  }
  return RelayDisposition::kDelivered;
}

absl::StatusOr<RelayDisposition> Relay::record_dead_letter(Connection& conn,
                                                           const RelayMessage& message,
                                                           const RelayPolicy& policy,
                                                           std::string_view reason) {
  const std::string budget_text = policy.max_retries ? std::to_string(*policy.max_retries) : "";
  const Param budget = policy.max_retries ? Param(budget_text) : Param(std::nullopt);
  const std::string backoff = millis(options_.dlq_backoff);
  const std::string who = owner();
  // The first letter has dlq_retries 1: over a budget of 0 it is born dropped.
  const bool first_over_budget = policy.max_retries && *policy.max_retries < 1;
  absl::StatusOr<Result> r;
  if (message.from_dead_letters()) {
    const std::string id = std::to_string(message.dead_letter_id);
    r = conn.execute(sql_->dead_letter_again,
                     {Param(id), Param(who), Param(reason), Param(backoff), budget});
  } else {
    const std::string id = std::to_string(message.outbox_id);
    r = conn.execute(sql_->dead_letter_from_outbox,
                     {Param(id), Param(who), Param(reason), Param(backoff),
                      first_over_budget ? Param(kMaxRetries) : Param(std::nullopt)});
  }
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) return RelayDisposition::kNotClaimed;
  const bool dropped = message.from_dead_letters() ? r->at(0, 0) == "dropped" : first_over_budget;
  log_message(LogLevel::kWarning, dropped ? "dropped: retry budget spent" : "dead-lettered",
              message, reason);
  return dropped ? RelayDisposition::kDropped : RelayDisposition::kDeadLettered;
}

absl::StatusOr<RelayDisposition> Relay::record_dropped(Connection& conn,
                                                       const RelayMessage& message,
                                                       std::string_view reason) {
  const std::string who = owner();
  const std::string backoff = millis(options_.dlq_backoff);
  absl::StatusOr<Result> r;
  if (message.from_dead_letters()) {
    const std::string id = std::to_string(message.dead_letter_id);
    r = conn.execute(sql_->drop_dead_letter, {Param(id), Param(who), Param(reason)});
  } else {
    // Straight from the outbox: kept as a letter born dropped, for audit.
    const std::string id = std::to_string(message.outbox_id);
    r = conn.execute(sql_->dead_letter_from_outbox,
                     {Param(id), Param(who), Param(reason), Param(backoff), Param(reason)});
  }
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) return RelayDisposition::kNotClaimed;
  log_message(LogLevel::kWarning, "dropped", message, reason);
  return RelayDisposition::kDropped;
}

absl::StatusOr<RelayDisposition> Relay::record_quarantined(Connection& conn,
                                                           const RelayMessage& message,
                                                           std::string_view reason) {
  const std::string id = std::to_string(message.outbox_id);
  absl::StatusOr<Result> r =
      conn.execute(sql_->quarantine, {Param(id), Param(owner()), Param(reason)});
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0) return RelayDisposition::kNotClaimed;
  log_message(LogLevel::kError, "quarantined", message, reason);
  return RelayDisposition::kQuarantined;
}

absl::Status Relay::release(Connection& conn, const std::vector<RelayMessage>& messages) {
  if (!options_status_.ok()) return options_status_;
  std::string outbox_ids;
  std::string letter_ids;
  for (const RelayMessage& m : messages) {
    std::string& ids = m.from_dead_letters() ? letter_ids : outbox_ids;
    ids += ids.empty() ? "{" : ",";
    ids += std::to_string(m.from_dead_letters() ? m.dead_letter_id : m.outbox_id);
  }
  const std::string who = owner();
  for (const auto& [ids, sql] : {std::pair{&outbox_ids, &sql_->release_outbox},
                                 std::pair{&letter_ids, &sql_->release_dead_letters}}) {
    if (ids->empty()) continue;
    const std::string array = *ids + "}";
    if (absl::StatusOr<Result> r = conn.execute(*sql, {Param(array), Param(who)}); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

void Relay::report_downstream(Connection& conn, bool probe, bool healthy) {
  if (probe) {
    breaker_.record(conn, {.admission = Admission::kProbe}, healthy);
    failures_recorded_.store(false, std::memory_order_relaxed);
    return;
  }
  if (!healthy) {
    failures_recorded_.store(true, std::memory_order_relaxed);
    breaker_.record(conn, {.admission = Admission::kAllow}, false);
  } else if (failures_recorded_.exchange(false, std::memory_order_relaxed)) {
    breaker_.record(conn, {.admission = Admission::kAllow}, true);
  }
}

void Relay::count(RelayDisposition disposition) {
  if (Counter* c = results_[static_cast<int>(disposition)]; c != nullptr) c->increment();
}

void Relay::set_mode(RelayMode mode) {
  const RelayMode before = mode_.exchange(mode, std::memory_order_relaxed);
  if (mode_gauge_ != nullptr) mode_gauge_->set(static_cast<std::int64_t>(mode));
  if (before != mode && options_.log != nullptr) {
    const LogField fields[] = {{"from", to_string(before)}, {"to", to_string(mode)}};
    options_.log->log({.level = mode == RelayMode::kPaused ? LogLevel::kWarning : LogLevel::kInfo,
                       .time = absl::Now(),
                       .message = "relay mode changed",
                       .fields = fields});
  }
}

void Relay::log_message(LogLevel level, std::string_view what, const RelayMessage& message,
                        std::string_view reason) const {
  if (options_.log == nullptr) return;
  const LogField fields[] = {{"outbox_id", message.outbox_id},
                             {"topic", message.topic},
                             {"dlq_retries", static_cast<std::int64_t>(message.dlq_retries)},
                             {"reason", reason}};
  options_.log->log({.level = level, .time = absl::Now(), .message = what, .fields = fields});
}

// --- run(): the delivery threads and the loop that feeds them -------------

absl::Status Relay::run(const SessionLender& sessions,
                        const std::function<bool()>& stop_requested) {
  if (!options_status_.ok()) return options_status_;
  std::mutex mu;
  std::condition_variable work_ready;  // a task was queued, or stopping
  std::condition_variable slot_free;   // a delivery finished
  std::deque<RelayMessage> queue;
  int in_flight = 0;  // queued + being delivered
  int drains_in_flight = 0;
  bool stopping = false;

  const auto publish_in_flight = [&] {
    if (in_flight_gauge_ != nullptr) in_flight_gauge_->set(in_flight);
  };
  const auto deliver_one = [&](const RelayMessage& message) {
    std::optional<Attempt> tried;
    absl::Status unrecorded;
    const absl::Status lent = sessions([&](Connection& conn) {
      tried = attempt(conn, message, /*probe=*/false);
      unrecorded = finish(conn, *tried).status();
    });
    // The downstream answered, but the session died before the answer was
    // written: write it on a fresh session, rather than leave the row to its
    // lease and send it a second time.
    for (int retry = 0; lent.ok() && tried && tried->called_downstream && !unrecorded.ok() &&
                        is_retryable(unrecorded) && retry < options_.retry.max_attempts;
         ++retry) {
      absl::SleepFor(full_jitter_backoff(options_.retry, retry));
      const absl::Status again =
          sessions([&](Connection& conn) { unrecorded = finish(conn, *tried).status(); });
      if (!again.ok()) unrecorded = again;
    }
    if (!lent.ok() || !unrecorded.ok()) {
      log_message(LogLevel::kError, "outcome not recorded; the lease brings it back", message,
                  internal::to_std((lent.ok() ? unrecorded : lent).ToString()));
    }
  };

  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(options_.max_in_flight));
  for (int i = 0; i < options_.max_in_flight; ++i) {
    workers.emplace_back([&] {
      for (;;) {
        RelayMessage message;
        {
          std::unique_lock lock(mu);
          work_ready.wait(lock, [&] { return stopping || !queue.empty(); });
          if (queue.empty()) return;  // stopping, and everything claimed is delivered
          message = std::move(queue.front());
          queue.pop_front();
        }
        deliver_one(message);
        {
          std::lock_guard lock(mu);
          --in_flight;
          if (message.from_dead_letters()) --drains_in_flight;
          publish_in_flight();
        }
        slot_free.notify_all();
      }
    });
  }

  const auto wait_a_little = [&] {
    std::unique_lock lock(mu);
    slot_free.wait_for(lock, absl::ToChronoMilliseconds(options_.poll_interval));
  };
  while (!stop_requested()) {
    bool idle = true;
    const absl::Status lent = sessions([&](Connection& conn) {
      absl::StatusOr<Decision> decision = decide(conn);
      if (!decision.ok() || decision->mode == RelayMode::kPaused) return;
      const bool draining = decision->mode == RelayMode::kDraining;
      if (decision->probe) {
        // Exactly one call decides for every replica; messages settled
        // without a call (policy, quarantine) do not count as the probe.
        for (;;) {
          absl::StatusOr<std::vector<RelayMessage>> one =
              draining ? claim_dead_letters(conn, 1) : claim_outbox(conn, 1);
          if (!one.ok() || one->empty()) return;
          absl::StatusOr<Outcome> outcome = deliver(conn, one->front(), /*probe=*/true);
          if (!outcome.ok() || outcome->called_downstream) break;
        }
        idle = false;
        return;
      }
      int free_slots = 0;
      {
        std::lock_guard lock(mu);
        free_slots = options_.max_in_flight - in_flight;
        if (draining) {
          free_slots = std::min(free_slots, options_.drain_concurrency - drains_in_flight);
        }
      }
      if (free_slots <= 0) return;
      absl::StatusOr<std::vector<RelayMessage>> claimed =
          draining ? claim_dead_letters(conn, free_slots) : claim_outbox(conn, free_slots);
      if (!claimed.ok() || claimed->empty()) return;
      idle = false;
      {
        std::lock_guard lock(mu);
        for (RelayMessage& m : *claimed) {
          ++in_flight;
          if (m.from_dead_letters()) ++drains_in_flight;
          queue.push_back(std::move(m));
        }
        publish_in_flight();
      }
      work_ready.notify_all();
    });
    if (!lent.ok() || idle) wait_a_little();
  }
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  work_ready.notify_all();
  for (std::thread& t : workers) t.join();
  return absl::OkStatus();
}

}  // namespace idemledger
