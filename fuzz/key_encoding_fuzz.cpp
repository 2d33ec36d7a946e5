// Idempotency keys: distinct field tuples never share an encoding.
//
// The input is cut into up to 8 fields (each byte below 8 ends a field, so
// the fields themselves can hold any other byte, ':' and NUL included). The
// length-prefixed encoding must decode back to exactly those fields — a
// decoder that always recovers the tuple proves no two tuples share bytes —
// and the key must be the SHA-256 of that encoding, computed here by
// OpenSSL's one-shot API rather than the library's streaming one.
#include <openssl/sha.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "idemledger/ledger/idempotency_key.hpp"
#include "src/ledger/internal/key_encoding.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "key_encoding_fuzz: %s\n", what);
  std::abort();
}

std::vector<std::string> decode(std::string_view bytes) {
  std::vector<std::string> fields;
  while (!bytes.empty()) {
    if (bytes.size() < 4) fail("truncated length prefix");
    const std::uint32_t n = (std::uint32_t{static_cast<unsigned char>(bytes[0])} << 24) |
                            (std::uint32_t{static_cast<unsigned char>(bytes[1])} << 16) |
                            (std::uint32_t{static_cast<unsigned char>(bytes[2])} << 8) |
                            std::uint32_t{static_cast<unsigned char>(bytes[3])};
    bytes.remove_prefix(4);
    if (bytes.size() < n) fail("length prefix beyond the end");
    fields.emplace_back(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return fields;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> fields(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] < 8 && fields.size() < 8) {
      fields.emplace_back();
    } else {
      fields.back().push_back(static_cast<char>(data[i]));
    }
  }
  const std::vector<std::string_view> views(fields.begin(), fields.end());
  std::string encoding;
  idemledger::internal::append_key_preimage(encoding, views);
  if (decode(encoding) != fields) fail("encoding does not decode to its fields");

  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(encoding.data()), encoding.size(), digest);
  std::string hex;
  for (unsigned char b : digest) {
    static constexpr char kHex[] = "0123456789abcdef";
    hex.push_back(kHex[b >> 4]);
    hex.push_back(kHex[b & 0x0f]);
  }
  if (idemledger::idempotency_key(views) != hex) fail("key is not SHA-256 of the encoding");
  if (fields.size() == 2 && idemledger::idempotency_key(fields[0], fields[1]) != hex) {
    fail("two-field form disagrees with the span form");
  }
  return 0;
}
