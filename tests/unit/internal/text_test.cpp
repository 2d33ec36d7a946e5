#include "src/internal/text.hpp"

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
  EXPECT_EQ(json_line({{"msg", "a\"b\\c\n"}, {"k", std::string_view("\x01", 1)}}),
            "{\"msg\":\"a\\\"b\\\\c\\n\",\"k\":\"\\u0001\"}\n");
}

}  // namespace
}  // namespace idemledger::internal
