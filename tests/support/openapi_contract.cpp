#include "tests/support/openapi_contract.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <regex>
#include <set>
#include <stdexcept>

#include "absl/strings/ascii.h"
#include "src/core/internal/absl_compat.hpp"

namespace idemledger::testing {
namespace {

// YAML as JSON: a quoted scalar stays a string; a plain one is a boolean, an
// integer or a string, as YAML's core schema reads it.
nlohmann::json to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& entry : node) object[entry.first.as<std::string>()] = to_json(entry.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& item : node) array.push_back(to_json(item));
      return array;
    }
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() == "!") return text;
      if (text == "true") return true;
      if (text == "false") return false;
      std::int64_t number = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
      if (ec == std::errc() && end == text.data() + text.size()) return number;
      return text;
    }
    default:
      return nullptr;
  }
}

std::string lower(std::string_view text) { return absl::AsciiStrToLower(internal::to_absl(text)); }

std::string trim(std::string_view text) {
  return std::string(absl::StripAsciiWhitespace(internal::to_absl(text)));
}

const std::set<std::string, std::less<>> kKnownKeywords = {
    "type",      "required", "properties", "enum", "pattern",    "minLength",
    "maxLength", "minimum",  "maximum",    "$ref", "description"};

}  // namespace

HttpAnswer parse_raw_answer(std::string_view raw) {
  HttpAnswer answer;
  const std::size_t head_end = raw.find("\r\n\r\n");
  if (!raw.starts_with("HTTP/1.1 ") || head_end == std::string_view::npos) return answer;
  const std::string_view head = raw.substr(0, head_end);
  const std::string_view code = head.substr(9, 3);
  if (std::from_chars(code.data(), code.data() + code.size(), answer.status).ec != std::errc()) {
    answer.status = 0;
  }
  for (std::size_t at = head.find("\r\n"); at != std::string_view::npos;) {
    const std::size_t next = head.find("\r\n", at + 2);
    const std::string_view line = head.substr(
        at + 2, next == std::string_view::npos ? std::string_view::npos : next - at - 2);
    if (const std::size_t colon = line.find(':'); colon != std::string_view::npos) {
      answer.headers[lower(line.substr(0, colon))] = trim(line.substr(colon + 1));
    }
    at = next;
  }
  answer.body = std::string(raw.substr(head_end + 4));
  if (auto length = answer.headers.find("content-length"); length != answer.headers.end()) {
    std::size_t expected = 0;
    const std::string& text = length->second;
    answer.body_complete =
        std::from_chars(text.data(), text.data() + text.size(), expected).ec == std::errc() &&
        answer.body.size() >= expected;
  }
  return answer;
}

const OpenApiContract& OpenApiContract::intake() {
  static const OpenApiContract* contract = [] {
    try {
      return new OpenApiContract(to_json(YAML::LoadFile(IDEMLEDGER_OPENAPI_FILE)));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot load %s: %s\n", IDEMLEDGER_OPENAPI_FILE, e.what());
      std::abort();
    }
  }();
  return *contract;
}

const nlohmann::json& OpenApiContract::resolve(const nlohmann::json& node) const {
  if (!node.is_object() || !node.contains("$ref")) return node;
  const std::string ref = node.at("$ref").get<std::string>();
  if (!ref.starts_with("#/")) throw std::runtime_error("only local $ref: " + ref);
  return resolve(doc_.at(nlohmann::json::json_pointer(ref.substr(1))));
}

