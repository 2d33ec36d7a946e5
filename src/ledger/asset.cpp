#include "idemledger/ledger/asset.hpp"

#include <fmt/format.h>

#include "idemledger/core/connection.hpp"
#include "idemledger/core/status.hpp"
#include "src/core/internal/absl_compat.hpp"
#include "src/core/internal/pinned.hpp"
#include "src/core/internal/text.hpp"
#include "src/ledger/internal/contract.hpp"
#include "src/ledger/internal/sqlstates.hpp"

namespace idemledger {
namespace {

bool is_chain(std::string_view chain) {
  const auto lower_or_digit = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (chain.empty() || chain.size() > 32 || !lower_or_digit(chain.front())) return false;
  for (char c : chain) {
    if (!lower_or_digit(c) && c != '_' && c != '-') return false;
  }
  return true;
}

constexpr std::string_view kColumns =
    "code, decimals, coalesce(chain, ''), coalesce(contract, ''), "
    "enabled, is_default FROM {schema}.assets";

absl::StatusOr<Asset> read_asset(const Row& row) {
  auto read = row.read<std::string, int, std::string, std::string, bool, bool>();
  if (!read.ok()) return read.status();
  auto& [code, decimals, chain, contract, enabled, is_default] = *read;
  absl::StatusOr<AssetCode> checked = AssetCode::create(code);
  if (!checked.ok())
    return absl::InternalError(fmt::format("assets: {}", checked.status().message()));
  return Asset{.code = *checked,
               .decimals = decimals,
               .chain = std::move(chain),
               .contract = std::move(contract),
               .enabled = enabled,
               .is_default = is_default};
}

}  // namespace

absl::StatusOr<AssetCode> AssetCode::create(std::string_view code) {
  if (!internal::is_asset_code(code)) {
    return absl::InvalidArgumentError(
        fmt::format("asset code must match [A-Z0-9][A-Z0-9._-]{{0,15}}, got {}",
                    internal::quoted_for_humans(code, 40)));
  }
  AssetCode c;
  c.assign(code);
  return c;
}

absl::Status Asset::admits(const Amount& amount) const {
  if (amount.fractional_digits() <= decimals) return absl::OkStatus();
  return absl::InvalidArgumentError(fmt::format("amount {} has {} decimal places; {} allows {}",
                                                amount.to_string(), amount.fractional_digits(),
                                                code.code(), decimals));
}

absl::StatusOr<Amount> Asset::from_base_units(std::string_view units) const {
  return Amount::from_base_units(units, decimals);
}

absl::Status add_asset(Connection& conn, const Schema& schema, const Asset& asset) {
  if (asset.decimals < 0 || asset.decimals > Amount::kScale) {
    return absl::InvalidArgumentError(
        fmt::format("asset {}: decimals must be 0..18, got {}", asset.code.code(), asset.decimals));
  }
  if (!asset.chain.empty() && !is_chain(asset.chain)) {
    return absl::InvalidArgumentError(
        fmt::format("asset {}: chain must match [a-z0-9][a-z0-9_-]{{0,31}}, got {}",
                    asset.code.code(), internal::quoted_for_humans(asset.chain, 40)));
  }
  if (asset.chain.empty() && !asset.contract.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("asset {}: a contract needs its chain", asset.code.code()));
  }
  absl::StatusOr<std::string> contract = internal::normalize_contract(asset.contract);
  if (!contract.ok()) return contract.status();
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      schema.qualify("INSERT INTO {schema}.assets (code, decimals, chain, contract, enabled) "
                     "VALUES ($1, $2::smallint, $3, $4, $5::boolean) ON CONFLICT DO NOTHING"),
      Params(asset.code.code(), asset.decimals, null_if_empty(asset.chain),
             null_if_empty(*contract), asset.enabled));
  // Keyed by its content: registering the same definition again is the same answer.
  if (!r.ok()) return mark_idempotent(internal::interpret_ledger_error(r.status()));
  if (r->affected_rows == 1) return absl::OkStatus();
  // Registered before (by code, or the chain and contract by another code):
  // the same definition is fine, anything else is named.
  absl::StatusOr<Asset> known = find_asset(conn, schema, asset.code);
  if (!known.ok() && known.status().code() != absl::StatusCode::kNotFound) return known.status();
  if (!known.ok()) {
    return absl::AlreadyExistsError(fmt::format(
        "asset {}: chain {} contract {} is registered under another code", asset.code.code(),
        asset.chain, asset.contract.empty() ? "(native)" : *contract));
  }
  if (known->decimals != asset.decimals || known->chain != asset.chain ||
      known->contract != *contract) {
    return absl::AlreadyExistsError(
        fmt::format("asset {} is registered with {} decimals, chain \"{}\", contract \"{}\"",
                    asset.code.code(), known->decimals, known->chain, known->contract));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Asset>> list_assets(Connection& conn, const Schema& schema) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn, schema.qualify(fmt::format("SELECT {} ORDER BY code", kColumns)));
  if (!r.ok()) return r.status();
  std::vector<Asset> assets;
  for (std::size_t i = 0; i < r->rows.size(); ++i) {
    absl::StatusOr<Asset> a = read_asset(r->row(i));
    if (!a.ok()) return a.status();
    assets.push_back(*std::move(a));
  }
  return assets;
}

absl::StatusOr<Asset> find_asset(Connection& conn, const Schema& schema, const AssetCode& code) {
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn, schema.qualify(fmt::format("SELECT {} WHERE code = $1", kColumns)),
      Params(code.code()));
  if (!r.ok()) return r.status();
  if (r->rows.empty()) return absl::NotFoundError(fmt::format("unknown asset {}", code.code()));
  return read_asset(r->row(0));
}

absl::Status set_asset_enabled(Connection& conn, const Schema& schema, const AssetCode& code,
                               bool enabled, std::string_view reason, std::string_view actor) {
  if (reason.empty() || actor.empty()) {
    return absl::InvalidArgumentError("an operator action requires a reason and an actor");
  }
  absl::StatusOr<Result> r = internal::execute_pinned(
      conn,
      schema.qualify("WITH changed AS (UPDATE {schema}.assets SET enabled = $2::boolean "
                     "WHERE code = $1 RETURNING code) "
                     "INSERT INTO {schema}.operator_actions (action, target, reason, actor) "
                     "SELECT CASE WHEN $2::boolean THEN 'asset_enable' ELSE 'asset_disable' END, "
                     "code, $3, $4 FROM changed"),
      Params(code.code(), enabled, reason, actor));
  // Not keyed: a retry would record the decision twice, so an in-doubt
  // answer goes back to the operator, who looks (assets list).
  if (!r.ok()) return r.status();
  if (r->affected_rows == 0)
    return absl::NotFoundError(fmt::format("unknown asset {}", code.code()));
  return absl::OkStatus();
}

}  // namespace idemledger
