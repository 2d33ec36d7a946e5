#include "src/ledger/internal/sqlstates.hpp"

#include <optional>
#include <string>

#include "idemledger/core/status.hpp"

namespace idemledger::internal {
namespace {

std::optional<absl::StatusCode> code_for(std::string_view state) {
  if (state == kConflictingReplay) return absl::StatusCode::kAlreadyExists;
  if (state == kUnknownUser || state == kEventNotFound || state == kDeadLetterNotFound ||
      state == kHoldNotFound) {
    return absl::StatusCode::kNotFound;
  }
  if (state == kUnknownAsset || state == kTooManyDecimals || state == kCaptureExceedsHold) {
    return absl::StatusCode::kInvalidArgument;
  }
  if (state == kCompensationExceedsBalance || state == kInvalidTransition ||
      state == kEventTerminal || state == kDeadLetterResolved || state == kRelayEnvelopeFixed ||
      state == kAssetDisabled || state == kAssetFixed || state == kUserKept ||
      state == kInvalidHoldTransition) {
    return absl::StatusCode::kFailedPrecondition;
  }
  if (state == kConcurrentChange || state == kRecordInFlight || state == kHoldNotYetApplied) {
    return absl::StatusCode::kAborted;
  }
  if (state == kGuardWithoutRecord || state == kInconsistentRecord) {
    return absl::StatusCode::kInternal;
  }
  // A concurrent writer inserted the same payment event between our lookup
  // and our insert: the transaction rolled back; running it again sees the row.
  if (state == "23505") return absl::StatusCode::kAborted;
  return std::nullopt;
}

}  // namespace

absl::Status interpret_ledger_error(const absl::Status& status) {
  const std::optional<std::string> state = sqlstate(status);
  if (!state) return status;
  const std::optional<absl::StatusCode> code = code_for(*state);
  if (!code || *code == status.code()) return status;
  absl::Status translated(*code, status.message());
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    translated.SetPayload(url, payload);
  });
  return translated;
}

}  // namespace idemledger::internal
