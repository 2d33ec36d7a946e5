#include "src/core/internal/text.hpp"

#include "gtest/gtest.h"

namespace idemledger::internal {
namespace {

TEST(IsValidUtf8, AcceptsWellFormedAndRejectsMalformed) {
  EXPECT_TRUE(is_valid_utf8("evt_42"));
  EXPECT_TRUE(is_valid_utf8("платёж-٥"));
  EXPECT_TRUE(is_valid_utf8("\xf0\x9f\x92\xb0"));  // U+1F4B0
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xe2\x82"));          // truncated
}

TEST(JsonLine, EscapesKeysAndValues) {
  EXPECT_EQ(JsonLine()
                .add("msg", "a\"b\\c\n")
                .add("k", std::string_view("\x01", 1))
                .add("n", std::int64_t{-7})
                .finish(),
            "{\"msg\":\"a\\\"b\\\\c\\n\",\"k\":\"\\u0001\",\"n\":-7}\n");
}

TEST(JsonLine, ReplacesInvalidUtf8SoTheLineStaysJson) {
  EXPECT_EQ(JsonLine().add("v", "ok\xff\xc0\xaf\xe2\x82").finish(),
            "{\"v\":\"ok\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"}\n");
  EXPECT_EQ(JsonLine().add("v", "пл\xf0\x9f\x92\xb0").finish(), "{\"v\":\"пл\xf0\x9f\x92\xb0\"}\n");
  EXPECT_EQ(JsonLine().add("v", std::string_view("\0\x7f", 2)).finish(),
            "{\"v\":\"\\u0000\\u007f\"}\n");
}

TEST(Hex, IsLowercaseTwoDigitsPerByte) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa0, 0xff};
  EXPECT_EQ(to_hex(bytes), "000fa0ff");
}

TEST(QuotedForHumans, NeverLetsControlCharactersOrLongInputThrough) {
  EXPECT_EQ(quoted_for_humans("evt_1"), "\"evt_1\"");
  EXPECT_EQ(quoted_for_humans("a\x1b[2Jb\n"), "\"a\\x1b[2Jb\\x0a\"");
  EXPECT_EQ(quoted_for_humans("\"\\"), "\"\\x22\\x5c\"");
  EXPECT_EQ(quoted_for_humans("\xd0\xbf"), "\"\\xd0\\xbf\"");
  EXPECT_EQ(quoted_for_humans(std::string(100, 'x'), 4), "\"xxxx\"...");
}

}  // namespace
}  // namespace idemledger::internal
