// The one INSERT into dead_letter_queue written from C++ (the SQL functions
// of migration 2 write their own, from the payment_events row): used by
// DeadLetterQueue and by the ledger's failed reorg compensation.
#ifndef IDEMLEDGER_SRC_INTERNAL_DEAD_LETTER_HPP
#define IDEMLEDGER_SRC_INTERNAL_DEAD_LETTER_HPP

#include <string_view>

#include "absl/status/status.h"
#include "idemledger/dlq.hpp"

namespace idemledger::internal {

// Appends `letter` with the next attempt number of its event. A non-empty
// `spool_id` that is already in the table inserts nothing (drains are
// idempotent). REQUIRES: validate_identifier("schema", schema).ok().
absl::Status insert_dead_letter(Connection& conn, std::string_view schema, const DeadLetter& letter,
                                std::string_view spool_id);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_INTERNAL_DEAD_LETTER_HPP
