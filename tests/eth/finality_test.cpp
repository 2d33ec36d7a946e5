// EthFinalityOracle's reading of a node's answers, without a node: the
// transport is a function returning canned JSON-RPC bodies.
#include "idemledger/eth/finality.hpp"

#include <fmt/format.h>

#include "gmock/gmock.h"

namespace idemledger {
namespace {

constexpr std::string_view kTx =
    "0x5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060";

// A batch answer: the receipt (or null) and the finalized block.
std::string answer(std::string receipt, std::string finalized = R"({"number":"0x14"})") {
  return fmt::format(
      R"([{{"jsonrpc":"2.0","id":1,"result":{}}},{{"jsonrpc":"2.0","id":2,"result":{}}}])", receipt,
      finalized);
}
std::string receipt(std::string_view block, std::string_view status) {
  return fmt::format(R"({{"blockNumber":"{}","status":"{}"}})", block, status);
}

struct Canned {
  absl::StatusOr<std::string> body;
  int calls = 0;
  JsonRpcTransport transport() {
    return [this](std::string_view) {
      ++calls;
      return body;
    };
  }
};

TEST(EthFinality, FinalNotYetAndReverted) {
  Canned node{.body = answer(receipt("0xa", "0x1"))};
  EthFinalityOracle oracle({.transport = node.transport()});
  EXPECT_EQ(*oracle.is_finalized(kTx), true) << "block 10 <= finalized 20";
  node.body = answer(receipt("0x15", "0x1"));
  EthFinalityOracle later({.transport = node.transport()});
  EXPECT_EQ(*later.is_finalized(kTx), false) << "block 21 > finalized 20";
  node.body = answer("null");
  EthFinalityOracle unknown({.transport = node.transport()});
  EXPECT_EQ(*unknown.is_finalized(kTx), false) << "not mined yet";
  node.body = answer(receipt("0xa", "0x0"));
  EthFinalityOracle reverted({.transport = node.transport()});
  EXPECT_EQ(reverted.is_finalized(kTx).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(EthFinality, AnAnswerItCannotReadIsUnavailableNeverFinal) {
  for (const std::string& bad :
       {std::string("not json"), std::string("{}"), std::string("[1,2]"),
        std::string(R"([{"id":1,"error":{"code":-32000}},{"id":2,"result":{"number":"0x1"}}])"),
        answer(receipt("0xa", "0x1"), "null"), answer(receipt("12", "0x1")),
        answer(receipt("0xffffffffffffffffff", "0x1")),
        std::string(R"([{"id":1,"result":null}])")}) {
    Canned node{.body = bad};
    EthFinalityOracle oracle({.transport = node.transport()});
    const absl::StatusOr<bool> r = oracle.is_finalized(kTx);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << bad;
  }
}

TEST(EthFinality, AMalformedHashCostsNoCall) {
  Canned node{.body = answer("null")};
  EthFinalityOracle oracle({.transport = node.transport()});
  for (std::string_view bad :
       {"0x12", "5c504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b2206a",
        "0xZZ504ed432cb51138bcf09aa5e8a410dd4a1e204ef84bfed1be16dfba1b22060"}) {
    EXPECT_EQ(oracle.is_finalized(bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(node.calls, 0);
}

TEST(EthFinality, FinalAnswersAreKeptLongPendingOnesBriefly) {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  Canned node{.body = answer(receipt("0x15", "0x1"))};
  EthFinalityOracle oracle({.transport = node.transport(),
                            .final_ttl = absl::Hours(24),
                            .pending_ttl = absl::Seconds(5),
                            .now = [&] { return now; }});
  EXPECT_FALSE(*oracle.is_finalized(kTx));
  EXPECT_FALSE(*oracle.is_finalized(kTx));
  EXPECT_EQ(node.calls, 1) << "pending: cached for a moment";
  now += absl::Seconds(6);
  node.body = answer(receipt("0xa", "0x1"));
  EXPECT_TRUE(*oracle.is_finalized(kTx));
  EXPECT_EQ(node.calls, 2);
  now += absl::Hours(23);
  EXPECT_TRUE(*oracle.is_finalized(kTx));
  EXPECT_EQ(node.calls, 2) << "final answers cannot change";
  EXPECT_EQ(oracle.rpc_calls(), 2u);
}

TEST(EthFinality, AnOpenBreakerRefusesWithoutCalling) {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  Canned node{.body = absl::UnavailableError("connection refused")};
  LocalBreaker breaker({.name = "eth_rpc", .failure_threshold = 2, .now = [&] { return now; }});
  EthFinalityOracle oracle({.transport = node.transport(), .breaker = &breaker});
  EXPECT_FALSE(oracle.is_finalized(kTx).ok());
  EXPECT_FALSE(oracle.is_finalized(kTx).ok());
  EXPECT_EQ(breaker.state(), BreakerState::kOpen);
  const int calls = node.calls;
  EXPECT_EQ(oracle.is_finalized(kTx).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(node.calls, calls) << "the node is not asked while the breaker is open";
}

}  // namespace
}  // namespace idemledger
