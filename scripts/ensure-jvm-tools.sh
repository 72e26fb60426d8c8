#!/usr/bin/env bash
# Makes sure Java (17+) and Maven are on PATH: the Kafka broker and Spark's Kafka connector are
# resolved from Maven Central with them. Installs them with apt-get when missing and allowed
# (root on Debian/Ubuntu); otherwise says what to install.
set -euo pipefail
missing=()
if ! command -v java >/dev/null 2>&1; then missing+=(openjdk-17-jre-headless); fi
if ! command -v mvn >/dev/null 2>&1; then missing+=(maven); fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
else
  echo "streamtable needs Java 17+ and Maven on PATH; please install: ${missing[*]}" >&2
  exit 1
fi