void OpenApiContract::validate(const nlohmann::json& schema_or_ref, const nlohmann::json& value,
                               const std::string& at, std::vector<std::string>& out) const {
  const nlohmann::json& schema = resolve(schema_or_ref);
  for (const auto& [keyword, rule] : schema.items()) {
    if (!kKnownKeywords.contains(keyword)) {
      out.push_back(
          fmt::format("{}: the contract uses \"{}\", which this check cannot test", at, keyword));
    }
  }
  if (schema.contains("type")) {
    const std::string type = schema.at("type").get<std::string>();
    const bool ok = type == "object"    ? value.is_object()
                    : type == "string"  ? value.is_string()
                    : type == "integer" ? value.is_number_integer()
                    : type == "boolean" ? value.is_boolean()
                    : type == "array"   ? value.is_array()
                                        : false;
    if (!ok) {
      out.push_back(at + ": " + value.dump() + " is not of type " + type);
      return;
    }
  }
  if (schema.contains("enum")) {
    const nlohmann::json& allowed = schema.at("enum");
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
      out.push_back(at + ": " + value.dump() + " is not one of " + allowed.dump());
    }
  }
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (schema.contains("pattern") &&
        !std::regex_search(text, std::regex(schema.at("pattern").get<std::string>()))) {
      out.push_back(at + ": \"" + text + "\" does not match " + schema.at("pattern").dump());
    }
    if (schema.contains("minLength") && text.size() < schema.at("minLength").get<std::size_t>()) {
      out.push_back(at + ": shorter than " + schema.at("minLength").dump());
    }
    if (schema.contains("maxLength") && text.size() > schema.at("maxLength").get<std::size_t>()) {
      out.push_back(at + ": longer than " + schema.at("maxLength").dump());
    }
  }
  if (value.is_number_integer()) {
    const auto n = value.get<std::int64_t>();
    if (schema.contains("minimum") && n < schema.at("minimum").get<std::int64_t>()) {
      out.push_back(at + ": below the minimum " + schema.at("minimum").dump());
    }
    if (schema.contains("maximum") && n > schema.at("maximum").get<std::int64_t>()) {
      out.push_back(at + ": above the maximum " + schema.at("maximum").dump());
    }
  }
  if (value.is_object()) {
    if (schema.contains("required")) {
      for (const auto& name : schema.at("required")) {
        if (!value.contains(name.get<std::string>())) {
          out.push_back(at + ": the required \"" + name.get<std::string>() + "\" is missing");
        }
      }
    }
    if (schema.contains("properties")) {
      for (const auto& [name, property] : schema.at("properties").items()) {
        if (value.contains(name))
          validate(property, value.at(name), fmt::format("{}.{}", at, name), out);
      }
    }
  }
}

std::vector<std::string> OpenApiContract::violations(std::string_view operation_id,
                                                     const HttpAnswer& answer) const {
  const nlohmann::json* operation = nullptr;
  for (const auto& [path, item] : doc_.at("paths").items()) {
    for (const auto& [method, candidate] : item.items()) {
      if (candidate.is_object() && candidate.value("operationId", "") == operation_id) {
        operation = &candidate;
      }
    }
  }
  if (operation == nullptr) return {"the contract has no operation " + std::string(operation_id)};
  const std::string status = std::to_string(answer.status);
  const std::string where = std::string(operation_id) + " " + status;
  const nlohmann::json& responses = operation->at("responses");
  if (!responses.contains(status)) {
    return {where + ": the contract does not document this status (body: " + answer.body + ")"};
  }
  std::vector<std::string> out;
  const nlohmann::json& response = resolve(responses.at(status));
  if (response.contains("headers")) {
    for (const auto& [name, header] : response.at("headers").items()) {
      if (!answer.headers.contains(lower(name))) {
        out.push_back(fmt::format("{}: the documented header {} is missing", where, name));
      }
    }
  }
  if (!response.contains("content")) return out;
  const auto type = answer.headers.find("content-type");
  std::string media;
  if (type != answer.headers.end()) {
    const std::string_view value = type->second;
    media = trim(value.substr(0, value.find(';')));
  }
  if (!response.at("content").contains(media)) {
    out.push_back(where + ": content type \"" + media + "\" is not documented");
    return out;
  }
  if (media != "application/json" || !answer.body_complete) return out;
  const nlohmann::json body =
      nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    out.push_back(where + ": the body is not JSON: " + answer.body);
    return out;
  }
  validate(response.at("content").at(media).at("schema"), body, where + " body", out);
  return out;
}

}  // namespace idemledger::testing
