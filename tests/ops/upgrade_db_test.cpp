// The upgrade from the one-balance model (schema version 9) to accounts per
// asset: a populated v1 schema keeps every balance, its history reconciles,
// and the events it applied answer as before.
#include "gmock/gmock.h"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/idempotency_key.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ops/partitioning.hpp"
#include "idemledger/ops/reconcile.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

class Upgrade : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    v1_name_ = schema_name_ + "_v1";
    v1_ = *Schema::create(v1_name_);
    ASSERT_TRUE(migrate(*conn_, {.schema = v1_, .target_version = 9}).ok());
    if (partitioned_schemas()) {
      ASSERT_TRUE(enable_monthly_partitioning(*conn_, {.schema = v1_}).ok());
    }
    // What a v1 deployment holds: balances on users, single-entry history.
    v1_exec(
        "INSERT INTO {schema}.users (id, balance, initial_balance) VALUES "
        "(1, 100, 100), (2, 0, 0), (3, 5.5, 5.5)");
    v1_exec("INSERT INTO {schema}.deposit_addresses (address, user_id) VALUES ('addr_1', 1)");
    v1_apply("d_1", "deposit", 1, "50", "applied");
    v1_apply("d_2", "deposit", 2, "20.000000000000000001", "applied");
    v1_apply("w_1", "withdrawal", 1, "30", "applied");
    v1_apply("f_1", "withdrawal_fee", 1, "1", "applied");
    v1_apply("w_2", "withdrawal", 2, "1000", "insufficient_funds");
    // Recorded by intake, not yet applied when the upgrade runs.
    v1_exec(
        "SELECT {schema}.record_event('p_1', 'deposit', 7, 'addr_1', NULL, 'trace', '{}', NULL)");
  }
  void TearDown() override {
    (void)conn_->execute("DROP SCHEMA IF EXISTS " + v1_name_ + " CASCADE");
    LedgerTest::TearDown();
  }
  void v1_exec(const std::string& sql) {
    absl::StatusOr<Result> r = conn_->execute(v1_.qualify(sql));
    ASSERT_TRUE(r.ok()) << sql << ": " << r.status();
  }
  std::string v1_scalar(const std::string& sql) {
    absl::StatusOr<Result> r = conn_->execute(v1_.qualify(sql));
    EXPECT_TRUE(r.ok()) << sql << ": " << r.status();
    return r.ok() && !r->rows.empty() ? r->at(0, 0).value_or("NULL") : "?";
  }
  // v1's own apply_event, as a v1 library called it.
  void v1_apply(const std::string& id, const std::string& type, std::int64_t user,
                const std::string& amount, const std::string& expected) {
    const Amount a = *Amount::parse(amount);
    absl::StatusOr<Result> r = conn_->execute(
        v1_.qualify("SELECT {schema}.apply_event($1, $2, $3::bigint, $4::numeric, $5, $6, false)"),
        Params(id, type, user, a, idempotency_key(id, type), payload_fingerprint(user, a, type)));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->at(0, 0).value_or(""), expected) << id;
  }
  std::string v1_name_;
  Schema v1_ = kDefaultSchema;
};

