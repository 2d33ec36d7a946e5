# Sourced by the scripts that start the example services.
# logged_port LOG WHAT: the port a service logged in its
# '{"msg":"<WHAT>",...,"port":N}' line (either key order), waiting up to 10 s;
# fails, showing the log, if the line never comes.
logged_port() {
  local log=$1 what=$2 p=""
  for _ in $(seq 1 100); do
    p=$(sed -n "s/.*\"msg\":\"$what\".*\"port\":\([0-9]*\).*/\1/p; s/.*\"port\":\([0-9]*\).*\"msg\":\"$what\".*/\1/p" "$log" | head -n 1)
    [[ -n "$p" ]] && { echo "$p"; return; }
    sleep 0.1
  done
  echo "$log: no \"$what\" line:" >&2; cat "$log" >&2; exit 1
}
