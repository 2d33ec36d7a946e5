#include "idemledger/ledger/idempotency_key.hpp"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace idemledger {
namespace {

// Expected values computed independently (Python hashlib over struct.pack('>I', len) + bytes).
TEST(IdempotencyKey, IsLowercaseHexSha256OfLengthPrefixedFields) {
  EXPECT_EQ(idempotency_key("a", "b"),
            "16275ef0f5d0eb9dd9e0a53277549fda5c886358a6872df23c797b13e11455bc");
  EXPECT_EQ(idempotency_key("evt_42", "deposit"),
            "d67a6f7dd124a6424b38fe765128e4e6cb80dee22f5c83f2b22822bb59a506e8");
  EXPECT_EQ(idempotency_key({"evt_42", "deposit"}), idempotency_key("evt_42", "deposit"));
}

TEST(IdempotencyKey, SeedSeparatorCollisionsDoNotCollide) {
  // "a:" + "::" + ":b" style joins collide; length prefixes do not.
  EXPECT_NE(idempotency_key("a:", ":b"), idempotency_key("a", "::b"));
  EXPECT_NE(idempotency_key("a::b", ""), idempotency_key("a", "b"));
  // NUL-joined keys collide on embedded NULs; length prefixes do not.
  EXPECT_NE(idempotency_key(std::string("a\0b", 3), "c"),
            idempotency_key("a", std::string("b\0c", 3)));
  EXPECT_NE(idempotency_key({"ab", "c"}), idempotency_key({"a", "bc"}));
  EXPECT_NE(idempotency_key({"a", "b", ""}), idempotency_key({"a", "b"}));
}

TEST(IdempotencyKey, DistinctTuplesGiveDistinctKeys) {
  const std::vector<std::string> parts = {"",  "a", ":", "::", "a:", ":a", std::string("\0", 1),
                                          "ab"};
  std::set<std::string> keys;
  std::size_t tuples = 0;
  for (const auto& x : parts) {
    for (const auto& y : parts) {
      keys.insert(idempotency_key(x, y));
      ++tuples;
    }
  }
  EXPECT_EQ(keys.size(), tuples);
}

TEST(PayloadFingerprint, CoversUserCanonicalAmountAndType) {
  const Amount a = *Amount::parse("50.25");
  EXPECT_EQ(payload_fingerprint(7, a, "deposit"),
            "f9ba1d691d2c35cde15b96b430d7057f49ec66d15222a9aed246b6bc803a59d3");
  EXPECT_EQ(payload_fingerprint(7, *Amount::parse("5025e-2"), "deposit"),
            payload_fingerprint(7, a, "deposit"));
  EXPECT_NE(payload_fingerprint(8, a, "deposit"), payload_fingerprint(7, a, "deposit"));
  EXPECT_NE(payload_fingerprint(7, *Amount::parse("50.26"), "deposit"),
            payload_fingerprint(7, a, "deposit"));
  EXPECT_NE(payload_fingerprint(7, a, "airdrop"), payload_fingerprint(7, a, "deposit"));
}

}  // namespace
}  // namespace idemledger
