// idemledger/core/event_status.hpp — the payment event state machine.
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
//   static_assert(idemledger::is_valid_transition(EventStatus::kEnqueued,
//                                                 EventStatus::kConfirmed));
//
// The table below is the one source of truth: migrate() copies it into the
// database, where one SQL function, transition_event(), performs every status
// change (ledger/transitions.hpp). Everything here is constexpr and thread-safe.
#ifndef IDEMLEDGER_CORE_EVENT_STATUS_HPP
#define IDEMLEDGER_CORE_EVENT_STATUS_HPP

#include <array>
#include <optional>
#include <string_view>
#include <utility>

#include "idemledger/core/enum_names.hpp"
#include "idemledger/core/state_machine.hpp"

namespace idemledger {

enum class EventStatus { kPending, kEnqueued, kProcessing, kConfirmed, kFailed };

inline constexpr EnumNames<EventStatus, 5> kEventStatusNames{{{
    {EventStatus::kPending, "pending"},
    {EventStatus::kEnqueued, "enqueued"},
    {EventStatus::kProcessing, "processing"},
    {EventStatus::kConfirmed, "confirmed"},
    {EventStatus::kFailed, "failed"},
}}};
constexpr const auto& enum_names(EventStatus) { return kEventStatusNames; }

inline constexpr std::array<EventStatus, 5> kAllEventStatuses = {
    EventStatus::kPending, EventStatus::kEnqueued, EventStatus::kProcessing,
    EventStatus::kConfirmed, EventStatus::kFailed};

// The seed's VALID_TRANSITIONS, edge by edge.
inline constexpr Edges<EventStatus, 8> kValidTransitions = {{
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
inline constexpr Edges<EventStatus, 1> kOperatorTransitions = {{
    {EventStatus::kFailed, EventStatus::kPending},
}};

[[nodiscard]] constexpr bool is_valid_transition(EventStatus from, EventStatus to) {
  return has_edge(kValidTransitions, from, to);
}

[[nodiscard]] constexpr bool is_terminal(EventStatus s) {
  return s == EventStatus::kConfirmed || s == EventStatus::kFailed;
}

// to_string() (enum_names.hpp) gives the database spelling: "pending", ...;
// parse_event_status() reads it back.
[[nodiscard]] constexpr std::optional<EventStatus> parse_event_status(std::string_view text) {
  return kEventStatusNames.parse(text);
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_EVENT_STATUS_HPP
