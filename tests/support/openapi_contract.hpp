// The webhook intake's API contract (docs/openapi.yaml), held against real
// answers. The HTTP tests pass every answer the real webhook_intake gives them
// through violations(): the status must be one the operation documents, with
// its content type and its headers, and a JSON body must validate against the
// documented schema.
//
// The schema check covers the keywords the contract uses (type, required,
// properties, enum, pattern, minLength, maxLength, minimum, maximum, $ref);
// any other keyword in a schema it meets is itself a violation, so the
// contract cannot grow a rule this check silently skips.
//
// Thread-safety: a loaded contract is immutable; intake() is safe to call
// from any thread.
#ifndef IDEMLEDGER_TESTS_SUPPORT_OPENAPI_CONTRACT_HPP
#define IDEMLEDGER_TESTS_SUPPORT_OPENAPI_CONTRACT_HPP

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace idemledger::testing {

// One HTTP answer as the client received it. Header names in lower case.
struct HttpAnswer {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  bool body_complete = true;  // false: fewer bytes arrived than Content-Length said
};

// "HTTP/1.1 200 OK\r\nName: value\r\n...\r\n\r\nbody" as received; status 0
// if it is not an HTTP/1.1 answer.
[[nodiscard]] HttpAnswer parse_raw_answer(std::string_view raw);

class OpenApiContract {
 public:
  // docs/openapi.yaml, loaded once (the path is compiled in).
  static const OpenApiContract& intake();

  explicit OpenApiContract(nlohmann::json document) : doc_(std::move(document)) {}

  // What in `answer` the operation `operation_id` does not document; empty
  // when it conforms.
  [[nodiscard]] std::vector<std::string> violations(std::string_view operation_id,
                                                    const HttpAnswer& answer) const;

 private:
  const nlohmann::json& resolve(const nlohmann::json& node) const;
  void validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& at,
                std::vector<std::string>& out) const;

  nlohmann::json doc_;
};

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_SUPPORT_OPENAPI_CONTRACT_HPP
