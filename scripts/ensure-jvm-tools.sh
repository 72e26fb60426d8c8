#!/usr/bin/env bash
# Makes sure Java (17+) and Maven are on PATH: the Kafka broker, Kafka Connect and Spark's Kafka
# connector are resolved from Maven Central with them. Installs them with apt-get when missing and
# allowed (root on Debian/Ubuntu); otherwise says what to install. Also installs the PostgreSQL
# server (Debian's `postgresql`, for change data capture) and Graphviz (Debian's `graphviz`, whose
# `dot` draws `streamtable describe --format svg`) the same way; when they cannot be installed,
# only a note is printed: everything but CDC and SVG pictures works without them.
set -euo pipefail
missing=()
if ! command -v java >/dev/null 2>&1; then missing+=(openjdk-17-jre-headless); fi
if ! command -v mvn >/dev/null 2>&1; then missing+=(maven); fi
have_postgres() {
  [ -n "${STREAMTABLE_POSTGRES_BINDIR:-}" ] && return 0
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && return 0
  done
  command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1
}
optional=()
if ! have_postgres; then optional+=(postgresql); fi
if ! command -v dot >/dev/null 2>&1; then optional+=(graphviz); fi
[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} ${optional[*]} with apt-get" >&2
  apt-get update -q >/dev/null
  if [[ " ${optional[*]} " == *" postgresql "* ]]; then
    # streamtable runs initdb into folders of its own: keep the package from creating (and
    # starting, on port 5432) a system cluster of its own
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-common >/dev/null
    conf=/etc/postgresql-common/createcluster.conf
    if [ -f "$conf" ] && ! grep -q '^create_main_cluster' "$conf"; then
      echo 'create_main_cluster = false' >> "$conf"
    fi
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" "${optional[@]}" >/dev/null
elif [ ${#missing[@]} -gt 0 ]; then
  echo "streamtable needs Java 17+ and Maven on PATH; please install: ${missing[*]}" >&2
  exit 1
else
  if [[ " ${optional[*]} " == *" postgresql "* ]]; then
    echo "note: the PostgreSQL server is not installed; change data capture (streamtable" \
      "postgres, the postgres test fixture) needs it: apt-get install postgresql" >&2
  fi
  if [[ " ${optional[*]} " == *" graphviz "* ]]; then
    echo "note: Graphviz is not installed; streamtable describe --format svg (and its tests)" \
      "need its dot: apt-get install graphviz" >&2
  fi
fi
