#!/bin/sh
# First start: initdb with POSTGRES_USER as superuser (password POSTGRES_PASSWORD) and
# create POSTGRES_DB. Every start: postgres on 127.0.0.1:${PGPORT:-5432} (host network),
# then the arguments given, as the official image takes them ("postgres -c name=value
# ..."; a later -c wins): the harness and docker-compose.yml pass listen_addresses.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
: "${POSTGRES_DB:=$POSTGRES_USER}" "${PGPORT:=5432}"
export PGPORT
mkdir -p "$PGDATA" /var/run/postgresql
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/pwfile
    chown postgres /tmp/pwfile
    su postgres -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile=/tmp/pwfile \
        --auth-host=scram-sha-256 --auth-local=trust --encoding=UTF8 --locale=C.UTF-8" >/dev/null
    rm -f /tmp/pwfile
    if [ "$POSTGRES_DB" != postgres ]; then
        su postgres -c "postgres --single -D '$PGDATA' postgres" >/dev/null <<SQL
CREATE DATABASE "$POSTGRES_DB" OWNER "$POSTGRES_USER";
SQL
    fi
fi
if [ "${1:-}" = postgres ]; then shift; fi
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses=127.0.0.1 -p "$PGPORT" "$@"
