// idemledger/core/params.hpp — values bound to a statement's $1, $2, ...
//
// Every value reaches PostgreSQL as a bound text parameter, never spliced
// into SQL. Params turns typed values into those texts once, at the call:
//
//   conn.execute(schema.qualify("SELECT {schema}.claim_events($1::int, $2::bigint)"),
//                Params(batch_size, lease));   // an int, and a Duration as milliseconds
//
// Conversions: strings are viewed (an rvalue string is kept); integers in
// decimal; bool as true/false; Amount canonically; absl::Duration as whole
// milliseconds (as an interval: $n::double precision * interval
// '1 millisecond', pg_catalog's exact operator; bigint * interval has none,
// so a schema on the caller's search_path could supply one);
// std::nullopt and an empty std::optional as NULL (null_if_empty: "" too).
//
// Params is a value type meant to live for one call; thread-compatible. So is
// ArrayText, which builds one array parameter (below).
#ifndef IDEMLEDGER_CORE_PARAMS_HPP
#define IDEMLEDGER_CORE_PARAMS_HPP

#include <array>
#include <charconv>
#include <concepts>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "absl/time/time.h"
#include "idemledger/core/amount.hpp"

namespace idemledger {

// A bound text parameter; nullopt is SQL NULL.
using Param = std::optional<std::string_view>;

// For optional text where "" means "none": the empty string as NULL.
inline Param null_if_empty(std::string_view v) { return v.empty() ? Param() : Param(v); }

namespace internal {

// The text of one value; `storage` keeps it alive when it is not a view.
inline Param bind_text(std::string_view v, std::string&) { return v; }
inline Param bind_text(const std::string& v, std::string&) { return std::string_view(v); }
inline Param bind_text(const char* v, std::string&) { return std::string_view(v); }
inline Param bind_text(std::string&& v, std::string& storage) {
  storage = std::move(v);
  return std::string_view(storage);
}
inline Param bind_text(const Param& v, std::string&) { return v; }
inline Param bind_text(std::nullopt_t, std::string&) { return std::nullopt; }
inline Param bind_text(bool v, std::string&) { return v ? "true" : "false"; }
template <std::integral T>
requires(!std::same_as<T, bool>) Param bind_text(T v, std::string& storage) {
  char buffer[24];
  const auto end = std::to_chars(buffer, buffer + sizeof buffer, v).ptr;
  storage.assign(buffer, end);
  return std::string_view(storage);
}
inline Param bind_text(const Amount& v, std::string& storage) {
  storage = v.to_string();
  return std::string_view(storage);
}
inline Param bind_text(absl::Duration v, std::string& storage) {
  return bind_text(absl::ToInt64Milliseconds(v), storage);
}
template <typename T>
Param bind_text(const std::optional<T>& v, std::string& storage) {
  if (!v) return std::nullopt;
  return bind_text(*v, storage);
}

}  // namespace internal

template <std::size_t N>
class Params {
 public:
  template <typename... Ts>
  requires(sizeof...(Ts) == N) explicit Params(Ts&&... values) {
    std::size_t i = 0;
    ((views_[i] = internal::bind_text(std::forward<Ts>(values), storage_[i]), ++i), ...);
  }
  Params(const Params&) = delete;  // views may point into storage_
  Params& operator=(const Params&) = delete;

  operator std::span<const Param>() const { return views_; }  // NOLINT(google-explicit-constructor)
  [[nodiscard]] std::span<const Param> span() const { return views_; }

 private:
  std::array<std::string, N> storage_;
  std::array<Param, N> views_;
};

template <typename... Ts>
Params(Ts&&...) -> Params<sizeof...(Ts)>;

// ArrayText
//
// The text of a one-dimensional array parameter, for $n::text[],
// $n::bigint[], $n::numeric[] ...: each element converted as Params converts
// it, double-quoted with backslash and quote escaped (so any text, commas
// and braces included, stays one element), NULL unquoted.
//
//   ArrayText ids;
//   for (const auto& e : events) ids.add(e.event_id);
//   conn.execute("... WHERE event_id = ANY($1::text[])", Params(std::move(ids).finish()));
class ArrayText {
 public:
  ArrayText() : text_("{") {}
  void reserve(std::size_t bytes) { text_.reserve(bytes); }

  template <typename T>
  void add(const T& value) {
    if (text_.size() > 1) text_ += ',';
    const Param v = internal::bind_text(value, scratch_);
    if (!v) {
      text_ += "NULL";
      return;
    }
    text_ += '"';
    for (const char c : *v) {
      if (c == '"' || c == '\\') text_ += '\\';
      text_ += c;
    }
    text_ += '"';
  }

  // The literal, closed; the builder is spent.
  [[nodiscard]] std::string finish() && {
    text_ += '}';
    return std::move(text_);
  }

 private:
  std::string text_;
  std::string scratch_;  // one element's text when it is not a view
};

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_PARAMS_HPP
