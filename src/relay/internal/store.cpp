#include "src/relay/internal/store.hpp"

#include <algorithm>
#include <chrono>

#include "src/core/internal/pinned.hpp"

namespace idemledger::internal {
namespace {

// When a claim about to be sent ends, by both of this process's clocks:
// taken before the server's now(), so never after the lease it grants.
struct ClaimEnds {
  absl::Time wall;
  std::chrono::steady_clock::time_point steady;
};
ClaimEnds claim_ends(absl::Duration lease) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  // An infinite lease (or one past the clock's range) never ends.
  const auto d = std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(lease));
  return {.wall = absl::Now() + lease,
          .steady = d >= Clock::time_point::max() - now ? Clock::time_point::max() : now + d};
}

}  // namespace

RelayStore::RelayStore(const Schema& schema)
    : snapshot_(schema.qualify(
          R"sql(SELECT EXISTS (SELECT 1 FROM {schema}.relay_dead_letters d
                                WHERE d.resolution IS NULL AND d.next_attempt_at <= now()),
                       EXISTS (SELECT 1 FROM {schema}.outbox o
                                WHERE o.published_at IS NULL AND o.diverted_at IS NULL
                                  AND (o.claimed_until IS NULL OR o.claimed_until < now())),
                       (SELECT b.state FROM {schema}.circuit_breakers b WHERE b.name = $1))sql")),
      claim_outbox_(schema.qualify(
          R"sql(UPDATE {schema}.outbox o
                   SET claimed_by = $1, claimed_until = now() + $2::double precision * interval '1 millisecond'
                 WHERE o.id IN (SELECT c.id FROM {schema}.outbox c
                                 WHERE c.published_at IS NULL AND c.diverted_at IS NULL
                                   AND (c.claimed_until IS NULL OR c.claimed_until < now())
                                 ORDER BY c.id LIMIT $3::int FOR UPDATE SKIP LOCKED)
             RETURNING o.id, o.topic, o.payload::text)sql")),
      claim_dead_letters_(schema.qualify(
          R"sql(UPDATE {schema}.relay_dead_letters d
                   SET claimed_by = $1, claimed_until = now() + $2::double precision * interval '1 millisecond'
                 WHERE d.id IN (SELECT c.id FROM {schema}.relay_dead_letters c
                                 WHERE c.resolution IS NULL AND c.next_attempt_at <= now()
                                   AND (c.claimed_until IS NULL OR c.claimed_until < now())
                                 ORDER BY c.next_attempt_at, c.id LIMIT $3::int
                                 FOR UPDATE SKIP LOCKED)
             RETURNING d.outbox_id, d.topic, d.message::text, d.id, d.dlq_retries,
                       (extract(epoch FROM now() - d.first_dlq_at) * 1000.0)::bigint, d.reason)sql")),
      // A delivery's mark, one per message: written with pg_catalog's names
      // rather than pinned (execute_pinned's extra statement cost the
      // relay ~6% of its deliveries per second), so no search_path picks
      // anything in it.
      delivered_from_outbox_(schema.qualify(
          R"sql(UPDATE {schema}.outbox o SET published_at = pg_catalog.now(), claimed_until = NULL
                 WHERE o.id OPERATOR(pg_catalog.=) $1::bigint
                   AND o.claimed_by OPERATOR(pg_catalog.=) $2
                   AND o.published_at IS NULL AND o.diverted_at IS NULL)sql")),
      delivered_from_dead_letters_(schema.qualify(
          R"sql(WITH letter AS (
                  UPDATE {schema}.relay_dead_letters d
                     SET resolution = 'delivered', resolved_at = pg_catalog.now(),
                         claimed_until = NULL
                   WHERE d.id OPERATOR(pg_catalog.=) $1::bigint
                     AND d.claimed_by OPERATOR(pg_catalog.=) $2 AND d.resolution IS NULL
               RETURNING d.outbox_id)
                UPDATE {schema}.outbox o SET published_at = pg_catalog.now()
                  FROM letter WHERE o.id OPERATOR(pg_catalog.=) letter.outbox_id)sql")),
      // Off the outbox and into an envelope in one statement: a row is in
      // exactly one place. $5 set: the letter is born dropped with that reason.
      dead_letter_from_outbox_(schema.qualify(
          R"sql(WITH moved AS (
                  UPDATE {schema}.outbox o SET diverted_at = now(), claimed_until = NULL
                   WHERE o.id = $1::bigint AND o.claimed_by = $2
                     AND o.published_at IS NULL AND o.diverted_at IS NULL
               RETURNING o.id, o.topic, o.payload)
                INSERT INTO {schema}.relay_dead_letters
                       (outbox_id, topic, message, dlq_retries, reason, next_attempt_at,
                        resolution, drop_reason, resolved_at)
                SELECT m.id, m.topic, m.payload, 1, $3,
                       now() + $4::double precision * interval '1 millisecond',
                       CASE WHEN $5::text IS NOT NULL THEN 'dropped' END, $5::text,
                       CASE WHEN $5::text IS NOT NULL THEN now() END
                  FROM moved m)sql")),
      // dlq_retries grows by the write itself; past the budget ($5, NULL for
      // none) the letter is dropped by the same statement.
      dead_letter_again_(schema.qualify(
          R"sql(UPDATE {schema}.relay_dead_letters d
                   SET dlq_retries = d.dlq_retries + 1, last_dlq_at = now(), reason = $3,
                       next_attempt_at = now() + $4::double precision * interval '1 millisecond',
                       claimed_by = NULL, claimed_until = NULL,
                       resolution = CASE WHEN d.dlq_retries + 1 > $5::int THEN 'dropped' END,
                       drop_reason = CASE WHEN d.dlq_retries + 1 > $5::int
                                          THEN 'max_retries_exceeded' END,
                       resolved_at = CASE WHEN d.dlq_retries + 1 > $5::int THEN now() END
                 WHERE d.id = $1::bigint AND d.claimed_by = $2 AND d.resolution IS NULL
             RETURNING d.resolution IS NOT NULL)sql")),
      drop_dead_letter_(schema.qualify(
          R"sql(UPDATE {schema}.relay_dead_letters d
                   SET resolution = 'dropped', drop_reason = $3, resolved_at = now(),
                       claimed_until = NULL
                 WHERE d.id = $1::bigint AND d.claimed_by = $2 AND d.resolution IS NULL)sql")),
      quarantine_(schema.qualify(
          R"sql(WITH moved AS (
                  UPDATE {schema}.outbox o SET diverted_at = now(), claimed_until = NULL
                   WHERE o.id = $1::bigint AND o.claimed_by = $2
                     AND o.published_at IS NULL AND o.diverted_at IS NULL
               RETURNING o.id, o.topic, o.payload)
                INSERT INTO {schema}.relay_quarantine (outbox_id, topic, message, reason)
                SELECT m.id, m.topic, m.payload, $3 FROM moved m)sql")),
      release_outbox_(schema.qualify("UPDATE {schema}.outbox o SET claimed_until = NULL "
                                     "WHERE o.id = ANY($1::bigint[]) AND o.claimed_by = $2")),
      release_dead_letters_(schema.qualify(
          "UPDATE {schema}.relay_dead_letters d SET claimed_until = NULL "
          "WHERE d.id = ANY($1::bigint[]) AND d.claimed_by = $2 AND d.resolution IS NULL")) {}

absl::StatusOr<RelayStore::Snapshot> RelayStore::snapshot(Connection& conn,
                                                          std::string_view marker_name) const {
  absl::StatusOr<Result> r = execute_pinned(conn, snapshot_, Params(marker_name));
  if (!r.ok()) return r.status();
  absl::StatusOr<Row> row = r->single_row("relay snapshot");
  if (!row.ok()) return row.status();
  auto read = row->read<bool, bool, std::optional<BreakerState>>();
  if (!read.ok()) return read.status();
  auto& [due, waiting, marker] = *read;
  return Snapshot{.due_dead_letters = due, .outbox_waiting = waiting, .marker = marker};
}

absl::StatusOr<std::vector<RelayMessage>> RelayStore::claim_outbox(Connection& conn,
                                                                   std::string_view owner,
                                                                   absl::Duration lease,
                                                                   int limit) const {
  const ClaimEnds ends = claim_ends(lease);  // taken before the server's now()
  absl::StatusOr<Result> r = execute_pinned(conn, claim_outbox_, Params(owner, lease, limit));
  if (!r.ok()) return r.status();
  std::vector<RelayMessage> messages;
  messages.reserve(r->rows.size());
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    const Row row = r->row(i);
    auto read = row.read<std::int64_t, std::string, std::string>();
    if (!read.ok()) return read.status();
    auto& [id, topic, payload] = *read;
    messages.push_back({.outbox_id = id,
                        .topic = std::move(topic),
                        .payload = std::move(payload),
                        .claimed_until = ends.wall,
                        .claim_ends = ends.steady});
  }
  std::sort(messages.begin(), messages.end(),
            [](const RelayMessage& a, const RelayMessage& b) { return a.outbox_id < b.outbox_id; });
  return messages;
}

absl::StatusOr<std::vector<RelayMessage>> RelayStore::claim_dead_letters(Connection& conn,
                                                                         std::string_view owner,
                                                                         absl::Duration lease,
                                                                         int limit) const {
  const ClaimEnds ends = claim_ends(lease);  // taken before the server's now()
  absl::StatusOr<Result> r = execute_pinned(conn, claim_dead_letters_, Params(owner, lease, limit));
  if (!r.ok()) return r.status();
  std::vector<RelayMessage> messages;
  messages.reserve(r->rows.size());
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    const Row row = r->row(i);
    auto read = row.read<std::int64_t, std::string, std::string, std::int64_t, int, std::int64_t,
                         std::string>();
    if (!read.ok()) return read.status();
    auto& [outbox_id, topic, payload, letter_id, retries, age_ms, reason] = *read;
    messages.push_back({.outbox_id = outbox_id,
                        .topic = std::move(topic),
                        .payload = std::move(payload),
                        .dead_letter_id = letter_id,
                        .dlq_retries = retries,
                        .since_first_dlq = absl::Milliseconds(age_ms),
                        .reason = std::move(reason),
                        .claimed_until = ends.wall,
                        .claim_ends = ends.steady});
  }
  return messages;
}

absl::StatusOr<bool> RelayStore::mark_delivered(Connection& conn, const RelayMessage& m,
                                                std::string_view owner) const {
  absl::StatusOr<Result> r =
      m.from_dead_letters()
          ? conn.execute(delivered_from_dead_letters_, Params(m.dead_letter_id, owner))
          : conn.execute(delivered_from_outbox_, Params(m.outbox_id, owner));
  if (!r.ok()) return r.status();
  return r->affected_rows > 0;
}

absl::StatusOr<bool> RelayStore::divert(Connection& conn, const RelayMessage& m,
                                        std::string_view owner, std::string_view reason,
                                        absl::Duration backoff,
                                        std::optional<std::string_view> dropped_reason) const {
  absl::StatusOr<Result> r =
      execute_pinned(conn, dead_letter_from_outbox_,
                     Params(m.outbox_id, owner, reason, backoff,
                            dropped_reason ? Param(*dropped_reason) : Param()));
  if (!r.ok()) return r.status();
  return r->affected_rows > 0;
}

absl::StatusOr<std::optional<bool>> RelayStore::dead_letter(Connection& conn, const RelayMessage& m,
                                                            std::string_view owner,
                                                            std::string_view reason,
                                                            absl::Duration backoff,
                                                            std::optional<int> budget) const {
  if (!m.from_dead_letters()) {
    // The first letter has dlq_retries 1: over a budget of 0 it is born dropped.
    const bool over_budget = budget && *budget < 1;
    absl::StatusOr<bool> moved =
        divert(conn, m, owner, reason, backoff,
               over_budget ? std::optional<std::string_view>(kDropMaxRetries) : std::nullopt);
    if (!moved.ok()) return moved.status();
    if (!*moved) return std::optional<bool>();
    return std::optional<bool>(over_budget);
  }
  absl::StatusOr<Result> r = execute_pinned(
      conn, dead_letter_again_, Params(m.dead_letter_id, owner, reason, backoff, budget));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return std::optional<bool>();
  absl::StatusOr<bool> dropped = r->row(0).get<bool>(0);
  if (!dropped.ok()) return dropped.status();
  return std::optional<bool>(*dropped);
}

absl::StatusOr<bool> RelayStore::drop(Connection& conn, const RelayMessage& m,
                                      std::string_view owner, std::string_view reason) const {
  if (!m.from_dead_letters()) {
    // Straight from the outbox: kept as a letter born dropped, for audit.
    return divert(conn, m, owner, reason, absl::ZeroDuration(), reason);
  }
  absl::StatusOr<Result> r =
      execute_pinned(conn, drop_dead_letter_, Params(m.dead_letter_id, owner, reason));
  if (!r.ok()) return r.status();
  return r->affected_rows > 0;
}

absl::StatusOr<bool> RelayStore::quarantine(Connection& conn, const RelayMessage& m,
                                            std::string_view owner, std::string_view reason) const {
  absl::StatusOr<Result> r = execute_pinned(conn, quarantine_, Params(m.outbox_id, owner, reason));
  if (!r.ok()) return r.status();
  return r->affected_rows > 0;
}

absl::Status RelayStore::release(Connection& conn, std::span<const RelayMessage> messages,
                                 std::string_view owner) const {
  std::string outbox_ids;
  std::string letter_ids;
  for (const RelayMessage& m : messages) {
    std::string& ids = m.from_dead_letters() ? letter_ids : outbox_ids;
    ids += ids.empty() ? "{" : ",";
    ids += std::to_string(m.from_dead_letters() ? m.dead_letter_id : m.outbox_id);
  }
  for (const auto& [ids, sql] :
       {std::pair{&outbox_ids, &release_outbox_}, std::pair{&letter_ids, &release_dead_letters_}}) {
    if (ids->empty()) continue;
    if (absl::StatusOr<Result> r = execute_pinned(conn, *sql, Params(*ids + "}", owner)); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace idemledger::internal
