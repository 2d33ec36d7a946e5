#include "src/ledger/internal/contract.hpp"

#include <fmt/format.h>

#include "src/core/internal/text.hpp"

namespace idemledger::internal {

absl::StatusOr<std::string> normalize_contract(std::string_view contract) {
  const auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  bool ok = contract.size() <= 128;
  for (char c : contract) ok = ok && alnum(c);
  if (!ok) {
    return absl::InvalidArgumentError(fmt::format(
        "contract must be 1..128 letters and digits, got {}", quoted_for_humans(contract, 40)));
  }
  std::string out(contract);
  const auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  bool evm = out.size() == 42 && out.starts_with("0x");
  for (std::size_t i = 2; evm && i < out.size(); ++i) evm = hex(out[i]);
  if (evm) {
    for (char& c : out) c = static_cast<char>(c >= 'A' && c <= 'F' ? c - 'A' + 'a' : c);
  }
  return out;
}

}  // namespace idemledger::internal
