// The outbox worker's and the notification relay's /metrics listeners
// (examples/common/http.hpp), attacked on loopback as the intake's are:
// requests they must not read, and idle and slow clients that must not keep
// a scrape from its answer. Each attack is bounded in bytes and time; each
// asserts the answer (held against docs/openapi.yaml's metrics operation)
// and the server's memory.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "tests/support/raw_client.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

const std::string kScrape = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";

// The parameter names the binary.
class MetricsAttacks : public LedgerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  // The binary, with its /metrics on a free port.
  std::unique_ptr<ServiceProcess> start() {
    std::vector<std::pair<std::string, std::string>> env = {{"IDEMLEDGER_METRICS_PORT", "0"}};
    const char* binary = IDEMLEDGER_OUTBOX_WORKER_BINARY;
    if (GetParam() == "outbox_worker") {
      env.emplace_back("IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool"));
      env.emplace_back("IDEMLEDGER_DLQ_SPOOL_KEY", std::string(32, 'k'));
    } else {
      binary = IDEMLEDGER_NOTIFICATION_RELAY_BINARY;
      env.emplace_back("RELAY_URL", "http://127.0.0.1:9/notify");  // nothing to deliver
    }
    auto p = std::make_unique<ServiceProcess>(binary, schema_, env, "metrics listening");
    EXPECT_GT(p->port(), 0);
    return p;
  }
};

TEST_P(MetricsAttacks, WhatAScrapeMustNotReadIsRefusedUnread) {
  std::unique_ptr<ServiceProcess> p = start();
  const long rss_before = rss_kib(p->pid());
  // 2,000,000 header lines, streamed: cut off at 8 KiB. Few bytes, many fields.
  EXPECT_EQ(Raw::status(flood_header_lines(p->port(), "GET /metrics HTTP/1.1"), "metrics"), 431);
  EXPECT_EQ(Raw::status(ask(p->port(), with_many_fields("GET /metrics HTTP/1.1")), "metrics"), 431);
  // A listener that reads no body: refused from the header, nothing read.
  {
    Raw c(p->port());
    ASSERT_TRUE(c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 200000000\r\n\r\n"));
    EXPECT_EQ(Raw::status(c.read(std::chrono::milliseconds(2000)), "metrics"), 413);
  }
  EXPECT_EQ(Raw::status(ask(p->port(),
                            "GET /metrics HTTP/1.1\r\nHost: x\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n"),
                        "metrics"),
            411);
  EXPECT_EQ(Raw::status(ask(p->port(),
                            "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                            "Content-Length: 0\r\n\r\n"),
                        "metrics"),
            405);
  const long grown = rss_kib(p->pid()) - rss_before;
  std::printf("%s /metrics, request attacks: RSS grew %ld KiB\n", GetParam().c_str(), grown);
  EXPECT_LT(grown, 64 * 1024);
  // And a scrape is still answered.
  const std::string answer = ask(p->port(), kScrape);
  EXPECT_EQ(Raw::status(answer, "metrics"), 200) << answer;
  EXPECT_THAT(answer, ::testing::HasSubstr("# TYPE "));
}

TEST_P(MetricsAttacks, IdleAndSlowClientsCannotHoldAScrape) {
  std::unique_ptr<ServiceProcess> p = start();
  // 300 idle connections (more than the listener keeps: the longest idle
  // go), and 20 clients sending one header line every 200 ms.
  Siege siege(p->port(), 300, 20, "GET /metrics HTTP/1.1");
  const std::chrono::milliseconds worst = worst_answer(p->port(), kScrape, 200, "metrics");
  std::printf("%s /metrics under 300 idle + 20 slow connections: worst of 10 %lld ms\n",
              GetParam().c_str(), static_cast<long long>(worst.count()));
  EXPECT_LT(worst.count(), 500) << "worst scrape, ms";
}

INSTANTIATE_TEST_SUITE_P(Services, MetricsAttacks,
                         ::testing::Values("outbox_worker", "notification_relay"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace idemledger::testing
