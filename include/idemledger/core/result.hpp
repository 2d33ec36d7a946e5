// idemledger/core/result.hpp — what a statement returned, read through types.
//
// Values arrive as text (NULL = nullopt). They are turned into C++ values
// once, at this edge, and a value that does not read as the type asked for
// is an error naming the column — never a silent 0:
//
//   absl::StatusOr<Row> row = result.single_row("claim_events");
//   absl::StatusOr<std::int64_t> user = row->get<std::int64_t>(1);
//   absl::StatusOr<EventStatus> status = row->get<EventStatus>(2);   // any named enum
//   absl::StatusOr<std::optional<std::string>> trace = row->get_optional<std::string>(3);
//
// Supported types: std::string, std::int64_t, int, bool (t/f), Amount (any
// NUMERIC(38,18), signed), absl::Time (timestamptz text), and every enum with
// a name table (enum_names.hpp). A mismatch is kInternal: the server and this
// library disagree about a column, which no retry fixes.
//
// Result and Row are value types; thread-compatible.
#ifndef IDEMLEDGER_CORE_RESULT_HPP
#define IDEMLEDGER_CORE_RESULT_HPP

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "idemledger/core/amount.hpp"
#include "idemledger/core/enum_names.hpp"

namespace idemledger {

class Row;

// The rows of one statement as text (NULL = nullopt), their column names
// when the driver reports them, and the rows an INSERT/UPDATE/DELETE touched.
struct Result {
  std::vector<std::string> columns;
  std::vector<std::vector<std::optional<std::string>>> rows;
  std::int64_t affected_rows = 0;

  // The raw value at (row, column); REQUIRES: both in range.
  [[nodiscard]] const std::optional<std::string>& at(std::size_t row, std::size_t column) const {
    return rows[row][column];
  }
  // Row `i`; REQUIRES: i < rows.size().
  [[nodiscard]] Row row(std::size_t i) const;
  // The one row a statement must return; kInternal naming `what` otherwise.
  [[nodiscard]] absl::StatusOr<Row> single_row(std::string_view what) const;
};

namespace internal {
// The readers behind Row::get<T>: false if `text` is not a T.
bool read_value(std::string_view text, std::string& out);
bool read_value(std::string_view text, std::int64_t& out);
bool read_value(std::string_view text, int& out);
bool read_value(std::string_view text, bool& out);
bool read_value(std::string_view text, Amount& out);
bool read_value(std::string_view text, absl::Time& out);
}  // namespace internal

class Row {
 public:
  Row(const Result& result, std::size_t index) : result_(&result), index_(index) {}

  [[nodiscard]] std::size_t size() const { return result_->rows[index_].size(); }
  [[nodiscard]] bool is_null(std::size_t column) const;

  // get<T>()
  //
  // The value of `column` as a T; kInternal naming the column if it is NULL,
  // missing or not a T.
  template <typename T>
  [[nodiscard]] absl::StatusOr<T> get(std::size_t column) const {
    absl::StatusOr<std::optional<T>> v = get_optional<T>(column);
    if (!v.ok()) return v.status();
    if (!*v) return unreadable(column, "a value, got NULL");
    return **v;
  }

  // get_optional<T>()
  //
  // As get<T>(), but NULL is nullopt rather than an error.
  template <typename T>
  [[nodiscard]] absl::StatusOr<std::optional<T>> get_optional(std::size_t column) const {
    if (column >= size()) return unreadable(column, "a column that exists");
    const std::optional<std::string>& text = result_->rows[index_][column];
    if (!text) return std::optional<T>();
    if constexpr (NamedEnum<T>) {
      if (std::optional<T> e = enum_names(T{}).parse(*text)) return e;
      return unreadable(column, "a known name", *text);
    } else {
      T value{};
      if (!internal::read_value(*text, value)) return unreadable(column, type_name<T>(), *text);
      return std::optional<T>(std::move(value));
    }
  }

  // read<Ts...>()
  //
  // Columns 0, 1, ... as the types given, all or nothing: the first column
  // that does not read is the error. A std::optional<T> type reads a
  // NULL-able column.
  //   absl::StatusOr<std::tuple<std::int64_t, std::string, std::optional<std::string>>> r =
  //       row.read<std::int64_t, std::string, std::optional<std::string>>();
  template <typename... Ts>
  [[nodiscard]] absl::StatusOr<std::tuple<Ts...>> read() const {
    return read_columns<Ts...>(std::index_sequence_for<Ts...>());
  }

  // The column's name as the driver reported it, else "#<index>".
  [[nodiscard]] std::string column_name(std::size_t column) const;

 private:
  template <typename T>
  struct Optional : std::false_type {};
  template <typename T>
  struct Optional<std::optional<T>> : std::true_type {
    using type = T;
  };
  template <typename T>
  absl::Status read_column(std::size_t column, T& out) const {
    if constexpr (Optional<T>::value) {
      absl::StatusOr<T> v = get_optional<typename Optional<T>::type>(column);
      if (!v.ok()) return v.status();
      out = *std::move(v);
    } else {
      absl::StatusOr<T> v = get<T>(column);
      if (!v.ok()) return v.status();
      out = *std::move(v);
    }
    return absl::OkStatus();
  }
  template <typename... Ts, std::size_t... I>
  absl::StatusOr<std::tuple<Ts...>> read_columns(std::index_sequence<I...>) const {
    std::tuple<Ts...> out;
    absl::Status error;
    ((error.ok() ? error = read_column(I, std::get<I>(out)) : error), ...);
    if (!error.ok()) return error;
    return out;
  }

  template <typename T>
  static constexpr std::string_view type_name() {
    if constexpr (std::is_same_v<T, std::string>) return "text";
    if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, int>) return "an integer";
    if constexpr (std::is_same_v<T, bool>) return "a boolean";
    if constexpr (std::is_same_v<T, Amount>) return "a NUMERIC(38,18) amount";
    if constexpr (std::is_same_v<T, absl::Time>) return "a timestamp";
    return "a value";
  }
  absl::Status unreadable(std::size_t column, std::string_view expected,
                          std::string_view got = {}) const;

  const Result* result_;
  std::size_t index_;
};

inline Row Result::row(std::size_t i) const { return Row(*this, i); }

// read_single<T>()
//
// The first column of the one row a statement returns, as a T: what scalar
// queries and server-side functions answer. kInternal naming `what` otherwise.
template <typename T>
[[nodiscard]] absl::StatusOr<T> read_single(const Result& result, std::string_view what) {
  absl::StatusOr<Row> row = result.single_row(what);
  if (!row.ok()) return row.status();
  return row->get<T>(0);
}

}  // namespace idemledger

#endif  // IDEMLEDGER_CORE_RESULT_HPP
