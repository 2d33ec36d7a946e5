#include "idemledger/queue/intake.hpp"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace idemledger {
namespace {

using ::testing::HasSubstr;

const std::string kSecret(32, 'k');
const absl::Time kNow = absl::FromUnixSeconds(1'700'000'000);

TEST(WebhookVerifier, RefusesAShortSecret) {
  absl::StatusOr<WebhookVerifier> v = WebhookVerifier::create(std::string(31, 'k'));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(v.status().message()), HasSubstr("at least 32 bytes"));
}

// Vectors computed independently with Python's hmac module.
TEST(WebhookVerifier, SignsAndVerifiesTheRawBytes) {
  const WebhookVerifier v = *WebhookVerifier::create(kSecret);
  const std::string body = R"({"a":1})";
  EXPECT_EQ(v.sign(body), "1d3154043cab846e480d276b293ac8d8443514ce52ccd43a7c118d42f9bc5b5b");
  EXPECT_TRUE(v.verify(body, v.sign(body), "", kNow).ok());
  EXPECT_TRUE(v.verify(body,
                       "sha256=1D3154043CAB846E480D276B293AC8D8443514CE52CCD43A7C118D42F9BC5B5B",
                       "", kNow)
                  .ok());
  // Re-serialised JSON (same meaning, other bytes) must fail.
  EXPECT_EQ(v.verify(R"({"a": 1})", v.sign(body), "", kNow).code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(WebhookVerifier, NamesWhatFailed) {
  const WebhookVerifier v = *WebhookVerifier::create(kSecret);
  const auto message = [&](std::string_view sig) {
    return std::string(v.verify("x", sig, "", kNow).message());
  };
  EXPECT_THAT(message(""), HasSubstr("missing"));
  EXPECT_THAT(message("abc"), HasSubstr("64 hex digits"));
  EXPECT_THAT(message(std::string(64, 'z')), HasSubstr("64 hex digits"));
  std::string tampered = v.sign("x");
  tampered[10] = tampered[10] == '0' ? '1' : '0';
  EXPECT_THAT(message(tampered), HasSubstr("mismatch"));
  const WebhookVerifier other = *WebhookVerifier::create(std::string(32, 'o'));
  EXPECT_EQ(v.verify("x", other.sign("x"), "", kNow).code(), absl::StatusCode::kUnauthenticated);
}

TEST(WebhookVerifier, SignedTimestampBoundsReplays) {
  const WebhookVerifier v = *WebhookVerifier::create(kSecret, absl::Minutes(5));
  const std::string body = R"({"a":1})";
  EXPECT_EQ(v.sign(body, "1700000000"),
            "6935b796c0fec66e5dee52c86c7fd1218a424c32f1adb239ff2893c31e54f033");
  EXPECT_TRUE(v.verify(body, v.sign(body, "1700000000"), "1700000000", kNow).ok());
  EXPECT_TRUE(v.verify(body, v.sign(body, "1699999800"), "1699999800", kNow).ok());
  EXPECT_THAT(std::string(v.verify(body, v.sign(body, "1699999000"), "1699999000", kNow).message()),
              HasSubstr("tolerance window"));
  EXPECT_THAT(std::string(v.verify(body, v.sign(body), "", kNow).message()),
              HasSubstr("timestamp missing"));
  EXPECT_THAT(std::string(v.verify(body, v.sign(body, "17e8"), "17e8", kNow).message()),
              HasSubstr("unix seconds"));
  // The timestamp is signed: moving it forward breaks the signature.
  EXPECT_THAT(std::string(v.verify(body, v.sign(body, "1699999000"), "1700000000", kNow).message()),
              HasSubstr("mismatch"));
}

std::string rule_of(std::string_view body) {
  absl::StatusOr<WebhookEvent> e = parse_webhook(body);
  EXPECT_FALSE(e.ok()) << "accepted: " << body;
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(e.status().message());
}

TEST(ParseWebhook, AcceptsAWellFormedDepositAndWithdrawal) {
  absl::StatusOr<WebhookEvent> d = parse_webhook(
      R"({"event_id":"evt_1","event_type":"deposit","amount":"50.25","to_address":"0xabc","extra":[1,{"x":null}]})");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->event_id, "evt_1");
  EXPECT_EQ(d->type, EventType::kDeposit);
  EXPECT_EQ(d->amount->to_string(), "50.25");
  EXPECT_EQ(d->to_address, "0xabc");
  EXPECT_FALSE(d->user_id.has_value()) << "a credit never takes a payload user id";
  absl::StatusOr<WebhookEvent> w = parse_webhook(
      R"({"event_id":"w_1","event_type":"withdrawal_fee","amount":"1e-3","user_id":7})");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->user_id, 7);
  EXPECT_EQ(w->amount->to_string(), "0.001");
}

TEST(ParseWebhook, RefusesEachBrokenRuleByName) {
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":50.25,"to_address":"a"})"),
              HasSubstr("must be a JSON string, not a number"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"+5","to_address":"a"})"),
              HasSubstr("sign"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"refund","amount":"5","to_address":"a"})"),
              HasSubstr("must be one of deposit, airdrop, withdrawal, withdrawal_fee"));
  EXPECT_THAT(
      rule_of(
          R"({"event_id":"e","event_type":"reorg_compensation","amount":"5","to_address":"a"})"),
      HasSubstr("must be one of"));
  EXPECT_THAT(rule_of(R"({"event_type":"deposit","amount":"5","to_address":"a"})"),
              HasSubstr("\"event_id\" is required"));
  EXPECT_THAT(rule_of(R"({"event_id":7,"event_type":"deposit","amount":"5","to_address":"a"})"),
              HasSubstr("\"event_id\" must be a JSON string"));
  EXPECT_THAT(rule_of(R"({"event_id":")" + std::string(129, 'x') +
                      R"(","event_type":"deposit","amount":"5","to_address":"a"})"),
              HasSubstr("1..128 bytes"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5"})"),
              HasSubstr("\"to_address\" is required"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"withdrawal","amount":"5","user_id":"7"})"),
              HasSubstr("positive integer"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"withdrawal","amount":"5","user_id":-1})"),
              HasSubstr("positive integer"));
  EXPECT_THAT(
      rule_of(
          R"({"event_id":"a","event_id":"b","event_type":"deposit","amount":"5","to_address":"a"})"),
      HasSubstr("duplicate key \"event_id\""));
  EXPECT_THAT(rule_of(R"([1,2])"), HasSubstr("JSON object"));
  EXPECT_THAT(rule_of(std::string(R"({"event_id":"e","event_type":"deposit","amount":"5",)"
                                  R"("to_address":"a"})") +
                      std::string(1, '\0') + "trailing, signed but never read"),
              HasSubstr("must not contain a NUL byte"));
  EXPECT_THAT(rule_of(R"({"event_id":"reorg:0xabc","event_type":"deposit","amount":"5",)"
                      R"("to_address":"a"})"),
              HasSubstr("must not start with \"reorg:\""));
  EXPECT_THAT(rule_of(R"({"event_id":)"), HasSubstr("well-formed"));
  EXPECT_THAT(rule_of("{\"event_id\":\"e\xff\"}"), HasSubstr("valid UTF-8"));
  EXPECT_THAT(rule_of(std::string(kMaxWebhookBodyLength + 1, ' ')), HasSubstr("at most"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("tx_hash":"0x123"})"),
              HasSubstr("\"tx_hash\" must be a string of 0x and 64 hex digits"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("tx_hash":7})"),
              HasSubstr("\"tx_hash\""));
}

