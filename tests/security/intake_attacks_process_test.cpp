// The real webhook_intake, attacked on loopback as someone without the secret
// would: bodies it must not read, headers it must not keep, clients too slow
// or too many, floods that must not spend the provider's budget, and bodies
// that must not learn anything. Each attack is bounded in bytes and time;
// each asserts the answer, the server's memory and the database.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "gmock/gmock.h"
#include "idemledger/queue/intake.hpp"
#include "tests/support/openapi_contract.hpp"
#include "tests/support/raw_client.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

const std::string kSecret(40, 's');

class IntakeAttacks : public LedgerTest {
 protected:
  void SetUp() override {
    LedgerTest::SetUp();
    open_account(1, "0");
    exec("INSERT INTO {schema}.deposit_addresses VALUES ('0xaaa', 1)");
    // Thousands of sockets on each side (the child inherits the limit).
    rlimit r{};
    ::getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = std::min<rlim_t>(r.rlim_max, 8192);
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
  std::unique_ptr<ServiceProcess> intake(
      std::vector<std::pair<std::string, std::string>> env = {}) {
    env.insert(env.begin(), {{"IDEMLEDGER_WEBHOOK_SECRET", kSecret},
                             {"IDEMLEDGER_LISTEN_PORT", "0"},
                             {"IDEMLEDGER_RATE_LIMIT_RPS", "100000"}});
    auto p = std::make_unique<ServiceProcess>(IDEMLEDGER_WEBHOOK_INTAKE_BINARY, schema_, env,
                                              "listening");
    EXPECT_GT(p->port(), 0);
    EXPECT_GT(p->admin_port(), 0);
    return p;
  }
  static std::string deposit(const std::string& id, const std::string& amount = "5") {
    return R"({"event_id":")" + id + R"(","event_type":"deposit","amount":")" + amount +
           R"(","to_address":"0xaaa"})";
  }
  static std::string signed_post(const std::string& body, bool sign = true) {
    const std::string signature = sign ? WebhookVerifier::create(kSecret)->sign(body) : "00";
    return "POST /webhooks/payments HTTP/1.1\r\nHost: x\r\nX-Signature: " + signature +
           "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
           "\r\n\r\n" + body;
  }
  long events() { return count("SELECT count(*) FROM {schema}.payment_events"); }
};

TEST_F(IntakeAttacks, BodiesItMustNotReadAreRefusedBeforeReading) {
  std::unique_ptr<ServiceProcess> p = intake();
  const long rss_before = rss_kib(p->pid());
  const std::string head = "POST /webhooks/payments HTTP/1.1\r\nHost: x\r\nX-Signature: 00\r\n";

  // A 200 MB chunked body: 411 as soon as the header is in, and the stream
  // that follows is cut off, not read.
  {
    Raw c(p->port());
    ASSERT_TRUE(c.send(head + "Transfer-Encoding: chunked\r\n\r\n"));
    EXPECT_EQ(Raw::status(c.read(std::chrono::milliseconds(2000))), 411);
    const std::string chunk = "100000\r\n" + std::string(0x100000, 'a') + "\r\n";
    int sent_mb = 0;
    while (sent_mb < 200 && c.send(chunk)) ++sent_mb;
    EXPECT_LT(sent_mb, 200) << "the server closed the connection instead of reading it all";
  }
  // No length at all, a length over the cap, a compressed body.
  EXPECT_EQ(Raw::status(ask(p->port(), head + "\r\n")), 411);
  {
    Raw c(p->port());
    ASSERT_TRUE(c.send(head + "Content-Length: 200000000\r\n\r\n"));
    EXPECT_EQ(Raw::status(c.read(std::chrono::milliseconds(2000))), 413)
        << "answered from the header, before one body byte";
  }
  EXPECT_EQ(Raw::status(ask(p->port(), head + "Content-Encoding: gzip\r\nContent-Length: 10\r\n\r\n"
                                              "0123456789")),
            415);
  // 16 parallel "zip bombs": refused by their header, nothing unpacked.
  std::vector<std::thread> bombs;
  bombs.reserve(16);
  std::atomic<int> refused{0};
  std::string bomb = head + "Content-Encoding: gzip\r\nContent-Length: 65536\r\n\r\n";
  bomb.append(65536, '\0');
  for (int i = 0; i < 16; ++i) {
    bombs.emplace_back([&] { refused += Raw::status(ask(p->port(), bomb)) == 415; });
  }
  for (std::thread& t : bombs) t.join();
  EXPECT_EQ(refused.load(), 16);
  // A NUL byte in a signed body: 400 (the JSON parser would stop at it).
  const std::string with_nul = deposit("n1") + std::string(1, '\0') + "garbage";
  EXPECT_EQ(Raw::status(ask(p->port(), signed_post(with_nul))), 400);

  const long grown = rss_kib(p->pid()) - rss_before;
  std::printf("body attacks: server RSS grew %ld KiB\n", grown);
  EXPECT_LT(grown, 64 * 1024) << "KiB of RSS grown";
  EXPECT_EQ(events(), 0) << "nothing written for a refused request";
}

