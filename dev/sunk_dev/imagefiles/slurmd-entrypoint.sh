#!/bin/sh
# sunk-slurmd's entrypoint (docs/images.md, docs/nodeset.md): slurmd in the foreground as a dynamic node
# (slurmd -Z) that registers as the NodeSet operator says, from what it writes into the slurmd container:
#   SUNK_SLURM_NODE_NAME  the Slurm node's name (-N); unset: the Pod's hostname, which the operator sets too
#   SUNK_SLURMD_CONF      Feature=, Gres=, MemSpecLimit=, ... for --conf (CPUs and memory slurmd finds itself)
#   SUNK_GRES_CONF        the node's gres.conf lines: a GPU names its device files (Slurm drops a GPU
#                         without them and sets the node INVAL), so GRES from the Node needs them
# slurmd reads gres.conf beside the slurm.conf it is given. With gres.conf lines, it is given a directory of
# its own, SUNK_SLURMD_CONF_DIR/conf (default /run/sunk-slurmd; an emptyDir there for a read-only root): a
# link to every file beside SLURM_CONF but gres.conf, so that a ConfigMap's update still reaches slurmd, and
# a gres.conf that is the mounted one followed by the node's lines. Jobs run in this container as their
# users and an emptyDir is writable by all: the directories are root's, mode 0755, made afresh at each
# start, so no job can swap a file slurmd reads as root. Arguments are passed on to slurmd.
set -eu

fail() {
  echo "sunk-slurmd: $*" >&2
  exit 1
}

conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
if [ -n "${SUNK_GRES_CONF:-}" ]; then
  source_dir=${conf%/*}
  base=${SUNK_SLURMD_CONF_DIR:-/run/sunk-slurmd}
  dir=$base/conf
  case "$source_dir/" in
    "$base"/*) fail "SUNK_SLURMD_CONF_DIR ($base) holds SLURM_CONF's directory ($source_dir): give it a directory of its own" ;;
  esac
  mkdir -p "$base"
  chown 0:0 "$base"
  chmod 0755 "$base"
  rm -rf "$dir"  # (a restarted container: the last start's links and gres.conf)
  mkdir -m 0755 "$dir"
  for path in "$source_dir"/*; do
    [ -e "$path" ] || continue  # (an empty directory: the pattern itself)
    [ "${path##*/}" = gres.conf ] || ln -s "$path" "$dir/${path##*/}"
  done
  {
    if [ -f "$source_dir/gres.conf" ]; then cat "$source_dir/gres.conf"; fi
    printf '%s\n' "$SUNK_GRES_CONF"
  } > "$dir/gres.conf"
  set -- -f "$dir/${conf##*/}" "$@"
fi
if [ -n "${SUNK_SLURMD_CONF:-}" ]; then
  set -- --conf "$SUNK_SLURMD_CONF" "$@"
fi
if [ -n "${SUNK_SLURM_NODE_NAME:-}" ]; then
  set -- -N "$SUNK_SLURM_NODE_NAME" "$@"
fi
exec slurmd -D -Z "$@"
