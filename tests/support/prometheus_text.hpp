// A strict reader of the Prometheus text exposition format (0.0.4), written
// from the format's description, for tests: it refuses what a Prometheus
// server would refuse (bad names, escapes or values, samples before their
// TYPE, split families, repeated series) plus what makes a histogram invalid
// (non-cumulative buckets, no +Inf bucket, +Inf != _count).
#ifndef IDEMLEDGER_TESTS_PROMETHEUS_TEXT_HPP
#define IDEMLEDGER_TESTS_PROMETHEUS_TEXT_HPP

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace idemledger::testing {

// Series ("name{labels}" exactly as written, or "name") -> value text.
using PrometheusSamples = std::map<std::string, std::string>;

// An le bound as integer nanoseconds ("0.0025" -> 2500000; "+Inf" -> max).
// Plain decimals only, which is what idemledger writes.
inline std::optional<std::int64_t> le_nanos(const std::string& le) {
  if (le == "+Inf") return std::numeric_limits<std::int64_t>::max();
  static const std::regex kDecimal("([0-9]{1,9})(?:\\.([0-9]{1,9}))?");
  std::smatch m;
  if (!std::regex_match(le, m, kDecimal)) return std::nullopt;
  std::string fraction = m[2].str();
  fraction.resize(9, '0');
  return std::stoll(m[1].str()) * 1'000'000'000 + std::stoll(fraction);
}

inline absl::StatusOr<PrometheusSamples> parse_prometheus_text(std::string_view text) {
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kHelp("# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) ((?:[^\\\\\n]|\\\\[\\\\n])*)");
  static const std::regex kType(
      "# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)");
  static const std::regex kSample(
      "([a-zA-Z_:][a-zA-Z0-9_:]*)(\\{((?:[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\\\n]|\\\\[\\\\\"n])*\","
      "?)*)\\})?"
      " ([-+]?(?:[0-9]+(?:\\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|Inf|NaN))( -?[0-9]+)?");
  static const std::regex kLabel("([a-zA-Z_][a-zA-Z0-9_]*)=\"((?:[^\"\\\\]|\\\\.)*)\"");

  const auto fail = [](std::string_view line, std::string_view why) {
    return absl::InvalidArgumentError(std::string(why) + ": " + std::string(line));
  };
  if (!text.empty() && text.back() != '\n')
    return fail(text.substr(text.rfind('\n') + 1), "no final newline");

  PrometheusSamples samples;
  std::map<std::string, std::string> types;
  std::set<std::string> helped, finished_families;
  std::string current_family;
  // Histogram bookkeeping per (family, labels without le).
  std::map<std::string, std::pair<std::int64_t, std::uint64_t>> last_bucket;  // le, count
  std::map<std::string, std::uint64_t> inf_bucket;
  std::map<std::string, std::uint64_t> count;  // _count may come before or after the buckets

  const auto family_of = [&](const std::string& name) -> std::string {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (name.size() > s.size() && name.ends_with(s)) {
        const std::string base = name.substr(0, name.size() - s.size());
        if (types.contains(base) && types[base] == "histogram") return base;
      }
    }
    return name;
  };

  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::string line(text.substr(start, end - start));
    start = end + 1;
    std::smatch m;
    if (line.starts_with("# HELP ")) {
      if (!std::regex_match(line, m, kHelp)) return fail(line, "malformed HELP");
      if (!helped.insert(m[1]).second) return fail(line, "second HELP for a name");
      continue;
    }
    if (line.starts_with("# TYPE ")) {
      if (!std::regex_match(line, m, kType)) return fail(line, "malformed TYPE");
      if (types.contains(m[1])) return fail(line, "second TYPE for a name");
      for (const auto& [series, value] : samples) {
        if (family_of(series.substr(0, series.find('{'))) == m[1].str())
          return fail(line, "TYPE after the family's samples");
      }
      types[m[1]] = m[2];
      continue;
    }
    if (line.starts_with("#")) continue;  // other comments are allowed
    if (!std::regex_match(line, m, kSample)) return fail(line, "malformed sample");
    const std::string name = m[1];
    const std::string labels = m[3];
    const std::string value = m[4];
    const std::string family = family_of(name);
    if (!types.contains(family)) return fail(line, "sample without a TYPE for its family");
    if (family != current_family) {
      if (finished_families.contains(family)) return fail(line, "family split in two groups");
      if (!current_family.empty()) finished_families.insert(current_family);
      current_family = family;
    }
    const std::string series = m[2].matched ? name + "{" + labels + "}" : name;
    if (!samples.emplace(series, value).second) return fail(line, "repeated series");

    std::set<std::string> label_names;
    std::optional<std::string> le;
    std::string other_labels;
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), kLabel);
         it != std::sregex_iterator(); ++it) {
      if (!label_names.insert((*it)[1]).second) return fail(line, "repeated label name");
      if ((*it)[1] == "le") {
        le = (*it)[2];
      } else {
        other_labels += (*it)[0].str() + ",";
      }
    }
    if (types[family] == "counter" && value.starts_with("-")) return fail(line, "negative counter");
    if (types[family] != "histogram") continue;
    const std::string key = family + "{" + other_labels + "}";
    if (name == family + "_bucket") {
      if (!le) return fail(line, "bucket without le");
      const std::uint64_t n = std::stoull(value);
      const std::optional<std::int64_t> bound = le_nanos(*le);
      if (!bound) return fail(line, "le is not a plain decimal");
      auto [it, fresh] = last_bucket.try_emplace(key, *bound, n);
      if (!fresh) {
        if (*bound <= it->second.first) return fail(line, "buckets not in increasing le order");
        if (n < it->second.second) return fail(line, "buckets not cumulative");
        it->second = {*bound, n};
      }
      if (*le == "+Inf") inf_bucket[key] = n;
    } else if (name == family + "_count") {
      count[key] = std::stoull(value);
    }
  }
  for (const auto& [key, bucket] : last_bucket) {
    if (!inf_bucket.contains(key)) return fail(key, "histogram without a +Inf bucket");
  }
  for (const auto& [key, n] : count) {
    if (!inf_bucket.contains(key)) return fail(key, "_count without buckets");
    if (inf_bucket[key] != n) return fail(key, "+Inf bucket != _count");
  }
  return samples;
}

}  // namespace idemledger::testing

#endif  // IDEMLEDGER_TESTS_PROMETHEUS_TEXT_HPP
