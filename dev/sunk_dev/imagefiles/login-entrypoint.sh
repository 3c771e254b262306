#!/bin/sh
# sunk-login's entrypoint (docs/images.md, docs/slurmcluster.md): sshd in the foreground, as root, for the
# SlurmCluster's login users (/var/lib/extrausers, a ConfigMap; their keys there too, sshd_config).
#   SUNK_SSH_HOST_KEYS  the directory of the host key Secret (default /etc/sunk/ssh-host-keys)
#   SUNK_USERS_DIR      the users' directory (default /var/lib/extrausers)
#   SUNK_MAX_PROCESSES  each user's processes at most (RLIMIT_NPROC, default 4096; root, sshd, is exempt):
#                       a fork bomb of one user stops there, not at the Node's PID limit
# A Secret's file is group readable under the Pod's fsGroup, which sshd refuses for a host key: the key is
# copied into a directory of root's own, mode 0600. Each user's home (/home/<name>, of the container) is made
# at start when missing; a user added later logs in at / until the Pod restarts (a shared /home mounted over
# it keeps every user's). Arguments are passed on to sshd.
set -eu

fail() {
  echo "sunk-login: $*" >&2
  exit 1
}

keys=${SUNK_SSH_HOST_KEYS:-/etc/sunk/ssh-host-keys}
users=${SUNK_USERS_DIR:-/var/lib/extrausers}
run=/run/sunk-ssh
umask 077
mkdir -p /run/sshd  # (sshd's privilege separation directory)
chmod 0755 /run/sshd
rm -rf "$run"
mkdir -m 0700 "$run"
[ -s "$keys/ssh_host_ed25519_key" ] || fail "no host key at $keys/ssh_host_ed25519_key (the login Pod mounts the SlurmCluster's <name>-login-host-keys Secret there)"
cp "$keys/ssh_host_ed25519_key" "$run/ssh_host_ed25519_key"
chmod 0600 "$run/ssh_host_ed25519_key"

if [ -r "$users/passwd" ]; then
  while IFS=: read -r name _ uid gid _ home _; do
    [ "$home" = "/home/$name" ] || continue  # (only what sunk wrote: a home of its own under /home)
    [ -d "$home" ] || install -d -m 0700 -o "$uid" -g "$gid" "$home"
  done < "$users/passwd"
fi

ulimit -p "${SUNK_MAX_PROCESSES:-4096}"
exec /usr/sbin/sshd -D -e "$@"
