// Token contract addresses as the ledger stores them: EVM addresses
// ("0x" + 40 hex digits, any case — EIP-55 mixes them) in lower case, so one
// contract has one spelling; other chains' identifiers as given.
#ifndef IDEMLEDGER_SRC_LEDGER_INTERNAL_CONTRACT_HPP
#define IDEMLEDGER_SRC_LEDGER_INTERNAL_CONTRACT_HPP

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idemledger::internal {

// "" stays "" (a native coin). kInvalidArgument unless [A-Za-z0-9]{1,128}.
absl::StatusOr<std::string> normalize_contract(std::string_view contract);

}  // namespace idemledger::internal

#endif  // IDEMLEDGER_SRC_LEDGER_INTERNAL_CONTRACT_HPP
