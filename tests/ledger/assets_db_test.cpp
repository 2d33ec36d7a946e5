// Assets: the registry, decimals per asset, accounts per (user, asset), and
// the double-entry postings every applied event writes.
#include "gmock/gmock.h"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class Assets : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    ASSERT_TRUE(add_asset(*conn_, schema_,
                          {.code = "USDC",
                           .decimals = 6,
                           .chain = "ethereum",
                           .contract = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"})
                    .ok());
    ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "WBTC", .decimals = 8}).ok());
    ASSERT_TRUE(add_asset(*conn_, schema_, {.code = "SAT", .decimals = 0}).ok());
  }
  PaymentEvent in(PaymentEvent e, AssetCode asset) {
    e.asset = asset;
    return e;
  }
  std::string balance_in(std::int64_t user, AssetCode asset) {
    absl::StatusOr<Account> a = ledger_->account(*conn_, user, asset);
    return a.ok() ? a->balance.to_string()
                  : std::string(absl::StatusCodeToString(a.status().code()));
  }
  // Σ of every leg (user and system) of `asset`: zero when each posting balances.
  std::string legs_sum(std::string_view asset) {
    const std::string a(asset);
    return scalar(
        "SELECT trim_scale(coalesce((SELECT sum(amount) FROM {schema}.balance_events WHERE asset = "
        "'" +
        a + "'), 0) + coalesce((SELECT sum(amount) FROM {schema}.system_entries WHERE asset = '" +
        a + "'), 0))::text");
  }
};