TEST(ParseWebhook, KeepsACreditsTransactionHashInLowerCase) {
  const std::string hash = "0x" + std::string(62, 'a') + "Bc";
  absl::StatusOr<WebhookEvent> e = parse_webhook(
      R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a","tx_hash":")" + hash +
      "\"}");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->tx_hash, "0x" + std::string(62, 'a') + "bc") << "one spelling per transaction";
  EXPECT_TRUE(
      parse_webhook(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a"})")
          ->tx_hash.empty())
      << "optional";
}

TEST(ParseWebhook, NamesTheAssetByCodeOrByChainAndContract) {
  absl::StatusOr<WebhookEvent> e = parse_webhook(
      R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a","asset":"USDC"})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->asset, "USDC");
  EXPECT_TRUE(e->chain.empty());
  e = parse_webhook(
      R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a","chain":"ethereum",)"
      R"("contract":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->chain, "ethereum");
  EXPECT_EQ(e->contract, "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48") << "one spelling per token";
  e = parse_webhook(
      R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a","chain":"ethereum"})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->contract.empty()) << "the chain's native coin";
  EXPECT_TRUE(
      parse_webhook(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a"})")
          ->asset.empty())
      << "neither: the default asset";

  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("asset":"USDC","chain":"ethereum"})"),
              HasSubstr("by \"asset\" or by \"chain\", not both"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("asset":"usdc"})"),
              HasSubstr("\"asset\" must match"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("asset":7})"),
              HasSubstr("\"asset\" must be a JSON string"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("contract":"0xabc"})"),
              HasSubstr("\"contract\" needs its \"chain\""));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("chain":"ethereum","contract":"0x';--"})"),
              HasSubstr("letters and digits"));
  EXPECT_THAT(rule_of(R"({"event_id":"e","event_type":"deposit","amount":"5","to_address":"a",)"
                      R"("chain":")" +
                      std::string(33, 'x') + R"("})"),
              HasSubstr("\"chain\""));
}

