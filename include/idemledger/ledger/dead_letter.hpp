// idemledger/ledger/dead_letter.hpp — one failed attempt, kept for an operator.
//
//   absl::Status s = idemledger::append_dead_letter(conn, schema,
//       {.event_id = "evt_1", .event_type = "deposit", .user_id = 7, .amount = "5",
//        .reason = "not_found", .error = "user 7 not found"});
//
// dead_letter_queue keeps every attempt (no unique on the event id): the
// attempt number counts the event's earlier letters. The insert itself lives
// once, in the SQL function <schema>.dead_letter_append(), which the queue's
// server-side functions, this call and the spool drain (queue/dlq.hpp) all use.
// Thread-safe; the Connection is not.
#ifndef IDEMLEDGER_LEDGER_DEAD_LETTER_HPP
#define IDEMLEDGER_LEDGER_DEAD_LETTER_HPP

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "idemledger/core/schema.hpp"

namespace idemledger {

class Connection;

struct DeadLetter {
  std::string event_id;
  std::string event_type;
  std::int64_t user_id = 0;
  std::string asset;   // its code; "" for the default asset
  std::string amount;  // canonical Amount string; "" for none (a void)
  std::string reason;  // short machine-readable cause: "retries_exhausted", "not_found", ...
  std::string error;   // the full error text
  std::string trace_id;
};

// append_dead_letter()
//
// Appends `letter` with the next attempt number of its event. A non-empty
// `spool_id` already in the table inserts nothing (a spool drained twice).
[[nodiscard]] absl::Status append_dead_letter(Connection& conn, const Schema& schema,
                                              const DeadLetter& letter,
                                              std::string_view spool_id = {});

}  // namespace idemledger

#endif  // IDEMLEDGER_LEDGER_DEAD_LETTER_HPP