TEST_F(Assets, TheRegistryIsIdempotentAndNamesWhatDiffers) {
  EXPECT_TRUE(add_asset(*conn_, schema_, {.code = "WBTC", .decimals = 8}).ok()) << "same again";
  absl::Status s = add_asset(*conn_, schema_, {.code = "WBTC", .decimals = 6});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), HasSubstr("registered with 8 decimals"));
  // The contract is one token whatever its letter case; another code for it is refused.
  s = add_asset(*conn_, schema_,
                {.code = "USDC.E",
                 .decimals = 6,
                 .chain = "ethereum",
                 .contract = "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48"});
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), HasSubstr("registered under another code"));
  EXPECT_EQ(add_asset(*conn_, schema_, {.code = "X", .decimals = 19}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(add_asset(*conn_, schema_, {.code = "Y", .contract = "0x12"}).code(),
            absl::StatusCode::kInvalidArgument)
      << "a contract needs its chain";
  EXPECT_EQ(
      add_asset(*conn_, schema_, {.code = "Z", .chain = "eth", .contract = "0x12; --"}).code(),
      absl::StatusCode::kInvalidArgument)
      << "a contract is letters and digits";
  EXPECT_EQ(add_asset(*conn_, schema_, {.code = "Z", .chain = "Eth"}).code(),
            absl::StatusCode::kInvalidArgument)
      << "a chain is lowercase";
  EXPECT_FALSE(AssetCode::create("usdc").ok());
  EXPECT_FALSE(AssetCode::create("").ok());
  EXPECT_FALSE(AssetCode::create("ABCDEFGHIJKLMNOPQ").ok());

  absl::StatusOr<std::vector<Asset>> all = list_assets(*conn_, schema_);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].code.code(), "DEFAULT");
  EXPECT_TRUE((*all)[0].is_default);
  absl::StatusOr<Asset> usdc = find_asset(*conn_, schema_, "USDC");
  ASSERT_TRUE(usdc.ok());
  EXPECT_EQ(usdc->contract, "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48") << "stored lowercase";
  EXPECT_EQ(usdc->from_base_units("1500000")->to_string(), "1.5");
  EXPECT_EQ(find_asset(*conn_, schema_, "DOGE").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(Assets, AnAmountMayCarryAtMostItsAssetsDecimals) {
  open_account(1, "0");
  absl::StatusOr<Outcome> r = ledger_->process_deposit(
      *conn_, in(event("d_1", EventType::kDeposit, 1, "1.0000001"), "USDC"));
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("amount 1.0000001 has 7 decimal places; USDC allows 6"));
  r = ledger_->process_deposit(*conn_, in(event("d_2", EventType::kDeposit, 1, "1.5"), "SAT"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.payment_events"), 0) << "nothing half-written";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.balance_events"), 0);

  EXPECT_EQ(*ledger_->process_deposit(*conn_,
                                      in(event("d_3", EventType::kDeposit, 1, "1.000001"), "USDC")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_deposit(
                *conn_, in(event("d_4", EventType::kDeposit, 1, "0.00000001"), "WBTC")),
            Outcome::kApplied);
  EXPECT_EQ(*ledger_->process_deposit(*conn_,
                                      event("d_5", EventType::kDeposit, 1, "0.000000000000000001")),
            Outcome::kApplied)
      << "the default asset keeps 18";
  const HoldRequest h{.event_id = "w_1",
                      .user_id = 1,
                      .asset = AssetCode("USDC"),
                      .amount = *Amount::parse("1"),
                      .fee = *Amount::parse("0.0000001")};
  absl::StatusOr<HoldResult> held = ledger_->hold(*conn_, h);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(held.status().message()), HasSubstr("fee 0.0000001"));

  absl::StatusOr<Asset> usdc = find_asset(*conn_, schema_, "USDC");
  EXPECT_TRUE(usdc->admits(*Amount::parse("0.000001")).ok());
  EXPECT_EQ(usdc->admits(*Amount::parse("0.0000001")).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(Assets, EachAssetIsItsOwnAccount_AUsdcDepositNeverLandsInEth) {
  open_account(1, "10");  // the default asset, as a v1 host would
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_u", EventType::kDeposit, 1, "250"), "USDC")),
      Outcome::kApplied);
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_w", EventType::kDeposit, 1, "0.5"), "WBTC")),
      Outcome::kApplied);
  EXPECT_EQ(balance(1), "10") << "the single-balance API reads the default asset";
  EXPECT_EQ(balance_in(1, "USDC"), "250");
  EXPECT_EQ(balance_in(1, "WBTC"), "0.5");

  // Spending is per asset: 20 USDC exist, 20 DEFAULT do not.
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_, event("w_d", EventType::kWithdrawal, 1, "20")),
            Outcome::kInsufficientFunds);
  EXPECT_EQ(*ledger_->process_withdrawal(*conn_,
                                         in(event("w_u", EventType::kWithdrawal, 1, "20"), "USDC")),
            Outcome::kApplied);
  EXPECT_EQ(balance_in(1, "USDC"), "230");
  EXPECT_EQ(balance(1), "10");

  // A replay in another asset is a conflict, not a duplicate.
  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, in(event("d_u", EventType::kDeposit, 1, "250"), "WBTC"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_u", EventType::kDeposit, 1, "250"), "USDC")),
      Outcome::kAlreadyApplied);
  EXPECT_EQ(ledger_->account(*conn_, 2, AssetCode("USDC")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ledger_
                ->process_deposit(*conn_, in(event("d_x", EventType::kDeposit, 1, "1"),
                                             *AssetCode::create("DOGE")))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  expect_reconciled();
}

TEST_F(Assets, EveryPostingSumsToZeroPerAsset_NoRowWrittenByEveryEvent) {
  open_account(1, "0");
  open_account(2, "0");
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_1", EventType::kDeposit, 1, "100"), "USDC")),
      Outcome::kApplied);
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_2", EventType::kAirdrop, 2, "7"), "USDC")),
      Outcome::kApplied);
  ASSERT_EQ(*ledger_->process_withdrawal(*conn_,
                                         in(event("w_1", EventType::kWithdrawal, 1, "30"), "USDC")),
            Outcome::kApplied);
  ASSERT_EQ(*ledger_->process_withdrawal(
                *conn_, in(event("f_1", EventType::kWithdrawalFee, 1, "1"), "USDC")),
            Outcome::kApplied);
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_3", EventType::kDeposit, 1, "2"), "WBTC")),
      Outcome::kApplied);

  EXPECT_EQ(legs_sum("USDC"), "0");
  EXPECT_EQ(legs_sum("WBTC"), "0");
  // The system side: the chain (external) owes what users hold; fees earned.
  EXPECT_EQ(scalar("SELECT trim_scale(sum(amount))::text FROM {schema}.system_entries WHERE "
                   "asset = 'USDC' AND account = 'external'"),
            "-77");
  EXPECT_EQ(scalar("SELECT trim_scale(sum(amount))::text FROM {schema}.system_entries WHERE "
                   "asset = 'USDC' AND account = 'fees'"),
            "1");
  // One system leg per event, each its own row: nothing every event updates.
  EXPECT_EQ(
      count("SELECT count(*) FROM {schema}.system_entries WHERE event_type <> 'opening_balance'"),
      5);
  EXPECT_EQ(count("SELECT count(DISTINCT source_event_id) FROM {schema}.system_entries"), 5);
  expect_reconciled();
}

