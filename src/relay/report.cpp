#include "idemledger/relay/report.hpp"

#include "idemledger/core/connection.hpp"
#include "src/core/internal/pinned.hpp"

namespace idemledger {
namespace {

// Rows of (what, count, since) into counts.
absl::Status read_counts(const Result& r, std::vector<RelayReport::Count>& into) {
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const Row row = r.row(i);
    auto read = row.read<std::string, std::int64_t, std::optional<absl::Time>>();
    if (!read.ok()) return read.status();
    auto& [what, count, since] = *read;
    into.push_back({.what = std::move(what), .count = count, .since = since});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RelayReport> relay_report(Connection& conn, const Schema& schema) {
  RelayReport report;
  absl::StatusOr<Result> markers = internal::execute_pinned(
      conn,
      schema.qualify(
          "SELECT name, state, opened_at FROM {schema}.circuit_breakers WHERE name LIKE 'relay:%' "
          "ORDER BY name"));
  if (!markers.ok()) return markers.status();
  for (std::size_t i = 0; i < markers->rows.size(); ++i) {
    const Row row = markers->row(i);
    auto read = row.read<std::string, BreakerState, std::optional<absl::Time>>();
    if (!read.ok()) return read.status();
    auto& [name, state, opened] = *read;
    report.markers.push_back({.name = std::move(name), .state = state, .opened_at = opened});
  }

  absl::StatusOr<Result> totals = internal::execute_pinned(
      conn, schema.qualify(
                "SELECT (SELECT count(*) FROM {schema}.outbox "
                "         WHERE published_at IS NULL AND diverted_at IS NULL), "
                "       (SELECT min(created_at) FROM {schema}.outbox "
                "         WHERE published_at IS NULL AND diverted_at IS NULL), "
                "       (SELECT count(*) FROM {schema}.outbox WHERE published_at IS NOT NULL), "
                "       (SELECT count(*) FROM {schema}.relay_quarantine), "
                "       (SELECT min(quarantined_at) FROM {schema}.relay_quarantine)"));
  if (!totals.ok()) return totals.status();
  absl::StatusOr<Row> row = totals->single_row("relay totals");
  if (!row.ok()) return row.status();
  auto read = row->read<std::int64_t, std::optional<absl::Time>, std::int64_t, std::int64_t,
                        std::optional<absl::Time>>();
  if (!read.ok()) return read.status();
  auto& [undelivered, oldest, delivered, quarantined, quarantined_since] = *read;
  report.outbox_undelivered = undelivered;
  report.oldest_undelivered = oldest;
  report.outbox_delivered = delivered;
  report.quarantined = quarantined;
  report.quarantined_since = quarantined_since;

  absl::StatusOr<Result> letters = internal::execute_pinned(
      conn, schema.qualify("SELECT coalesce(resolution, 'open'), count(*), min(first_dlq_at) "
                           "FROM {schema}.relay_dead_letters GROUP BY resolution ORDER BY 1"));
  if (!letters.ok()) return letters.status();
  if (absl::Status s = read_counts(*letters, report.dead_letters); !s.ok()) return s;
  absl::StatusOr<Result> dropped = internal::execute_pinned(
      conn, schema.qualify(
                "SELECT drop_reason, count(*), NULL::timestamptz FROM {schema}.relay_dead_letters "
                "WHERE resolution = 'dropped' GROUP BY drop_reason ORDER BY 2 DESC, 1"));
  if (!dropped.ok()) return dropped.status();
  if (absl::Status s = read_counts(*dropped, report.dropped_by_reason); !s.ok()) return s;
  return report;
}

absl::StatusOr<std::vector<RelayDeadLetter>> list_relay_dead_letters(Connection& conn,
                                                                     const Schema& schema,
                                                                     int limit) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      schema.qualify("SELECT id, outbox_id, topic, dlq_retries, first_dlq_at, reason, resolution, "
                     "drop_reason FROM {schema}.relay_dead_letters "
                     "WHERE resolution IS DISTINCT FROM 'delivered' "
                     "ORDER BY resolution NULLS FIRST, id DESC LIMIT $1::bigint"),
      Params(limit));
  if (!r.ok()) return r.status();
  std::vector<RelayDeadLetter> out;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    const Row row = r->row(i);
    auto read = row.read<std::int64_t, std::int64_t, std::string, int, absl::Time, std::string,
                         std::optional<std::string>, std::optional<std::string>>();
    if (!read.ok()) return read.status();
    auto& [id, outbox_id, topic, retries, first, reason, resolution, drop_reason] = *read;
    out.push_back({.id = id,
                   .outbox_id = outbox_id,
                   .topic = std::move(topic),
                   .dlq_retries = retries,
                   .first_dlq_at = first,
                   .reason = std::move(reason),
                   .resolution = std::move(resolution),
                   .drop_reason = std::move(drop_reason)});
  }
  return out;
}

}  // namespace idemledger
