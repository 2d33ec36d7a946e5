#include "idemledger/core/event_status.hpp"

#include <set>
#include <utility>

#include "gtest/gtest.h"
#include "idemledger/core/event_type.hpp"

namespace idemledger {
namespace {

using S = EventStatus;

// All 25 (from, to) pairs against the seed's VALID_TRANSITIONS, written out
// independently of kValidTransitions.
TEST(EventStatus, AllTwentyFivePairsMatchTheSeed) {
  const std::set<std::pair<S, S>> allowed = {
      {S::kPending, S::kEnqueued},     {S::kPending, S::kFailed},    {S::kEnqueued, S::kProcessing},
      {S::kEnqueued, S::kFailed},      {S::kEnqueued, S::kPending},  {S::kEnqueued, S::kConfirmed},
      {S::kProcessing, S::kConfirmed}, {S::kProcessing, S::kFailed},
  };
  int checked = 0;
  for (S from : kAllEventStatuses) {
    for (S to : kAllEventStatuses) {
      EXPECT_EQ(is_valid_transition(from, to), allowed.contains({from, to}))
          << to_string(from) << " -> " << to_string(to);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 25);
}

TEST(EventStatus, TerminalStatesHaveNoExits) {
  for (S to : kAllEventStatuses) {
    EXPECT_FALSE(is_valid_transition(S::kConfirmed, to));
    EXPECT_FALSE(is_valid_transition(S::kFailed, to));
  }
  EXPECT_TRUE(is_terminal(S::kConfirmed));
  EXPECT_TRUE(is_terminal(S::kFailed));
  EXPECT_FALSE(is_terminal(S::kEnqueued));
}

TEST(EventStatus, NamesRoundTrip) {
  for (S s : kAllEventStatuses) EXPECT_EQ(parse_event_status(to_string(s)), s);
  EXPECT_EQ(parse_event_status("Confirmed"), std::nullopt);
  EXPECT_EQ(to_string(S::kProcessing), "processing");
}

TEST(EventType, NamesRoundTripAndUnknownIsRefused) {
  for (EventType t : {EventType::kDeposit, EventType::kAirdrop, EventType::kWithdrawal,
                      EventType::kWithdrawalFee, EventType::kReorgCompensation}) {
    EXPECT_EQ(parse_event_type(to_string(t)), t);
  }
  EXPECT_EQ(parse_event_type("refund"), std::nullopt);
  EXPECT_TRUE(is_credit(EventType::kAirdrop));
  EXPECT_FALSE(is_credit(EventType::kWithdrawalFee));
}

}  // namespace
}  // namespace idemledger
