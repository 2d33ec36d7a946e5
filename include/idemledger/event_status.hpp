// idemledger/event_status.hpp — the payment event state machine.
//
//   pending ──> enqueued ──> processing ──> confirmed
//      │           │  │  └──────────────────────^
//      │           │  └──> pending (stale claim released)
//      └───────────┴──────────────> failed  <── processing
//
// confirmed and failed are terminal. The enqueued -> confirmed edge exists for
// the replay path (the outcome was recorded but the process died before the
// status moved) and for the ledger's one-transaction apply, where "processing"
// would never be visible to anyone.
//
//   if (!idemledger::is_valid_transition(from, to)) ...
//   absl::Status s = idemledger::transition_event_status(conn, schema, "evt_1",
//                                                      EventStatus::kEnqueued,
//                                                      EventStatus::kConfirmed);
//
// transition_event_status() is the only code that changes payment_events.status
// (the ledger's server-side function calls the same SQL function it calls).
// The table below is the one source of truth: migrate() copies it into the
// database. Functions here are thread-safe; Connection is not.
#ifndef IDEMLEDGER_EVENT_STATUS_HPP
#define IDEMLEDGER_EVENT_STATUS_HPP

#include <array>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"

namespace idemledger {

class Connection;

enum class EventStatus { kPending, kEnqueued, kProcessing, kConfirmed, kFailed };

inline constexpr std::array<EventStatus, 5> kAllEventStatuses = {
    EventStatus::kPending, EventStatus::kEnqueued, EventStatus::kProcessing,
    EventStatus::kConfirmed, EventStatus::kFailed};

// The seed's VALID_TRANSITIONS, edge by edge.
inline constexpr std::array<std::pair<EventStatus, EventStatus>, 8> kValidTransitions = {{
    {EventStatus::kPending, EventStatus::kEnqueued},
    {EventStatus::kPending, EventStatus::kFailed},
    {EventStatus::kEnqueued, EventStatus::kProcessing},
    {EventStatus::kEnqueued, EventStatus::kFailed},
    {EventStatus::kEnqueued, EventStatus::kPending},
    {EventStatus::kEnqueued, EventStatus::kConfirmed},
    {EventStatus::kProcessing, EventStatus::kConfirmed},
    {EventStatus::kProcessing, EventStatus::kFailed},
}};

// Edges only an audited operator action takes, never transition_event_status():
// replaying a dead letter (idemledger-admin dlq replay) returns a failed event,
// which never touched a balance, to pending. migrate() copies them into the
// database table marked operator_only.
inline constexpr std::array<std::pair<EventStatus, EventStatus>, 1> kOperatorTransitions = {{
    {EventStatus::kFailed, EventStatus::kPending},
}};

[[nodiscard]] constexpr bool is_valid_transition(EventStatus from, EventStatus to) {
  for (const auto& [f, t] : kValidTransitions) {
    if (f == from && t == to) return true;
  }
  return false;
}

[[nodiscard]] constexpr bool is_terminal(EventStatus s) {
  return s == EventStatus::kConfirmed || s == EventStatus::kFailed;
}

// The database spelling: "pending", "enqueued", ...
[[nodiscard]] std::string_view to_string(EventStatus s);
[[nodiscard]] std::optional<EventStatus> parse_event_status(std::string_view text);

// transition_event_status()
//
// Compare-and-set `from` -> `to` on one payment event in `schema`. Returns OK
// if the event moved, or was already at `to`; kFailedPrecondition if the edge
// is not in the table or the event is terminal (AlreadyProcessed); kNotFound
// if there is no such event; kAborted (retryable) if another process changed
// it concurrently. Moving to confirmed also resets retry_count.
[[nodiscard]] absl::Status transition_event_status(Connection& conn, std::string_view schema,
                                                   std::string_view event_id, EventStatus from,
                                                   EventStatus to);

}  // namespace idemledger

#endif  // IDEMLEDGER_EVENT_STATUS_HPP
