// The SQLSTATEs the ledger's server-side functions raise (class "IL", unused
// by PostgreSQL), and their translation into canonical statuses.
#ifndef IDEMLEDGER_SRC_LEDGER_INTERNAL_SQLSTATES_HPP
#define IDEMLEDGER_SRC_LEDGER_INTERNAL_SQLSTATES_HPP

#include <string_view>

#include "absl/status/status.h"

namespace idemledger::internal {

inline constexpr std::string_view kConflictingReplay = "IL001";           // kAlreadyExists
inline constexpr std::string_view kUnknownUser = "IL002";                 // kNotFound
inline constexpr std::string_view kCompensationExceedsBalance = "IL003";  // kFailedPrecondition
inline constexpr std::string_view kGuardWithoutRecord =
    "IL004";  // duplicate caught by balance_events
inline constexpr std::string_view kInvalidTransition = "IL010";      // kFailedPrecondition
inline constexpr std::string_view kEventNotFound = "IL011";          // kNotFound
inline constexpr std::string_view kEventTerminal = "IL012";          // kFailedPrecondition
inline constexpr std::string_view kConcurrentChange = "IL013";       // kAborted (retry)
inline constexpr std::string_view kInconsistentRecord = "IL014";     // kInternal (alert)
inline constexpr std::string_view kDeadLetterNotFound = "IL015";     // kNotFound
inline constexpr std::string_view kDeadLetterResolved = "IL016";     // kFailedPrecondition
inline constexpr std::string_view kRelayEnvelopeFixed = "IL017";     // kFailedPrecondition
inline constexpr std::string_view kRecordInFlight = "IL020";         // kAborted (retry)
inline constexpr std::string_view kUnknownAsset = "IL030";           // kInvalidArgument
inline constexpr std::string_view kAssetDisabled = "IL031";          // kFailedPrecondition
inline constexpr std::string_view kTooManyDecimals = "IL032";        // kInvalidArgument
inline constexpr std::string_view kHoldNotFound = "IL034";           // kNotFound
inline constexpr std::string_view kHoldNotYetApplied = "IL035";      // kAborted (retry)
inline constexpr std::string_view kCaptureExceedsHold = "IL036";     // kInvalidArgument
inline constexpr std::string_view kAssetFixed = "IL041";             // kFailedPrecondition
inline constexpr std::string_view kUserKept = "IL042";               // kFailedPrecondition
inline constexpr std::string_view kInvalidHoldTransition = "IL050";  // kFailedPrecondition

// Translates a failed ledger statement into the status a caller acts on. Our
// own SQLSTATEs get their codes; 23505 (a concurrent writer created the same
// event row) becomes kAborted so the transaction is retried; everything else
// keeps the generic SQLSTATE mapping.
absl::Status interpret_ledger_error(const absl::Status& status);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_LEDGER_INTERNAL_SQLSTATES_HPP
