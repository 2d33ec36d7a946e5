#include "idemledger/relay/policy.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/event_status.hpp"
#include "idemledger/ledger/hold.hpp"
#include "idemledger/ledger/topics.hpp"
#include "src/core/internal/pinned.hpp"

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
  // The event's status, whether a confirmed reorg compensation reversed it,
  // and the state of the hold it names (a hold set directly has no event row).
  std::string sql = schema.qualify(
      R"sql(SELECT e.status,
                   EXISTS (SELECT 1 FROM {schema}.payment_events r
                            WHERE e.tx_hash IS NOT NULL
                              AND r.event_id IN ('reorg:' || e.tx_hash,
                                                 'reorg:' || lower(e.tx_hash))
                              AND r.status = 'confirmed'),
                   h.state
              FROM (SELECT ($1::jsonb)->>'event_id' AS id) m
              LEFT JOIN {schema}.payment_events e ON e.event_id = m.id
              LEFT JOIN {schema}.holds h ON h.event_id = m.id)sql");
  return [sql = std::move(sql)](Connection& conn, const RelayMessage& message) {
    const std::optional<OutboxTopic> topic = parse_outbox_topic(message.topic);
    if (!topic) return Relevance::kExpired;  // not ours: the ledger cannot vouch for it
    absl::StatusOr<Result> r = internal::execute_pinned(conn, sql, Params(message.payload));
    if (!r.ok() || r->rows.size() != 1) return Relevance::kQueryFailed;
    auto read =
        r->row(0).read<std::optional<EventStatus>, std::optional<bool>, std::optional<HoldState>>();
    if (!read.ok()) return Relevance::kQueryFailed;
    const auto& [status, reversed, hold] = *read;
    const auto match = [](bool still_true) {
      return still_true ? Relevance::kMatch : Relevance::kMismatch;
    };
    switch (*topic) {
      case OutboxTopic::kCredited:
      case OutboxTopic::kDebited:
        return match(status == EventStatus::kConfirmed && !reversed.value_or(false));
      case OutboxTopic::kInsufficientFunds:
        return match(hold ? hold == HoldState::kRejected : status == EventStatus::kFailed);
      case OutboxTopic::kHeld:
        return match(hold == HoldState::kHeld);
      case OutboxTopic::kPosted:
        return match(hold == HoldState::kPosted);
      case OutboxTopic::kVoided:
        return match(hold == HoldState::kVoided);
      case OutboxTopic::kExpired:
        return match(hold == HoldState::kExpired);
    }
    return Relevance::kExpired;
  };
}

}  // namespace idemledger
