#include "idemledger/relay/policy.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/ledger/topics.hpp"

namespace idemledger {

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

absl::Status RelayPolicy::check(std::string_view topic) const {
  const bool budget = max_retries.has_value();
  const bool with_deadline = static_cast<bool>(relevance);
  if (budget == with_deadline) {
    return absl::InvalidArgumentError(fmt::format(
        "relay: topic \"{}\" needs exactly one policy: a retry budget or a deadline with a "
        "relevance check",
        topic));
  }
  if ((budget && *max_retries < 0) || (with_deadline && deadline_after <= absl::ZeroDuration())) {
    return absl::InvalidArgumentError(
        fmt::format("relay: topic \"{}\": the budget must be >= 0 and the deadline > 0", topic));
  }
  return absl::OkStatus();
}

Verdict judge(Connection& conn, const RelayMessage& message, const RelayPolicy& policy) {
  if (!policy.relevance) return {};  // the budget was applied when it was written
  if (message.since_first_dlq >= policy.deadline_after) {
    return {.drop_reason = std::string(kDropDeadlineExceeded)};
  }
  switch (policy.relevance(conn, message)) {
    case Relevance::kMatch:
      return {};
    case Relevance::kMismatch:
      return {.drop_reason = std::string(kDropObsolete)};
    case Relevance::kExpired:
      return {.drop_reason = std::string(kDropExpired)};
    case Relevance::kQueryFailed:
      return {.requeue = true};
  }
  return {.requeue = true};
}

absl::Status decode(const RelayMessage& message, const RelayPolicy* policy) {
  if (policy == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("no relay policy for topic \"{}\"", message.topic));
  }
  const nlohmann::json payload = nlohmann::json::parse(message.payload, nullptr, false);
  if (payload.is_discarded() || !payload.is_object()) {
    return absl::InvalidArgumentError("the payload is not a JSON object");
  }
  return policy->validate ? policy->validate(message) : absl::OkStatus();
}

RelevanceCheck ledger_relevance(const Schema& schema) {
  // The event's status, and whether a confirmed reorg compensation reversed it.
  std::string sql = schema.qualify(
      R"sql(SELECT e.status,
                   EXISTS (SELECT 1 FROM {schema}.payment_events r
                            WHERE e.tx_hash IS NOT NULL AND r.event_id = 'reorg:' || e.tx_hash
                              AND r.status = 'confirmed')
              FROM {schema}.payment_events e
             WHERE e.event_id = ($1::jsonb)->>'event_id')sql");
  return [sql = std::move(sql)](Connection& conn, const RelayMessage& message) {
    const std::optional<OutboxTopic> topic = parse_outbox_topic(message.topic);
    if (!topic) return Relevance::kExpired;  // not ours: the ledger cannot vouch for it
    absl::StatusOr<Result> r = conn.execute(sql, Params(message.payload));
    if (!r.ok()) return Relevance::kQueryFailed;
    if (r->rows.empty()) return Relevance::kMismatch;
    absl::StatusOr<EventStatus> status = r->row(0).get<EventStatus>(0);
    absl::StatusOr<bool> reversed = r->row(0).get<bool>(1);
    if (!status.ok() || !reversed.ok()) return Relevance::kQueryFailed;
    switch (*topic) {
      case OutboxTopic::kCredited:
      case OutboxTopic::kDebited:
        return *status == EventStatus::kConfirmed && !*reversed ? Relevance::kMatch
                                                                : Relevance::kMismatch;
      case OutboxTopic::kInsufficientFunds:
        return *status == EventStatus::kFailed ? Relevance::kMatch : Relevance::kMismatch;
    }
    return Relevance::kExpired;
  };
}

}  // namespace idemledger
