// idemledger-admin as an operator runs it: every verb against a seeded schema,
// its exit codes, its audit trail, and --json that parses.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "idemledger/ledger/migrate.hpp"
#include "idemledger/ops/partitioning.hpp"
#include "idemledger/queue/dispatcher.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;

struct CliRun {
  int exit_code;
  std::string out;
};

class AdminCli : public LedgerTest {
 protected:
  // stdout only for --json (alerts go to stderr as JSON lines of their own).
  CliRun admin(const std::string& args, bool with_stderr = true) {
    const std::string cmd = std::string(IDEMLEDGER_ADMIN_BINARY) + " --dsn '" + test_dsn() +
                            "' --schema " + schema_name_ + " " + args +
                            (with_stderr ? " 2>&1" : " 2>/dev/null");
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    const int status = pclose(p);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
  }
  void SetUp() override {
    LedgerTest::SetUp();
    open_account(1, "10");
    ASSERT_EQ(*ledger_->process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "5")),
              Outcome::kApplied);
    exec(
        "INSERT INTO {schema}.dead_letter_queue (event_id, event_type, user_id, amount, error, "
        "reason, asset) "
        "VALUES ('x1', 'withdrawal', 1, 3, 'lock not available [SQLSTATE 55P03]', "
        "'retries_exhausted', 'DEFAULT')");
  }
};

TEST_F(AdminCli, MigrateStatusStats) {
  CliRun r = admin("migrate");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("at version " + std::to_string(latest_schema_version())));
  r = admin("status");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("confirmed"));
  EXPECT_THAT(r.out, HasSubstr("open dead letters: 1"));
  EXPECT_THAT(r.out, HasSubstr("health: ok"));
  r = admin("stats --json", false);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(nlohmann::json::parse(r.out, nullptr, false).is_discarded()) << r.out;
  exec(
      "UPDATE {schema}.payment_events SET status = 'processing', updated_at = now() - interval '1 "
      "hour'");
  r = admin("status");
  EXPECT_EQ(r.exit_code, 1) << "findings exit 1";
  EXPECT_THAT(r.out, HasSubstr("UNHEALTHY"));
}

// A schema partitioned before migration 23 (its system legs left whole): the
// status says what to run, and `partitions enable` run once more finishes it.
TEST_F(AdminCli, StatusWarnsOfUnpartitionedSystemLegsUntilPartitionsEnable) {
  exec("DROP SCHEMA {schema} CASCADE");
  ASSERT_TRUE(migrate(*conn_, {.schema = schema_, .target_version = 22}).ok());
  ASSERT_TRUE(enable_monthly_partitioning(*conn_, {.schema = schema_}).ok());
  ASSERT_EQ(admin("migrate").exit_code, 0);

  CliRun r = admin("status");
  EXPECT_EQ(r.exit_code, 0) << "a warning, not a finding: " << r.out;
  EXPECT_THAT(r.out, HasSubstr("health: ok"));
  EXPECT_THAT(r.out, HasSubstr("system_entries is not partitioned yet: run 'partitions enable'"));
  nlohmann::json j = nlohmann::json::parse(admin("--json status", false).out);
  EXPECT_EQ(j["partitioning_incomplete"], true);

  r = admin("partitions enable");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  // Last month, this month and three ahead, for system_entries alone.
  EXPECT_THAT(r.out, HasSubstr("monthly partitions on; 5 created"));
  r = admin("status");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("not partitioned")));
  EXPECT_EQ(nlohmann::json::parse(admin("--json status", false).out)["partitioning_incomplete"],
            false);
  EXPECT_THAT(admin("partitions enable").out, HasSubstr("monthly partitions on; 0 created"));
}

TEST_F(AdminCli, DeadLettersListShowDiscardWithAudit) {
  const std::string id = scalar("SELECT id FROM {schema}.dead_letter_queue");
  CliRun r = admin("dlq list");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("retries_exhausted"));
  r = admin("dlq show " + id);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("55P03"));
  EXPECT_EQ(admin("dlq discard " + id).exit_code, 2) << "a reason is required";
  r = admin("dlq discard " + id + " --reason 'duplicate of ticket 42'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(scalar("SELECT reason || '|' || action FROM {schema}.operator_actions"),
            "duplicate of ticket 42|dlq_discard");
  EXPECT_THAT(admin("dlq list").out, ::testing::Not(HasSubstr("retries_exhausted")));
  EXPECT_EQ(admin("dlq discard " + id + " --reason again").exit_code, 1) << "already closed";
  EXPECT_EQ(admin("dlq show 999999").exit_code, 1);
  nlohmann::json listed = nlohmann::json::parse(admin("--json dlq list", false).out);
  EXPECT_TRUE(listed.is_array() && listed.empty());
}

