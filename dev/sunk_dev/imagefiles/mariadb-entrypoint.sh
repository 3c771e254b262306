#!/bin/sh
# sunk-mariadb's entrypoint (docs/images.md): MariaDB's server for a SlurmCluster's slurmdbd, run as the
# image's unprivileged user. On an empty datadir it makes the system tables; on every start it makes sure the
# database and its user exist with the password of the mounted Secret's file (a changed Secret takes effect
# at the next start), through an init file in the container's own /tmp, never the environment or the command
# line. Then MariaDB in the foreground on 0.0.0.0:3306.
#   MARIADB_DATABASE, MARIADB_USER: plain names ([A-Za-z0-9_]); MARIADB_PASSWORD_FILE: the password's file;
#   MARIADB_DATADIR: default /var/lib/mysql/data (a directory under the volume: never the volume's lost+found).
# Arguments are passed on to mariadbd. (--force: install without resolving the host name, which a Pod
# without cluster DNS cannot; --skip-name-resolve makes the grants by address anyway.)
set -eu
umask 077

fail() {
  echo "sunk-mariadb: $*" >&2
  exit 1
}

datadir=${MARIADB_DATADIR:-/var/lib/mysql/data}
database=${MARIADB_DATABASE:-}
user=${MARIADB_USER:-}
password_file=${MARIADB_PASSWORD_FILE:-}
for name in "$database" "$user"; do
  case $name in
    '' | *[!A-Za-z0-9_]*) fail "MARIADB_DATABASE and MARIADB_USER must be plain names ([A-Za-z0-9_]), got '$name'" ;;
  esac
done
[ -n "$password_file" ] && [ -r "$password_file" ] || fail "MARIADB_PASSWORD_FILE must name a readable file"
password=$(cat "$password_file")
# The password goes into a quoted SQL string and slurmdbd.conf: no blank, quote, #, backslash, newline or
# non-ASCII byte (a newline is mapped to x first: the command substitution would drop it as trailing).
bad=$(printf '%s' "$password" | tr -d '\041\044-\046\050-\133\135-\176' | tr '\n' x)
[ -n "$password" ] && [ -z "$bad" ] ||
  fail "the password in $password_file is empty or has a blank, quote, #, backslash, newline or non-ASCII character"

if [ ! -d "$datadir/mysql" ]; then
  mkdir -p "$datadir"
  mariadb-install-db --no-defaults --datadir="$datadir" --auth-root-authentication-method=socket \
    --skip-test-db --skip-name-resolve --force >&2
fi

init=$(mktemp "${TMPDIR:-/tmp}/sunk-mariadb-init.XXXXXX")
cat >"$init" <<SQL
CREATE DATABASE IF NOT EXISTS \`$database\`;
CREATE USER IF NOT EXISTS '$user'@'%' IDENTIFIED BY '$password';
ALTER USER '$user'@'%' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON \`$database\`.* TO '$user'@'%';
SQL

exec mariadbd --no-defaults --datadir="$datadir" --bind-address=0.0.0.0 --port=3306 \
  --socket="${TMPDIR:-/tmp}/mysqld.sock" --pid-file="${TMPDIR:-/tmp}/mysqld.pid" --skip-name-resolve \
  --init-file="$init" "$@"