TEST_F(Assets, ADisabledAssetTakesNoNewMoneyButWhatIsHeldStillSettles) {
  open_account(1, "0");
  ASSERT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_1", EventType::kDeposit, 1, "100"), "USDC")),
      Outcome::kApplied);
  ASSERT_EQ(ledger_
                ->hold(*conn_, {.event_id = "h_1",
                                .user_id = 1,
                                .asset = AssetCode("USDC"),
                                .amount = *Amount::parse("40")})
                ->outcome,
            HoldOutcome::kApplied);
  ASSERT_TRUE(set_asset_enabled(*conn_, schema_, "USDC", false, "issuer paused", "test").ok());

  absl::StatusOr<Outcome> r =
      ledger_->process_deposit(*conn_, in(event("d_2", EventType::kDeposit, 1, "5"), "USDC"));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("asset USDC is disabled"));
  EXPECT_EQ(ledger_
                ->hold(*conn_, {.event_id = "h_2",
                                .user_id = 1,
                                .asset = AssetCode("USDC"),
                                .amount = *Amount::parse("1")})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      *ledger_->process_deposit(*conn_, in(event("d_1", EventType::kDeposit, 1, "100"), "USDC")),
      Outcome::kAlreadyApplied)
      << "a replay still answers";
  absl::StatusOr<HoldResult> posted = ledger_->post(*conn_, {.hold_id = "h_1"});
  ASSERT_TRUE(posted.ok()) << posted.status();
  EXPECT_EQ(posted->outcome, HoldOutcome::kApplied) << "funds already promised are never trapped";
  EXPECT_EQ(balance_in(1, "USDC"), "60");
  EXPECT_EQ(set_asset_enabled(*conn_, schema_, "DOGE", true, "r", "test").code(),
            absl::StatusCode::kNotFound);
  expect_reconciled();
}

TEST_F(Assets, OpeningAnAccountIsIdempotent) {
  EXPECT_TRUE(ledger_->open_account(*conn_, 5, *Amount::parse("3"), AssetCode("WBTC")).ok());
  EXPECT_TRUE(ledger_->open_account(*conn_, 5, *Amount::parse("3"), AssetCode("WBTC")).ok());
  const absl::Status s = ledger_->open_account(*conn_, 5, *Amount::parse("4"), AssetCode("WBTC"));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), HasSubstr("exists with initial balance 3, not 4"));
  EXPECT_EQ(
      ledger_->open_account(*conn_, 5, *Amount::parse("1.123456789"), AssetCode("WBTC")).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(balance_in(5, "WBTC"), "3");
  EXPECT_EQ(balance_in(5, "USDC"), "NOT_FOUND");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.accounts WHERE user_id = 5"), 1);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