TEST_F(AdminCli, RelayStatusAndList) {
  exec(
      "INSERT INTO {schema}.outbox (topic, payload) VALUES ('credited', '{}'), ('credited', '{}'), "
      "('debited', '{}')");
  exec(
      "UPDATE {schema}.outbox SET diverted_at = now() WHERE id IN "
      "(SELECT id FROM {schema}.outbox ORDER BY id LIMIT 2)");
  exec(
      "INSERT INTO {schema}.relay_dead_letters (outbox_id, topic, message, dlq_retries, reason, "
      "resolution, drop_reason, resolved_at) SELECT id, topic, payload, 6, 'HTTP 503', "
      "CASE WHEN id = (SELECT min(id) FROM {schema}.outbox) THEN 'dropped' END, "
      "CASE WHEN id = (SELECT min(id) FROM {schema}.outbox) THEN 'max_retries_exceeded' END, "
      "CASE WHEN id = (SELECT min(id) FROM {schema}.outbox) THEN now() END "
      "FROM {schema}.outbox WHERE diverted_at IS NOT NULL");
  exec(
      "INSERT INTO {schema}.circuit_breakers (name, state, opened_at) "
      "VALUES ('relay:notify_api', 'open', now())");
  CliRun r = admin("relay status");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("marker relay:notify_api: open"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("outbox undelivered +1"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("dead letters open +1"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("dropped: max_retries_exceeded +1"));
  const nlohmann::json listed = nlohmann::json::parse(admin("--json relay list", false).out);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_TRUE(listed[0]["resolution"].is_null()) << "open ones first";
  EXPECT_EQ(listed[1]["drop_reason"], "max_retries_exceeded");
  EXPECT_EQ(listed[1]["dlq_retries"], 6);
}

TEST_F(AdminCli, DeadLetterReplayAppliesExactlyOnce) {
  // x1 has no queued event: replay applies it now, through the Ledger.
  const std::string direct = scalar("SELECT id FROM {schema}.dead_letter_queue");
  EXPECT_EQ(admin("dlq replay " + direct).exit_code, 2) << "a reason is required";
  CliRun r = admin("dlq replay " + direct + " --reason 'lock holder gone'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("event x1 applied now: applied"));
  EXPECT_EQ(balance(1), "12");
  r = admin("dlq replay " + direct + " --reason twice");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("already resolved"));
  EXPECT_EQ(balance(1), "12");

  // A queued event that ended failed: replay puts it back for the workers.
  record_event(event("q1", EventType::kDeposit, 1, "4"), "failed");
  exec(
      "INSERT INTO {schema}.dead_letter_queue (event_id, event_type, user_id, amount, error, "
      "reason, asset) VALUES ('q1', 'deposit', 1, 4, 'user row locked', 'retries_exhausted', "
      "'DEFAULT')");
  const std::string queued =
      scalar("SELECT id FROM {schema}.dead_letter_queue WHERE event_id = 'q1'");
  r = admin("dlq replay " + queued + " --reason 'after the incident'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("event q1 is pending again"));
  const Dispatcher d(*ledger_, {.schema = schema_, .alerts = &alerts_});
  EXPECT_EQ(*d.run_once(*conn_), 1);
  EXPECT_EQ(*d.run_once(*conn_), 0);
  EXPECT_EQ(scalar("SELECT status FROM {schema}.payment_events WHERE event_id = 'q1'"),
            "confirmed");
  EXPECT_EQ(balance(1), "16");
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.operator_actions WHERE action = 'dlq_replay'"), 2);
  EXPECT_EQ(admin("dlq replay 999999 --reason x").exit_code, 1);
  expect_reconciled();
}

TEST_F(AdminCli, ReconcileAndCleanup) {
  CliRun r = admin("reconcile --full");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("1 users checked (1 accounts), 0 out of balance"));
  exec("UPDATE {schema}.accounts SET balance = balance + 1");
  r = admin("reconcile --full");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("user 1 DEFAULT: balance 16, expected 15; held 0, expected 0"));
  nlohmann::json j = nlohmann::json::parse(admin("reconcile --json", false).out);
  EXPECT_EQ(j["clean"], false);
  exec("UPDATE {schema}.processed_events SET created_at = now() - interval '2 days'");
  r = admin("cleanup --ttl-hours 24");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("deleted 1 idempotency records"));
  EXPECT_EQ(admin("frobnicate").exit_code, 2);
}

