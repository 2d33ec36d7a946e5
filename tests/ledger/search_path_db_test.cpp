// A caller's search_path decides nothing inside the library: no schema on it
// can put its own function in place of a built-in in a ledger call's
// statements, the functions they call, what migrate() creates (migration 22,
// and the search_path every call and migration sets for itself), or any
// other statement the library sends on the caller's session (pinned the same
// way, or naming pg_catalog's objects itself), even where the caller lists
// that schema before pg_catalog.
//
// The trap is a schema of the test's own ("<schema>_evil"), standing for one
// another role can create objects in (public, on a database created before
// PostgreSQL 15 or upgraded from one). Its functions record each call in
// <evil>.hits; every test first shows the trap is live for the host's own SQL.
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "idemledger/core/connection.hpp"
#include "idemledger/core/params.hpp"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/hold.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ops/cleanup.hpp"
#include "idemledger/ops/monitor.hpp"
#include "idemledger/ops/reconcile.hpp"
#include "idemledger/ops/report.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "idemledger/queue/dlq.hpp"
#include "idemledger/queue/intake.hpp"
#include "idemledger/relay/report.hpp"
#include "src/relay/internal/store.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

class SearchPath : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    evil_ = schema_name_ + "_evil";
    exec("DROP SCHEMA IF EXISTS " + evil_ + " CASCADE");
    exec("CREATE SCHEMA " + evil_);
    exec("CREATE TABLE " + evil_ + ".hits (what text NOT NULL)");
    // With pg_catalog searched first, as it is unless listed: its own
    // jsonb_build_object takes VARIADIC "any", and one whose argument types
    // match a notice's exactly wins the overload.
    trap_function(
        "jsonb_build_object(text, text, text, text, text, bigint, text, text, text, text)", "jsonb",
        "'{\"forged\": true}'::jsonb");
    // Likewise operators pg_catalog has only for other types (numeric *
    // numeric, float8 * interval, numeric <> numeric): a limit, a TTL or a
    // lease of nothing, and an asset that never fails to sum to zero.
    trap_function("times(numeric, integer)", "numeric", "$1 OPERATOR(pg_catalog.*) $2");
    trap_operator("*", "numeric", "integer", "times");
    trap_function("times_interval(bigint, interval)", "interval", "interval '0'");
    trap_operator("*", "bigint", "interval", "times_interval");
    trap_function("differs(numeric, integer)", "boolean", "false");
    trap_operator("<>", "numeric", "integer", "differs");
    // Listed before pg_catalog: a function of the same signature shadows it.
    trap_function("now()", "timestamptz", "pg_catalog.now()");
    ledger_ = std::make_unique<Ledger>(options({.write_notifications = true}));
    open_account(1, "100");
  }
  void TearDown() override {
    exec("DROP SCHEMA IF EXISTS " + evil_ + " CASCADE");
    LedgerTest::TearDown();
  }

  // A function of the trap's schema that records its call, then answers
  // `answer` (SQL).
  void trap_function(std::string_view signature, std::string_view returns,
                     std::string_view answer) {
    exec(
        fmt::format("CREATE FUNCTION {0}.{1} RETURNS {2} LANGUAGE sql AS $$ INSERT INTO "
                    "{0}.hits VALUES ('{1}') RETURNING {3} $$",
                    evil_, signature, returns, answer));
  }
  // An operator of the trap's schema, calling its `function`.
  void trap_operator(std::string_view op, std::string_view left, std::string_view right,
                     std::string_view function) {
    exec(fmt::format("CREATE OPERATOR {0}.{1} (LEFTARG = {2}, RIGHTARG = {3}, FUNCTION = {0}.{4})",
                     evil_, op, left, right, function));
  }
  long hits() { return count("SELECT count(*) FROM " + evil_ + ".hits"); }

  // The trap is live: the host's own notice-shaped call, numeric * integer
  // and now() hit it under `host`'s search_path (now() only when
  // `path_lists_evil_first`).
  void expect_the_trap_is_live(Connection& host, bool path_lists_evil_first) {
    const long before = hits();
    ASSERT_TRUE(host.execute("SELECT jsonb_build_object('event_id', 'x'::text, 'event_type', "
                             "'deposit'::text, 'user_id', 1::bigint, 'asset', 'A'::text, "
                             "'amount', '1'::text)")
                    .ok());
    ASSERT_TRUE(host.execute("SELECT 1.5 * 2").ok());
    ASSERT_TRUE(host.execute("SELECT now()").ok());
    ASSERT_EQ(hits(), before + (path_lists_evil_first ? 3 : 2));
  }

  // Every kind of call (each route of each operation) on `host`, each
  // answer checked. The balance moves 5 - 3 - 2 (posted) + 1 + 1 = +2; the
  // voided hold moves nothing.
  void call_every_kind(Connection& host, const std::string& tag) {
    SCOPED_TRACE(tag);
    // The one-statement credit, then the function (a withdrawal).
    EXPECT_EQ(*ledger_->process_deposit(host, event("d_" + tag, EventType::kDeposit, 1, "5")),
              Outcome::kApplied);
    EXPECT_EQ(*ledger_->process_withdrawal(host, event("w_" + tag, EventType::kWithdrawal, 1, "3")),
              Outcome::kApplied);
    // A hold, posted; another held and voided in one batch with a deposit.
    absl::StatusOr<HoldResult> held = ledger_->hold(
        host, {.event_id = "h_" + tag, .user_id = 1, .amount = *Amount::parse("2"), .fee = {}});
    ASSERT_TRUE(held.ok()) << held.status();
    EXPECT_EQ(held->outcome, HoldOutcome::kApplied);
    absl::StatusOr<HoldResult> posted = ledger_->post(host, {.hold_id = "h_" + tag});
    ASSERT_TRUE(posted.ok()) << posted.status();
    EXPECT_EQ(posted->state, HoldState::kPosted);
    const std::vector<LedgerStep> steps = {
        event("b_" + tag, EventType::kDeposit, 1, "1"),
        HoldRequest{.event_id = "v_" + tag, .user_id = 1, .amount = *Amount::parse("1")},
        VoidRequest{.hold_id = "v_" + tag}};
    absl::StatusOr<std::vector<absl::StatusOr<StepResult>>> batch =
        ledger_->process_steps(host, steps);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_EQ(batch->size(), 3u);
    for (const absl::StatusOr<StepResult>& r : *batch) ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(std::get<Outcome>(*(*batch)[0]), Outcome::kApplied);
    EXPECT_EQ(std::get<HoldResult>(*(*batch)[2]).state, HoldState::kVoided);
    // A host calling the function itself, under its own search_path.
    absl::StatusOr<Result> direct =
        host.execute(schema_.qualify("SELECT {schema}.apply_event($1, 'deposit', 1, NULL, 1, $2, "
                                     "$3, true)"),
                     Params("f_" + tag, "k_" + tag, "p_" + tag));
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_EQ(direct->row(0).get<std::string>(0).value_or(""), "applied");
  }

  // A new session as `host`, its search_path the trap's schema and then
  // `then` ("public": pg_catalog still searched first; "pg_catalog": the
  // trap before it), the trap shown live on it.
  void connect_behind_the_trap(std::string_view then, std::unique_ptr<pg::Connection>& host) {
    host = connect();
    ASSERT_TRUE(host->execute(fmt::format("SET search_path = {}, {}", evil_, then)).ok());
    ASSERT_NO_FATAL_FAILURE(expect_the_trap_is_live(*host, then == "pg_catalog"));
  }

  // Every call of `call_every_kind`, once on its own and once joining a
  // host's transaction, behind the trap (connect_behind_the_trap), hit
  // nothing; the notices are the ledger's own; the balance and the ledger
  // agree.
  void expect_no_call_hits_the_trap(std::string_view then) {
    std::unique_ptr<pg::Connection> host;
    ASSERT_NO_FATAL_FAILURE(connect_behind_the_trap(then, host));
    const long before = hits();
    call_every_kind(*host, "own");
    ASSERT_TRUE(host->execute("BEGIN").ok());
    call_every_kind(*host, "joined");
    // The host's search_path is its own again, and so is what its names mean.
    EXPECT_EQ(*host->execute("SHOW search_path")->row(0).get<std::string>(0),
              fmt::format("{}, {}", evil_, then));
    ASSERT_TRUE(host->execute("COMMIT").ok());
    EXPECT_EQ(hits(), before) << "a call ran the trap's code";
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE payload ? 'forged'"), 0);
    EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox WHERE payload ? 'event_id'"),
              count("SELECT count(*) FROM {schema}.outbox"));
    EXPECT_EQ(balance(1), "104");  // 100 + 2 x 2
    expect_reconciled();
  }

  void expect_the_operations_run_nothing(std::string_view then);

  std::string evil_;
};

