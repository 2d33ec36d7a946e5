#include "idemledger/event_type.hpp"

#include <array>
#include <utility>

namespace idemledger {
namespace {
constexpr std::array<std::pair<EventType, std::string_view>, 5> kNames = {{
    {EventType::kDeposit, "deposit"},
    {EventType::kAirdrop, "airdrop"},
    {EventType::kWithdrawal, "withdrawal"},
    {EventType::kWithdrawalFee, "withdrawal_fee"},
    {EventType::kReorgCompensation, "reorg_compensation"},
}};
}  // namespace

std::string_view to_string(EventType t) {
  for (const auto& [type, name] : kNames) {
    if (type == t) return name;
  }
  return "unknown";
}

std::optional<EventType> parse_event_type(std::string_view text) {
  for (const auto& [type, name] : kNames) {
    if (name == text) return type;
  }
  return std::nullopt;
}

}  // namespace idemledger
