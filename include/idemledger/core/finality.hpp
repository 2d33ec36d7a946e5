// idemledger/core/finality.hpp — is this chain transaction final yet?
//
// A deposit credited before its block is final can be reorganised away; then
// the only remedy is a compensation that may find the funds already gone.
// A FinalityOracle answers "final?" so the queue credits only final deposits
// (DispatcherOptions::finality). eth/finality.hpp has an Ethereum JSON-RPC one.
//
//   absl::StatusOr<bool> final = oracle.is_finalized("0x5c50...e7a1");
//   // true: credit; false: not yet (ask again later); error: see below
//
// Implementations must be thread-safe.
#ifndef IDEMLEDGER_CORE_FINALITY_HPP
#define IDEMLEDGER_CORE_FINALITY_HPP

#include <string_view>

#include "absl/status/statusor.h"

namespace idemledger {

class FinalityOracle {
 public:
  virtual ~FinalityOracle() = default;
  // True if final, false if not yet; kInvalidArgument for a malformed hash,
  // kFailedPrecondition for a reverted transaction (it will never pay),
  // kUnavailable when the source of truth cannot answer (retry later).
  [[nodiscard]] virtual absl::StatusOr<bool> is_finalized(std::string_view tx_hash) = 0;
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_FINALITY_HPP
