// idemledger/ledger/transitions.hpp — the one writer of a payment event's status.
//
//   absl::Status s = idemledger::transition_event_status(conn, schema, "evt_1",
//                                                      EventStatus::kEnqueued,
//                                                      EventStatus::kConfirmed);
//
// Every status change — the ledger's, the queue's, an operator's — goes
// through the SQL function <schema>.transition_event(), a compare-and-set
// UPDATE ... WHERE event_id = $1 AND status = $2 checked against the table
// migrate() copied from kValidTransitions (core/event_status.hpp). This is
// the C++ door to it. Thread-safe; the Connection is not.
#ifndef IDEMLEDGER_LEDGER_TRANSITIONS_HPP
#define IDEMLEDGER_LEDGER_TRANSITIONS_HPP

#include <string_view>

#include "absl/status/status.h"
#include "idemledger/core/event_status.hpp"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

// transition_event_status()
//
// Compare-and-set `from` -> `to` on one payment event. Returns OK if the event
// moved, or was already at `to`; kFailedPrecondition if the edge is not in the
// table or the event is terminal; kNotFound if there is no such event;
// kAborted (retryable) if another process changed it concurrently. Moving to
// confirmed also resets retry_count.
[[nodiscard]] absl::Status transition_event_status(Connection& conn, const Schema& schema,
                                                   std::string_view event_id, EventStatus from,
                                                   EventStatus to);

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_TRANSITIONS_HPP
