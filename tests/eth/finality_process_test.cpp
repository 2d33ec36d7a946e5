// The finality oracle against a fake Ethereum JSON-RPC node on loopback that
// can be told (over HTTP, like an operator would) to fail, time out or recover.
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "idemledger/eth/finality.hpp"
#include "tests/support/service_process.hpp"
#include "tests/support/test_db.hpp"

namespace idemledger::testing {
namespace {

// A node that knows some receipts and a finalized block. POST / answers
// JSON-RPC batches; POST /control?mode=normal|fail|timeout switches it.
class FakeChainNode {
 public:
  FakeChainNode() {
    server_.Post("/control", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      mode_ = req.get_param_value("mode");
      res.set_content("ok", "text/plain");
    });
    server_.Post("/", [this](const httplib::Request& req, httplib::Response& res) {
      ++requests_;
      std::string mode;
      {
        std::lock_guard<std::mutex> lock(mu_);
        mode = mode_;
      }
      if (mode == "fail") {
        res.status = 502;
        return;
      }
      if (mode == "timeout") absl::SleepFor(absl::Milliseconds(600));
      nlohmann::json out = nlohmann::json::array();
      for (const nlohmann::json& call : nlohmann::json::parse(req.body)) {
        nlohmann::json r = {{"jsonrpc", "2.0"}, {"id", call["id"]}};
        if (call["method"] == "eth_getTransactionReceipt") {
          std::lock_guard<std::mutex> lock(mu_);
          auto it = receipts_.find(call["params"][0].get<std::string>());
          r["result"] = it == receipts_.end() ? nlohmann::json(nullptr) : it->second;
        } else {
          r["result"] = {{"number", hex(finalized_)}};
        }
        out.push_back(r);
      }
      res.set_content(out.dump(), "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeChainNode() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_; }
  void set_finalized(std::uint64_t block) { finalized_ = block; }
  void add_receipt(const std::string& hash, std::uint64_t block, bool success) {
    std::lock_guard<std::mutex> lock(mu_);
    receipts_[hash] = {{"blockNumber", hex(block)}, {"status", success ? "0x1" : "0x0"}};
  }
  // What an operator would do: switch it over HTTP.
  void command(const std::string& mode) const {
    httplib::Client c("127.0.0.1", port_);
    ASSERT_TRUE(c.Post("/control?mode=" + mode));
  }
  // The transport a host would plug in: cpp-httplib with a 300 ms read timeout.
  JsonRpcTransport transport() const {
    const int port = port_;
    return [port](std::string_view body) -> absl::StatusOr<std::string> {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(0, 300'000);
      httplib::Result r = c.Post("/", std::string(body), "application/json");
      if (!r) return absl::UnavailableError(httplib::to_string(r.error()));
      if (r->status >= 500) return absl::UnavailableError("HTTP " + std::to_string(r->status));
      return r->body;
    };
  }

 private:
  static std::string hex(std::uint64_t n) { return fmt::format("0x{:x}", n); }
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::atomic<std::uint64_t> finalized_{0};
  std::mutex mu_;
  std::string mode_ = "normal";  // guarded by mu_, like receipts_
  std::map<std::string, nlohmann::json> receipts_;
};

const std::string kTx = "0x" + std::string(63, 'a') + "1";
const std::string kReverted = "0x" + std::string(63, 'b') + "2";
const std::string kUnknown = "0x" + std::string(63, 'c') + "3";

TEST(Finality, PendingThenFinalWithTheCacheInBetween) {
  FakeChainNode node;
  node.add_receipt(kTx, 100, true);
  node.set_finalized(90);
  absl::Time now = absl::Now();
  EthFinalityOracle oracle({.transport = node.transport(),
                            .final_ttl = absl::Hours(1),
                            .pending_ttl = absl::Seconds(5),
                            .now = [&] { return now; }});
  EXPECT_EQ(*oracle.is_finalized(kTx), false) << "block 100 above finalized 90";
  EXPECT_EQ(*oracle.is_finalized(kTx), false);
  EXPECT_EQ(oracle.rpc_calls(), 1u) << "pending answers are cached briefly";
  node.set_finalized(100);
  EXPECT_EQ(*oracle.is_finalized(kTx), false) << "still the cached pending answer";
  now += absl::Seconds(6);
  EXPECT_EQ(*oracle.is_finalized(kTx), true);
  node.command("fail");
  now += absl::Minutes(30);
  EXPECT_EQ(*oracle.is_finalized(kTx), true) << "a final answer outlives a node outage";
  EXPECT_EQ(oracle.rpc_calls(), 2u);
  EXPECT_EQ(node.requests(), 2) << "one batched request per question";
}

TEST(Finality, UnknownRevertedAndMalformed) {
  FakeChainNode node;
  node.add_receipt(kReverted, 50, false);
  node.set_finalized(60);
  EthFinalityOracle oracle({.transport = node.transport()});
  EXPECT_EQ(*oracle.is_finalized(kUnknown), false) << "no receipt: not final";
  EXPECT_EQ(oracle.is_finalized(kReverted).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(oracle.is_finalized("0x1234").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(oracle.is_finalized(std::string(66, 'z')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(node.requests(), 2) << "malformed hashes never reach the node";
}

TEST(Finality, NodeDownOrSlowOpensTheBreakerThenOneProbeRecovers) {
  FakeChainNode node;
  node.add_receipt(kTx, 10, true);
  node.set_finalized(20);
  absl::Time now = absl::Now();
  LocalBreaker breaker(
      {.name = "eth_rpc", .failure_threshold = 3, .open_for = absl::Seconds(30), .now = [&] {
         return now;
       }});
  EthFinalityOracle oracle(
      {.transport = node.transport(), .breaker = &breaker, .now = [&] { return now; }});
  node.command("fail");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(oracle.is_finalized(kTx).status().code(), absl::StatusCode::kUnavailable);
  }
  node.command("timeout");
  EXPECT_EQ(oracle.is_finalized(kTx).status().code(), absl::StatusCode::kUnavailable)
      << "a node slower than the transport's timeout is down";
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  const int before = node.requests();
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<bool> r = oracle.is_finalized(kTx);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(std::string(r.status().message()).find("circuit breaker is open"), std::string::npos);
  }
  EXPECT_EQ(node.requests(), before) << "an open breaker spares the node";

  node.command("normal");
  now += absl::Seconds(31);
  EXPECT_EQ(*oracle.is_finalized(kTx), true) << "the probe finds it back";
  EXPECT_EQ(breaker.state(), BreakerState::kClosed);
}

// outbox_worker with IDEMLEDGER_ETH_RPC_URL: a deposit carrying a tx_hash
// waits, without spending retries, until the node says its block is final.
class WorkerFinality : public LedgerTest {};

TEST_F(WorkerFinality, TheWorkerCreditsADepositOnlyOnceItsTransactionIsFinal) {
  FakeChainNode node;
  node.add_receipt(kTx, 100, true);
  node.set_finalized(90);
  open_account(1, "0");
  record_event(event("dep-final", EventType::kDeposit, 1, "7"), "pending");
  exec("UPDATE {schema}.payment_events SET tx_hash = '" + kTx + "'");
  ServiceProcess worker(
      IDEMLEDGER_OUTBOX_WORKER_BINARY, schema_,
      {{"IDEMLEDGER_ETH_RPC_URL", "http://127.0.0.1:" + std::to_string(node.port()) + "/"},
       {"IDEMLEDGER_FINALITY_RECHECK_MS", "100"},
       {"IDEMLEDGER_POLL_MS", "20"},
       {"IDEMLEDGER_WORKER_THREADS", "1"},
       {"IDEMLEDGER_DLQ_SPOOL", scratch("worker.spool")},
       {"IDEMLEDGER_DLQ_SPOOL_KEY", std::string(32, 'k')}},
      "worker started");
  const auto status = [&] {
    return scalar("SELECT status || ' ' || retry_count FROM {schema}.payment_events");
  };
  for (int i = 0; i < 200 && node.requests() == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_GT(node.requests(), 0) << "the worker asked the node";
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(balance(1), "0") << "block 100 is above the finalized 90: not credited";
  EXPECT_THAT(status(), ::testing::AnyOf("pending 0", "enqueued 0")) << "no retry spent";

  node.set_finalized(100);
  // The oracle caches a pending answer for 5 s.
  for (int i = 0; i < 500 && status() != "confirmed 0"; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(status(), "confirmed 0");
  EXPECT_EQ(balance(1), "7");
  EXPECT_EQ(worker.stop(), 0);
}

}  // namespace
}  // namespace idemledger::testing
