// The webhook front door: the strict parser and the signature check.
//
// Input: the first byte picks how many following bytes are the signature
// header; the rest is the body. Never a crash; never accepted unless the
// signature is the HMAC-SHA256 of the body under the secret (computed here
// with OpenSSL's one-shot HMAC, independently of the verifier); the correct
// signature always verifies; and whatever the parser accepts obeys its rules.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/time/clock.h"
#include "idemledger/ledger/asset.hpp"
#include "idemledger/ledger/ledger.hpp"
#include "idemledger/queue/intake.hpp"

namespace {

const std::string kSecret = "fuzzing-secret-0123456789abcdef-0123456789";

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "webhook_fuzz: %s\n", what);
  std::abort();
}

std::string hmac_hex(std::string_view body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    static constexpr char kHex[] = "0123456789abcdef";
    hex.push_back(kHex[mac[i] >> 4]);
    hex.push_back(kHex[mac[i] & 0x0f]);
  }
  return hex;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t signature_length = std::min<std::size_t>(data[0], input.size());
  const std::string_view signature = input.substr(0, signature_length);
  const std::string_view body = input.substr(signature_length);

  static const idemledger::WebhookVerifier verifier = *idemledger::WebhookVerifier::create(kSecret);
  const std::string expected = hmac_hex(body);
  std::string_view presented = signature;
  if (presented.starts_with("sha256=")) presented.remove_prefix(7);
  const bool accepted = verifier.verify(body, signature, "", absl::Now()).ok();
  if (accepted && !equals_ignoring_case(presented, expected)) fail("accepted a wrong signature");
  if (!verifier.verify(body, expected, "", absl::Now()).ok()) fail("refused the right signature");
  if (verifier.sign(body) != expected) fail("sign() disagrees with HMAC-SHA256");

  const absl::StatusOr<idemledger::WebhookEvent> event = idemledger::parse_webhook(body);
  if (event.ok()) {
    if (body.size() > idemledger::kMaxWebhookBodyLength) fail("accepted an oversized body");
    if (event->event_id.empty() || event->event_id.size() > 128) fail("accepted a bad event id");
    if (event->event_id.starts_with(idemledger::kReorgEventIdPrefix)) {
      fail("accepted an event id in the library's reserved reorg: space");
    }
    if (body.find('\0') != std::string_view::npos) fail("accepted a body with a NUL byte");
    using idemledger::EventType;
    const bool settles = event->type == EventType::kWithdrawalConfirmed ||
                         event->type == EventType::kWithdrawalFailed;
    if (event->amount ? event->amount->is_zero() || event->amount->is_negative() : !settles) {
      fail("accepted a missing or non-positive amount");
    }
    if (event->amount && event->type == EventType::kWithdrawalFailed)
      fail("a failure with an amount");
    if (event->fee && event->fee->is_negative()) fail("accepted a negative fee");
    if (idemledger::is_credit(event->type)
            ? event->to_address.empty() || event->to_address.size() > idemledger::kMaxAddressLength
            : !event->user_id || *event->user_id <= 0) {
      fail("accepted an event without its owner");
    }
    if (settles != !event->hold_id.empty() || event->hold_id.size() > 128) {
      fail("a post or void without its hold, or another event with one");
    }
    if (!event->asset.empty() &&
        (!idemledger::AssetCode::create(event->asset).ok() || !event->chain.empty())) {
      fail("accepted a malformed asset code, or an asset named twice");
    }
    if (!event->contract.empty() && event->chain.empty()) fail("accepted a contract without chain");
    const std::string& contract = event->contract;
    bool evm = contract.size() == 42 && contract.starts_with("0x");
    for (std::size_t i = 2; evm && i < contract.size(); ++i) {
      evm = std::isxdigit(static_cast<unsigned char>(contract[i])) != 0;
    }
    for (char c : contract) {
      if (!std::isalnum(static_cast<unsigned char>(c)) || (evm && c >= 'A' && c <= 'F')) {
        fail("accepted a contract that is not letters and digits, or an EVM one not lowercased");
      }
    }
    if (event->expires_in &&
        (event->type != EventType::kWithdrawalRequested || *event->expires_in < absl::Seconds(1) ||
         *event->expires_in > idemledger::kMaxHoldExpiry)) {
      fail("accepted an expiry out of bounds, or on another event");
    }
  } else if (event.status().code() != absl::StatusCode::kInvalidArgument) {
    fail("refused with a code other than kInvalidArgument");
  }
  return 0;
}
