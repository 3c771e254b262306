#!/bin/bash
# sunk epilog: tell the Syncer the job ended here, so the node is unlocked promptly.
#
# Runs as root on the slurmd host (slurm.conf: Epilog). Unlocking is level-based (the
# Syncer unlocks once Slurm reports no job on the node), so this call only makes it
# prompt and drops the job's lock request. It therefore never fails: a failing epilog
# would drain the node for no reason. Configuration as for prolog.sh (hooks.env);
# without that file it does nothing.
set -u
export PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # slurmd's, then the system's (as prolog.sh)
HOOKS_ENV=${SUNK_HOOKS_ENV:-/etc/sunk/hooks.env}
[ -r "$HOOKS_ENV" ] || exit 0

SUNK_SYNCER_URL="" SUNK_HOOKS_TOKEN_FILE="" SUNK_HOOKS_CA=""
while IFS='=' read -r key value || [ -n "$key" ]; do  # (a last line without its newline too)
    value=${value%$'\r'}; value=${value#\"}; value=${value%\"}
    case "$key" in
        SUNK_SYNCER_URL) SUNK_SYNCER_URL=$value ;;
        SUNK_HOOKS_TOKEN_FILE) SUNK_HOOKS_TOKEN_FILE=$value ;;
        SUNK_HOOKS_CA) SUNK_HOOKS_CA=$value ;;
    esac
done < "$HOOKS_ENV"

NODE=${SLURMD_NODENAME:-$(hostname -s)}
JOB=${SLURM_JOB_ID:-0}
log() { echo "$(date -u +%FT%TZ) sunk-epilog node=$NODE job=$JOB: $*" >&2; }

token=$(cat "${SUNK_HOOKS_TOKEN_FILE//%n/$NODE}" 2>/dev/null)
if [ -z "$SUNK_SYNCER_URL" ] || [ -z "$token" ]; then
    log "hooks.env lacks SUNK_SYNCER_URL or a readable token file; the Syncer unlocks on its own"
    exit 0
fi
tls=()
[ -n "$SUNK_HOOKS_CA" ] && tls=(--cacert "$SUNK_HOOKS_CA")  # (unreadable: curl fails, the Syncer unlocks anyway)
for attempt in 1 2 3; do
    status=$(printf 'header = "Authorization: Bearer %s"\n' "$token" | curl -sS -o /dev/null -w '%{http_code}' \
        -K - ${tls[@]+"${tls[@]}"} -m 10 -X POST -H 'Content-Type: application/json' --data-binary "{\"job_id\": $JOB}" \
        "$SUNK_SYNCER_URL/api/v1/nodes/$NODE/post-hook" 2>/dev/null)
    case "$status" in
        2??) exit 0 ;;
        000|502|503) sleep "$attempt" ;;
        *) break ;;
    esac
done
log "post-hook answered HTTP $status; the Syncer unlocks on its own once Slurm reports the node idle"
exit 0