TEST_F(SearchPath, AWritableSchemaOnTheCallersPathRunsNothingInACall) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  expect_no_call_hits_the_trap("public");
}

TEST_F(SearchPath, ASchemaListedBeforePgCatalogShadowsNothingInACall) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  expect_no_call_hits_the_trap("pg_catalog");
}

// A transaction the library opens for itself (a worker's claim and apply, a
// replay, reconciliation, a migration) sets its idle limit in its BEGIN's
// round trip, under the caller's search_path: that statement runs nothing of
// a schema on it.
TEST_F(SearchPath, ATransactionsIdleLimitRunsNothingOfTheCallers) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  std::unique_ptr<pg::Connection> host;
  ASSERT_NO_FATAL_FAILURE(connect_behind_the_trap("public", host));
  const long before = hits();
  absl::StatusOr<Transaction> tx = Transaction::begin(*host, kBoundedTransaction);
  ASSERT_TRUE(tx.ok()) << tx.status();
  EXPECT_EQ(*host->execute("SHOW idle_in_transaction_session_timeout")->row(0).get<std::string>(0),
            "30s");
  ASSERT_TRUE(tx->commit().ok());
  EXPECT_EQ(hits(), before);
}

// The operations a host or a service runs on its own session run nothing of
// a schema on its search_path, under `then` (see connect_behind_the_trap),
// and mean what they say: a TTL, a window and a lease keep their length, and
// an asset that does not sum to zero is found. Each kind of statement is
// here: idempotency cleanup, reconciliation (its run recorded), the health
// check and the reports, the relay's claim and its delivery, the ledger's
// and the schema's reads, the dead-letter list, intake's group commit and a
// worker's claim-and-apply.
void SearchPath::expect_the_operations_run_nothing(std::string_view then) {
  // Two deposits (idempotency records): one an hour older than the TTL.
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_old", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d_new", EventType::kDeposit, 1, "1")),
            Outcome::kApplied);
  exec(
      "UPDATE {schema}.processed_events SET created_at = now() - interval '2 hours' "
      "WHERE idempotency_key = (SELECT idempotency_key FROM {schema}.processed_events "
      "ORDER BY created_at LIMIT 1)");
  // One leg without its twin: the asset no longer sums to zero.
  exec(
      "INSERT INTO {schema}.system_entries (asset, account, amount, event_type, source_event_id) "
      "SELECT code, 'external', 1, 'deposit', 'planted' FROM {schema}.assets WHERE is_default");
  exec("INSERT INTO {schema}.deposit_addresses (address, user_id) VALUES ('0xaaa', 1)");

  std::unique_ptr<pg::Connection> host;
  ASSERT_NO_FATAL_FAILURE(connect_behind_the_trap(then, host));
  if (then == "pg_catalog") {
    // Listed first, even a type (`text` in a statement would be this one)
    // and the commonest operator: every `=` of two bigints or two texts.
    exec("CREATE TYPE " + evil_ + ".text AS (forged boolean)");
    trap_function("equals(bigint, bigint)", "boolean", "$1 OPERATOR(pg_catalog.=) $2");
    trap_operator("=", "bigint", "bigint", "equals");
    trap_function("equals(pg_catalog.text, pg_catalog.text)", "boolean",
                  "$1 OPERATOR(pg_catalog.=) $2");
    trap_operator("=", "pg_catalog.text", "pg_catalog.text", "equals");
  }
  const long before = hits();

  absl::StatusOr<CleanupReport> cleaned =
      cleanup_idempotency_records(*host, {.schema = schema_, .ttl = absl::Hours(1)});
  ASSERT_TRUE(cleaned.ok()) << cleaned.status();
  EXPECT_EQ(cleaned->deleted, 1);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 1);

  const Reconciler reconciler({.schema = schema_, .alerts = &alerts_});
  absl::StatusOr<ReconcileReport> hot = reconciler.hot_path(*host, absl::Hours(1));
  ASSERT_TRUE(hot.ok()) << hot.status();
  EXPECT_EQ(hot->users_checked, 1);
  absl::StatusOr<ReconcileReport> full = reconciler.full(*host);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->imbalances.size(), 1u);
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.reconciliation_runs"), 2);

  const MonitorOptions monitor{.schema = schema_, .alerts = &alerts_};
  absl::StatusOr<StatusReport> status = status_report(*host, monitor);  // the health check too
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->open_dead_letters, 0);
  absl::StatusOr<std::vector<StatsRow>> stats = ledger_stats(*host, schema_);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_FALSE(stats->empty());

  const internal::RelayStore store(schema_);
  absl::StatusOr<std::vector<RelayMessage>> claimed =
      store.claim_outbox(*host, "relay_1", absl::Minutes(10), 10);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_EQ(claimed->size(), 2u);  // the deposits' notices
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.outbox "
                  "WHERE claimed_until > now() + interval '9 minutes'"),
            2);
  absl::StatusOr<bool> delivered = store.mark_delivered(*host, claimed->front(), "relay_1");
  ASSERT_TRUE(delivered.ok()) << delivered.status();
  EXPECT_TRUE(*delivered);
  absl::StatusOr<RelayReport> relayed = relay_report(*host, schema_);
  ASSERT_TRUE(relayed.ok()) << relayed.status();
  EXPECT_EQ(relayed->outbox_delivered, 1);

  absl::StatusOr<Account> account = ledger_->account(*host, 1);
  ASSERT_TRUE(account.ok()) << account.status();
  EXPECT_EQ(account->balance.to_string(), "102");
  absl::StatusOr<std::vector<Asset>> assets = list_assets(*host, schema_);
  ASSERT_TRUE(assets.ok()) << assets.status();
  EXPECT_EQ(assets->size(), 1u);
  absl::StatusOr<int> version = current_schema_version(*host, schema_);
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, latest_schema_version());
  absl::StatusOr<std::vector<DeadLetterQueue::Record>> letters =
      DeadLetterQueue({.schema = schema_}).list(*host, 10);
  ASSERT_TRUE(letters.ok()) << letters.status();
  EXPECT_TRUE(letters->empty());

  // A delivery recorded, then claimed and applied by a worker.
  const std::string body =
      R"({"event_id":"w1","event_type":"deposit","amount":"2","to_address":"0xaaa"})";
  const WebhookEvent webhook = *parse_webhook(body);
  const std::vector<WebhookDelivery> deliveries = {
      {.event = &webhook, .trace_id = "t", .raw_body = body}};
  const std::vector<absl::StatusOr<RecordResult>> recorded =
      record_webhook_events(*host, schema_, deliveries);
  ASSERT_EQ(recorded.size(), 1u);
  ASSERT_TRUE(recorded[0].ok()) << recorded[0].status();
  EXPECT_EQ(*recorded[0], RecordResult::kAccepted);
  const Dispatcher worker(*ledger_, {.schema = schema_});
  absl::StatusOr<int> applied = worker.run_once(*host);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 1);
  EXPECT_EQ(balance(1), "104");
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'w1'"),
            "confirmed");

  EXPECT_EQ(hits(), before) << "an operation ran the trap's code";
  EXPECT_EQ(*host->execute("SHOW search_path")->row(0).get<std::string>(0),
            fmt::format("{}, {}", evil_, then));
}