// The long jobs say how far they are: plain lines into a pipe, a line redrawn
// in place on a terminal, nothing with --quiet; stdout keeps the result.
TEST_F(AdminCli, LongJobsShowProgressUnlessQuiet) {
  exec("INSERT INTO {schema}.users (id) SELECT generate_series(2, 2501)");
  CliRun r = admin("reconcile --full");  // stderr into the pipe: not a terminal
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("reconcile --full: 1,000 of 2,501 users (39%), "));
  EXPECT_THAT(r.out, HasSubstr(" users/s, ETA "));
  EXPECT_THAT(r.out, HasSubstr("reconcile --full: 2,501 users in "));
  EXPECT_THAT(r.out, HasSubstr("2501 users checked"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("\r"))) << "no redrawing into a pipe";

  r = admin("reconcile --full --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("reconcile --full:")));
  EXPECT_THAT(r.out, HasSubstr("2501 users checked"));
  nlohmann::json j = nlohmann::json::parse(admin("reconcile --full --json", false).out);
  EXPECT_EQ(j["users_checked"], 2501) << "progress never reaches stdout";

  // On a terminal (script(1) gives it one): one line, redrawn in place.
  const std::string tty = std::string("script -qec \"") + IDEMLEDGER_ADMIN_BINARY + " --dsn '" +
                          test_dsn() + "' --schema " + schema_name_ +
                          " reconcile --full\" /dev/null";
  FILE* p = popen(tty.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;)
    out.append(buf.data(), n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_THAT(out, HasSubstr("\r\033[Kreconcile --full: 1,000 of 2,501 users (39%)"));
  EXPECT_THAT(out, HasSubstr("\r\033[Kreconcile --full: 2,501 users in "));

  exec(
      "INSERT INTO {schema}.processed_events (idempotency_key, fingerprint, outcome, asset, "
      "created_at) SELECT 'old-' || g, 'f', 'success', 'DEFAULT', now() - interval '2 days' "
      "FROM generate_series(1, 1500) g");
  r = admin("cleanup --ttl-hours 24");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cleanup: 1,000 of 1,500 records (66%), "));
  EXPECT_THAT(r.out, HasSubstr("cleanup: 1,500 records in "));
  EXPECT_THAT(r.out, HasSubstr("deleted 1500 idempotency records"));
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events WHERE idempotency_key LIKE "
                  "'old-%'"),
            0);
}

// Every argument is checked before anything runs: a crafted schema or a
// number that does not parse is a usage error (2), and nothing changes.
TEST_F(AdminCli, BadArgumentsExit2AndChangeNothing) {
  exec("UPDATE {schema}.processed_events SET created_at = now() - interval '2 days'");
  const std::string cmd_prefix =
      std::string(IDEMLEDGER_ADMIN_BINARY) + " --dsn '" + test_dsn() + "' ";
  for (const std::string& args :
       {std::string("--schema 'x; SELECT 1' status"), std::string("--schema Public status"),
        std::string("--schema " + schema_name_ + " cleanup --ttl-hours abc"),
        std::string("--schema " + schema_name_ + " cleanup --ttl-hours 0"),
        std::string("--schema " + schema_name_ + " cleanup --ttl-hours -5"),
        std::string("--schema " + schema_name_ + " reconcile --window-minutes abc"),
        std::string("--schema " + schema_name_ + " dlq list --limit 1e9"),
        std::string("--schema " + schema_name_ + " partitions ensure --months-ahead 1000"),
        std::string("--schema " + schema_name_ + " --frobnicate status"),
        std::string("--schema " + schema_name_ + " dlq show abc"),
        std::string("--schema " + schema_name_ + " assets add usdc --decimals 6"),
        std::string("--schema " + schema_name_ + " assets add USDC --decimals 19"),
        std::string("--schema " + schema_name_ + " assets add USDC"),
        std::string("--schema " + schema_name_ + " assets add USDC --decimals 6 --contract 0xabc"),
        std::string("--schema " + schema_name_ + " assets disable DEFAULT"),
        std::string("--schema " + schema_name_ + " dlq discard 1 --reason " +
                    std::string(1025, 'r'))}) {
    FILE* p = popen((cmd_prefix + args + " 2>&1").c_str(), "r");
    std::string out;
    std::array<char, 4096> buf{};
    while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    const int status = pclose(p);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << args << ": " << out;
  }
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.processed_events"), 1) << "nothing deleted";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.reconciliation_runs"), 0) << "nothing ran";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.assets"), 1) << "nothing registered";
  EXPECT_EQ(count("SELECT count(*) FROM {schema}.operator_actions"), 0);
}