TEST(ParseWebhook, TakesTheTwoPhaseWithdrawalsSteps) {
  absl::StatusOr<WebhookEvent> e = parse_webhook(
      R"({"event_id":"w","event_type":"withdrawal_requested","amount":"5","fee":"0.1",)"
      R"("user_id":7,"asset":"ETH","expires_in_s":600})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->type, EventType::kWithdrawalRequested);
  EXPECT_EQ(e->fee->to_string(), "0.1");
  EXPECT_EQ(e->expires_in, absl::Minutes(10));
  e = parse_webhook(
      R"({"event_id":"c","event_type":"withdrawal_confirmed","withdrawal_id":"w","user_id":7})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->hold_id, "w");
  EXPECT_FALSE(e->amount.has_value()) << "capture all of it";
  e = parse_webhook(
      R"({"event_id":"c","event_type":"withdrawal_confirmed","withdrawal_id":"w","user_id":7,)"
      R"("amount":"4.5","fee":"0"})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->amount->to_string(), "4.5");
  EXPECT_TRUE(e->fee->is_zero());
  e = parse_webhook(
      R"({"event_id":"f","event_type":"withdrawal_failed","withdrawal_id":"w","user_id":7})");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->type, EventType::kWithdrawalFailed);

  EXPECT_THAT(rule_of(R"({"event_id":"w","event_type":"withdrawal_requested","user_id":7})"),
              HasSubstr("\"amount\" is required"));
  EXPECT_THAT(rule_of(R"({"event_id":"w","event_type":"withdrawal_requested","amount":"5",)"
                      R"("user_id":7,"fee":0.1})"),
              HasSubstr("\"fee\" must be a JSON string"));
  EXPECT_THAT(rule_of(R"({"event_id":"w","event_type":"withdrawal_requested","amount":"5",)"
                      R"("user_id":7,"fee":"-1"})"),
              HasSubstr("fee"));
  for (const char* bad : {"0", "2592001", "\"60\"", "1.5"}) {
    EXPECT_THAT(rule_of(R"({"event_id":"w","event_type":"withdrawal_requested","amount":"5",)"
                        R"("user_id":7,"expires_in_s":)" +
                        std::string(bad) + "}"),
                HasSubstr("\"expires_in_s\" must be an integer number of seconds, 1..2592000"))
        << bad;
  }
  EXPECT_THAT(rule_of(R"({"event_id":"c","event_type":"withdrawal_confirmed","user_id":7})"),
              HasSubstr("\"withdrawal_id\" is required"));
  EXPECT_THAT(rule_of(R"({"event_id":"f","event_type":"withdrawal_failed","withdrawal_id":"w",)"
                      R"("user_id":7,"amount":"5"})"),
              HasSubstr("\"amount\" is not taken by withdrawal_failed"));
  EXPECT_THAT(rule_of(R"({"event_id":"f","event_type":"withdrawal_failed","withdrawal_id":"w"})"),
              HasSubstr("\"user_id\" must be a positive integer"));
}

}  // namespace
}  // namespace idemledger