TEST_F(SearchPath, TheOperationsRunNothingOfTheCallers) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  expect_the_operations_run_nothing("public");
}

TEST_F(SearchPath, TheOperationsRunNothingOfASchemaListedBeforePgCatalog) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  expect_the_operations_run_nothing("pg_catalog");
}

// What migrate() creates binds pg_catalog's built-ins (a default's now(), a
// check's functions), not the caller's: nothing in the new schema depends on
// a function of the trap's schema, and the migration ran none.
TEST_F(SearchPath, MigrateBindsOnlyBuiltInsUnderAHostilePath) {
  IDEMLEDGER_NEEDS_OWN_SESSION("a session-level search_path");
  std::unique_ptr<pg::Connection> host;
  ASSERT_NO_FATAL_FAILURE(connect_behind_the_trap("pg_catalog", host));
  // Objects bound to a function of the trap's schema (its own operator is one).
  const std::string bound_to_the_trap =
      "SELECT count(*) FROM pg_depend d JOIN pg_proc p ON p.oid = d.refobjid "
      "WHERE d.refclassid = 'pg_proc'::regclass AND p.pronamespace = '" +
      evil_ + "'::regnamespace";
  const long bound_before = count(bound_to_the_trap);
  const long before = hits();
  const std::string fresh_name = schema_name_ + "_m";
  const Schema fresh = *Schema::create(fresh_name);
  exec("DROP SCHEMA IF EXISTS " + fresh_name + " CASCADE");
  const absl::Status migrated = migrate(*host, fresh);
  ASSERT_TRUE(migrated.ok()) << migrated;
  EXPECT_EQ(hits(), before);
  EXPECT_EQ(count(bound_to_the_trap), bound_before);
  exec("DROP SCHEMA " + fresh_name + " CASCADE");
}

// Every function of the schema pins its search_path (migration 22) but the
// helpers that run only beneath pinned functions: a function a later
// migration creates without the clause, and not added to the helpers there,
// fails here.
TEST_F(SearchPath, EveryFunctionOfTheSchemaPinsItOrIsAHelper) {
  const std::string unpinned =
      "FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace AND NOT coalesce("
      "'search_path=pg_catalog, pg_temp' = ANY (proconfig), false)";
  EXPECT_EQ(scalar("SELECT string_agg(proname, ', ' ORDER BY proname) " + unpinned),
            "asset_admitting, check_decimals, check_enabled, create_month_partition, dead_letter, "
            "guard_ledger_key, lock_hold, month_partition, post_entries, release_hold, "
            "settle_event, transition_events, transition_hold");
  EXPECT_EQ(count("SELECT count(*) FROM pg_proc WHERE pronamespace = '{schema}'::regnamespace") -
                count("SELECT count(*) " + unpinned),
            33)
      << "29 pinned by migration 22, and migration 23's four partitioning functions";
}

}  // namespace
}  // namespace idemledger::testing