TEST_F(AdminCli, AssetsAddListDisableWithAuditAndLiabilities) {
  CliRun r = admin(
      "assets add USDC --decimals 6 --chain ethereum --contract "
      "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("asset USDC registered (6 decimals)"));
  EXPECT_EQ(admin("assets add USDC --decimals 6 --chain ethereum --contract "
                  "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48")
                .exit_code,
            0)
      << "the same again is fine";
  r = admin("assets add USDC --decimals 8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("registered with 6 decimals"));
  nlohmann::json list = nlohmann::json::parse(admin("assets list --json", false).out);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["asset"], "USDC");
  EXPECT_EQ(list[1]["contract"], "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48");
  EXPECT_EQ(list[1]["enabled"], "yes");

  r = admin("assets disable USDC --reason 'issuer paused' --actor 'ticket 9'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(
      scalar("SELECT action || ' ' || target || ' ' || reason FROM {schema}.operator_actions"),
      "asset_disable USDC issuer paused");
  EXPECT_EQ(scalar("SELECT enabled FROM {schema}.assets WHERE code = 'USDC'"), "f");
  EXPECT_EQ(admin("assets enable DOGE --reason x").exit_code, 1);
  EXPECT_EQ(admin("assets enable USDC --reason back").exit_code, 0);

  // What the ledger owes, per asset: user 1 has 15 DEFAULT of which 4 are held.
  ASSERT_EQ(ledger_->hold(*conn_, {.event_id = "h", .user_id = 1, .amount = *Amount::parse("4")})
                ->outcome,
            HoldOutcome::kApplied);
  r = admin("liabilities");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  nlohmann::json owed = nlohmann::json::parse(admin("liabilities --json", false).out);
  ASSERT_EQ(owed.size(), 2u);
  EXPECT_EQ(owed[0]["asset"], "DEFAULT");
  EXPECT_EQ(owed[0]["owed_to_users"], "15");
  EXPECT_EQ(owed[0]["held"], "4");
  EXPECT_EQ(owed[0]["available"], "11");
  EXPECT_EQ(owed[0]["external"], "-5") << "the one deposit; the initial 10 came from outside";
  EXPECT_EQ(owed[1]["asset"], "USDC");
  EXPECT_EQ(owed[1]["owed_to_users"], "0");
}

TEST_F(AdminCli, ControlCharactersInStoredTextReachTheTerminalEscaped) {
  exec(
      "INSERT INTO {schema}.dead_letter_queue (event_id, event_type, user_id, amount, error, "
      "reason, asset) VALUES (E'evil\\x1b[2J\\nid', 'deposit', 1, 1, 'x', E'fake\\rrow', "
      "'DEFAULT')");
  const CliRun r = admin("dlq list");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "no raw escape reaches the terminal";
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_THAT(r.out, HasSubstr("evil\\x1b[2J\\x0aid"));
}

TEST_F(AdminCli, TheAuditNamesTheDatabaseRoleNotWhatTheEnvironmentClaims) {
  const std::string id = scalar("SELECT id FROM {schema}.dead_letter_queue");
  const std::string cmd = "USER=somebody_else " + std::string(IDEMLEDGER_ADMIN_BINARY) +
                          " --dsn '" + test_dsn() + "' --schema " + schema_name_ + " dlq discard " +
                          id + " --reason 'refunded by hand' --actor 'ticket 4711' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) {
  }
  ASSERT_EQ(pclose(p), 0);
  EXPECT_EQ(scalar("SELECT actor FROM {schema}.operator_actions"),
            scalar("SELECT current_user") + " (ticket 4711)");
}

TEST_F(AdminCli, PartitionsEnableEnsureAndTheLedgerStillHolds) {
  EXPECT_EQ(admin("partitions").exit_code, 2);
  CliRun r = admin("partitions ensure");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("off (enable first); 0 created"));
  r = admin("partitions enable --months-ahead 2");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("monthly partitions on; 12 created"))
      << "last, this and 2 more months, for three tables";
  EXPECT_THAT(admin("partitions ensure --months-ahead 3").out, HasSubstr("on; 3 created"));
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d1", EventType::kDeposit, 1, "5")),
            Outcome::kAlreadyApplied);
  EXPECT_EQ(*ledger_->process_deposit(*conn_, event("d2", EventType::kDeposit, 1, "5")),
            Outcome::kApplied);
  EXPECT_EQ(admin("reconcile --full").exit_code, 0);
  expect_reconciled();
}

}  // namespace
}  // namespace idemledger::testing