TEST_F(IntakeAttacks, HeadersItMustNotKeepAre431) {
  std::unique_ptr<ServiceProcess> p = intake();
  const long rss_before = rss_kib(p->pid());
  // 2,000,000 header lines, streamed: cut off at 8 KiB.
  EXPECT_EQ(Raw::status(flood_header_lines(p->port(), "POST /webhooks/payments HTTP/1.1")), 431);
  // Few bytes, many fields.
  EXPECT_EQ(Raw::status(ask(p->port(), with_many_fields("GET /webhooks/payments HTTP/1.1"))), 431);
  const long grown = rss_kib(p->pid()) - rss_before;
  std::printf("header attacks: server RSS grew %ld KiB\n", grown);
  EXPECT_LT(grown, 64 * 1024);
}

TEST_F(IntakeAttacks, SlowAndIdleClientsCostSocketsNotTheAdminListener) {
  std::unique_ptr<ServiceProcess> p =
      intake({{"IDEMLEDGER_REQUEST_TIMEOUT_MS", "1500"}, {"IDEMLEDGER_MAX_CONNECTIONS", "1024"}});
  // 2,000 idle connections (more than the server keeps: the longest idle go),
  // and 40 clients sending one header line every 200 ms.
  Siege siege(p->port(), 2000, 40, "POST /webhooks/payments HTTP/1.1");
  // The admin listener answers within 200 ms, every time.
  const std::chrono::milliseconds worst =
      worst_answer(p->admin_port(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, "health");
  std::printf("/healthz under 2,000 idle + 40 slow connections: worst of 10 %lld ms\n",
              static_cast<long long>(worst.count()));
  EXPECT_LT(worst.count(), 200) << "worst /healthz, ms";
  // And a signed delivery on the main listener still goes through.
  EXPECT_EQ(Raw::status(ask(p->port(), signed_post(deposit("during")))), 200);
  // The slow ones get 408 once their request deadline (1.5 s) passes.
  const std::string answer = siege.slow_answer(std::chrono::milliseconds(3000));
  EXPECT_EQ(Raw::status(answer), 408) << answer;
  EXPECT_EQ(events(), 1);
}

TEST_F(IntakeAttacks, AnUnsignedFloodNeverSpendsTheProvidersBudget) {
  std::unique_ptr<ServiceProcess> p = intake({{"IDEMLEDGER_RATE_LIMIT_RPS", "20"}});
  Raw c(p->port());
  int unauthorized = 0;
  for (int i = 0; i < 300; ++i) {
    c.send(signed_post(deposit("u" + std::to_string(i)), /*sign=*/false));
    unauthorized += Raw::status(c.read(std::chrono::milliseconds(2000))) == 401;
  }
  EXPECT_EQ(unauthorized, 300);
  EXPECT_EQ(Raw::status(ask(p->port(), signed_post(deposit("signed")))), 200)
      << "the provider's delivery after the flood";
  EXPECT_EQ(events(), 1);
  EXPECT_EQ(scalar("SELECT event_id FROM {schema}.payment_events"), "signed");
}

TEST_F(IntakeAttacks, RefusalsTeachNothingBeyondTheRuleBroken) {
  std::unique_ptr<ServiceProcess> p = intake();
  ASSERT_EQ(Raw::status(ask(p->port(), signed_post(deposit("e1", "5")))), 200);
  // Another amount under a recorded id: 409, without the recorded amount.
  const std::string conflict = ask(p->port(), signed_post(deposit("e1", "777")));
  EXPECT_EQ(Raw::status(conflict), 409);
  EXPECT_THAT(conflict, HasSubstr("conflicting replay"));
  EXPECT_THAT(conflict, ::testing::Not(HasSubstr("5.0")));
  EXPECT_THAT(conflict, ::testing::Not(HasSubstr("SQLSTATE")));
  // An unknown asset: 400 naming it, no SQLSTATE.
  const std::string unknown =
      ask(p->port(), signed_post(R"({"event_id":"e2","event_type":"deposit","amount":"5",)"
                                 R"("to_address":"0xaaa","asset":"NOPE"})"));
  EXPECT_EQ(Raw::status(unknown), 400);
  EXPECT_THAT(unknown, HasSubstr("NOPE"));
  EXPECT_THAT(unknown, ::testing::Not(HasSubstr("SQLSTATE")));
  // A non-UTF-8 trace id is replaced, never echoed or fatal.
  const std::string body = deposit("e3");
  const std::string odd =
      ask(p->port(),
          "POST /webhooks/payments HTTP/1.1\r\nHost: x\r\nX-Request-ID: \xff\xfe\r\n"
          "X-Signature: " +
              WebhookVerifier::create(kSecret)->sign(body) +
              "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(Raw::status(odd), 200) << odd;
  EXPECT_THAT(odd, ::testing::ContainsRegex("X-Request-ID: [0-9a-f]{32}"));
  // Nothing the front door does not serve.
  EXPECT_EQ(Raw::status(ask(p->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")), 404)
      << "metrics only on the admin listener";
  EXPECT_EQ(Raw::status(ask(p->port(), "garbage\r\n\r\n")), 400);
  EXPECT_EQ(events(), 2);
}

TEST_F(IntakeAttacks, ABadConfigurationStopsItBeforeItListens) {
  const std::string secret = "IDEMLEDGER_WEBHOOK_SECRET=" + kSecret;
  const std::string ours = secret + " IDEMLEDGER_SCHEMA=" + schema_name_ + " ";
  // Each refused with exit 2 and a message naming the variable, before it listens.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {secret + " IDEMLEDGER_SCHEMA='x; DROP SCHEMA y'", "IDEMLEDGER_SCHEMA"},
      {"IDEMLEDGER_WEBHOOK_SECRET=short IDEMLEDGER_SCHEMA=" + schema_name_,
       "IDEMLEDGER_WEBHOOK_SECRET"},
      {ours + "IDEMLEDGER_ADMIN_LISTEN=nope", "IDEMLEDGER_ADMIN_LISTEN"},
      {ours + "IDEMLEDGER_MAX_CONNECTIONS=abc", "IDEMLEDGER_MAX_CONNECTIONS"},
      // Group commit: a batch is at most 64 deliveries, a wait at most 100 ms,
      // at most 8 batches in flight.
      {ours + "IDEMLEDGER_GROUP_COMMIT_MAX=65", "IDEMLEDGER_GROUP_COMMIT_MAX"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_MAX=-1", "IDEMLEDGER_GROUP_COMMIT_MAX"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_MAX=99999999999999999999", "IDEMLEDGER_GROUP_COMMIT_MAX"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_MS=101", "IDEMLEDGER_GROUP_COMMIT_MS"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_MS='2; rm -rf /'", "IDEMLEDGER_GROUP_COMMIT_MS"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT=9", "IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT"},
      {ours + "IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT=-1", "IDEMLEDGER_GROUP_COMMIT_IN_FLIGHT"},
      // Recorder threads: 1..64. The handler threads' old setting means
      // nothing now, so it is refused rather than silently ignored.
      {ours + "IDEMLEDGER_RECORDER_THREADS=0", "IDEMLEDGER_RECORDER_THREADS"},
      {ours + "IDEMLEDGER_RECORDER_THREADS=65", "IDEMLEDGER_RECORDER_THREADS"},
      {ours + "IDEMLEDGER_HTTP_THREADS=16", "IDEMLEDGER_RECORDER_THREADS"},
  };
  for (const auto& [env, variable] : refused) {
    const Finished f =
        run_to_exit(IDEMLEDGER_WEBHOOK_INTAKE_BINARY, env + " IDEMLEDGER_LISTEN_PORT=0");
    EXPECT_EQ(f.exit_code, 2) << env << "\n" << f.output;
    EXPECT_THAT(f.output, HasSubstr(variable)) << env;
    EXPECT_THAT(f.output, ::testing::Not(HasSubstr("listening"))) << env;
  }
}

}  // namespace
}  // namespace idemledger::testing
