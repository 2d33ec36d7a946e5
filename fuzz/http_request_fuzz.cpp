// The intake's HTTP request path before any handler runs: Beast's parser
// with the front door's limits, then check_header() (examples/common/
// http_server.hpp), on arbitrary bytes.
//
// Properties: never a crash; the parser never takes more header bytes than
// the limit; and a request check_header() lets through to its body is never
// chunked, never compressed, has at most max_header_count fields, and — for a
// POST — says its length, which is within max_body.
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "examples/common/http_server.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "http_request_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace h = example::http;
  const h::Limits limits{.max_body = 256, .max_header_bytes = 512, .max_header_count = 8};
  h::bhttp::request_parser<h::bhttp::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body);
  parser.eager(false);  // stop after the header, as the server does
  h::beast::error_code ec;
  std::size_t used = 0;
  while (used < size && !parser.is_header_done()) {
    const std::size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == h::bhttp::error::need_more) break;
    if (ec) return 0;  // refused by the parser: 400/431 on the wire
    if (n == 0) break;
    used += n;
  }
  if (!parser.is_header_done()) return 0;
  if (used > limits.max_header_bytes) fail("took more header bytes than the limit");
  if (h::check_header(parser, limits)) return 0;  // refused before the body
  const auto& header = parser.get();
  if (parser.chunked()) fail("a chunked body got through");
  if (header.find(h::bhttp::field::content_encoding) != header.end()) {
    fail("a compressed body got through");
  }
  std::size_t fields = 0;
  for (auto it = header.begin(); it != header.end(); ++it) ++fields;
  if (fields > limits.max_header_count) fail("too many header fields got through");
  if (header.method() == h::bhttp::verb::post &&
      (!parser.content_length() || *parser.content_length() > limits.max_body)) {
    fail("a POST without a length within the limit got through");
  }
  return 0;
}
