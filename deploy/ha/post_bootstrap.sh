#!/bin/sh
# Patroni runs this once, on the node that initialises the cluster (bootstrap.post_bootstrap
# in patroni.yml), with a superuser connection string as its argument (the password in the
# pgpass file Patroni names in PGPASSFILE): the service's role and its database, as
# `loyalty migrate` expects them (docs/deployment.md, PostgreSQL). The role's password comes
# from the file LOYALTY_DB_PASSWORD_FILE names (a compose secret: its one line), else from
# LOYALTY_DB_PASSWORD in Patroni's environment; it never reaches a command line.
set -eu
if [ -n "${LOYALTY_DB_PASSWORD_FILE:-}" ]; then
  LOYALTY_DB_PASSWORD=$(cat "$LOYALTY_DB_PASSWORD_FILE")  # its end of line dropped
  export LOYALTY_DB_PASSWORD
fi
if [ -z "${LOYALTY_DB_PASSWORD:-}" ]; then
  echo "post_bootstrap.sh: neither LOYALTY_DB_PASSWORD_FILE nor LOYALTY_DB_PASSWORD is set in Patroni's environment" >&2
  exit 1
fi
psql "$1" --no-psqlrc -v ON_ERROR_STOP=1 --quiet <<'SQL'
\getenv password LOYALTY_DB_PASSWORD
CREATE ROLE loyalty LOGIN PASSWORD :'password';
CREATE DATABASE loyalty OWNER loyalty;
SQL