TEST_F(Upgrade, EveryBalanceMovesToTheDefaultAssetAndReconciles) {
  const absl::Status migrated = migrate(*conn_, {.schema = v1_, .default_asset = "ETH"});
  ASSERT_TRUE(migrated.ok()) << migrated;
  EXPECT_EQ(*current_schema_version(*conn_, v1_), latest_schema_version());
  EXPECT_EQ(
      v1_scalar("SELECT string_agg(user_id || ' ' || asset || ' ' || trim_scale(balance) || ' "
                "' || trim_scale(initial_balance), ', ' ORDER BY user_id) FROM "
                "{schema}.accounts"),
      "1 ETH 119 100, 2 ETH 20.000000000000000001 0, 3 ETH 5.5 5.5");
  EXPECT_EQ(v1_scalar("SELECT count(*) FROM information_schema.columns WHERE table_schema = '" +
                      v1_name_ + "' AND table_name = 'users' AND column_name = 'balance'"),
            "0")
      << "one place for a balance";
  absl::StatusOr<Asset> eth = find_asset(*conn_, v1_, "ETH");
  ASSERT_TRUE(eth.ok()) << eth.status();
  EXPECT_TRUE(eth->is_default);
  EXPECT_EQ(eth->decimals, 18);

  // The history reconciles: per account, and per asset (the opening entries
  // stand for the system side v1 never wrote).
  absl::StatusOr<ReconcileReport> report =
      Reconciler({.schema = v1_, .alerts = &alerts_}).full(*conn_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->clean()) << report->mismatches.size() << " mismatches, "
                               << report->imbalances.size() << " imbalances";
  EXPECT_EQ(report->accounts_checked, 3);
  EXPECT_EQ(v1_scalar("SELECT string_agg(account || ' ' || trim_scale(amount), ', ' ORDER BY "
                      "account) FROM {schema}.system_entries"),
            "external -40.000000000000000001, fees 1");

  // What v1 applied answers as before, by the single-balance API and by asset.
  const Ledger ledger({.schema = v1_, .alerts = &alerts_});
  EXPECT_EQ(*ledger.process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "50")),
            Outcome::kAlreadyApplied);
  PaymentEvent in_eth = event("d_1", EventType::kDeposit, 1, "50");
  in_eth.asset = AssetCode("ETH");
  EXPECT_EQ(*ledger.process_deposit(*conn_, in_eth), Outcome::kAlreadyApplied);
  EXPECT_EQ(*ledger.process_withdrawal(*conn_, event("w_2", EventType::kWithdrawal, 2, "1000")),
            Outcome::kInsufficientFunds);
  EXPECT_EQ(
      ledger.process_deposit(*conn_, event("d_1", EventType::kDeposit, 1, "51")).status().code(),
      absl::StatusCode::kAlreadyExists);
  // The event queued before the upgrade applies after it, in the default asset.
  EXPECT_EQ(*ledger.process_deposit(*conn_, event("p_1", EventType::kDeposit, 1, "7")),
            Outcome::kApplied);
  EXPECT_EQ(ledger.balance(*conn_, 1)->to_string(), "126");
  // And the new model is there: another asset, a hold.
  ASSERT_TRUE(add_asset(*conn_, v1_, {.code = "USDC", .decimals = 6}).ok());
  PaymentEvent usdc = event("d_9", EventType::kDeposit, 1, "5");
  usdc.asset = AssetCode("USDC");
  EXPECT_EQ(*ledger.process_deposit(*conn_, usdc), Outcome::kApplied);
  absl::StatusOr<HoldResult> h =
      ledger.hold(*conn_, {.event_id = "h_1", .user_id = 1, .amount = *Amount::parse("26")});
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->outcome, HoldOutcome::kApplied);
  EXPECT_EQ(ledger.account(*conn_, 1)->available().to_string(), "100");
  report = Reconciler({.schema = v1_, .alerts = &alerts_}).full(*conn_);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->clean());
  EXPECT_THAT(alerts_.keys(), ::testing::ElementsAre("conflicting_replay:d_1"))
      << "the conflict above, and no reconciliation alert";
}

TEST_F(Upgrade, ADefaultAssetTooCoarseForTheHistoryIsRefusedAndNothingChanges) {
  const absl::Status s =
      migrate(*conn_, {.schema = v1_, .default_asset = "USDC", .default_asset_decimals = 6});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("existing balances carry 18 decimal places"));
  EXPECT_EQ(*current_schema_version(*conn_, v1_), 9);
  EXPECT_EQ(v1_scalar("SELECT trim_scale(balance)::text FROM {schema}.users WHERE id = 2"),
            "20.000000000000000001");
  EXPECT_EQ(v1_scalar("SELECT to_regclass('{schema}.accounts') IS NULL"), "t");
}

}  // namespace
}  // namespace idemledger::testing
