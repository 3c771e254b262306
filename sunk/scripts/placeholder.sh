#!/bin/bash
# sunk placeholder job: holds a Slurm allocation on behalf of one Kubernetes Pod, or of a gang's
# Pods (one node each: the script runs on the batch host only, and the hook API answers for the
# whole gang).
#
# The scheduler submits this script with the environment below. Slurm starts it after the batch
# host's prolog (with PrologFlags=DeferBatch, after every node's); it tells the scheduler to look
# now (Slurm's state says the job started, once every node's prolog, so every lock, is done; this
# call is no evidence: the job's user could make it), then waits. When
# Slurm ends the job (scancel, time limit, preemption), it asks the scheduler to delete
# the Pod and blocks until the Pod is gone, so that Slurm never starts another job while
# the Pod still runs. If the Pod outlives KillWait, it asks the scheduler to drain the node,
# with a reason the Syncer lifts once the Pod is gone from the node and no job of it holds
# the node ("k8s: sunk-placeholder: ...", sunk/translate/drains.py).
#
# It writes nothing to Slurm itself: it runs as the job's user (a tenant, not root), and what it
# does is that user's to change, so nothing trusted depends on it. A scheduler that cannot be
# reached is covered by the epilog (sunk/scripts/epilog.sh, root, on every node of the job, before
# Slurm reuses it): the Syncer's post-hook drains a node the Pod is still on, and the epilog drains
# by itself, for a placeholder job, when the Syncer cannot be reached either.
#
#   SUNK_HOOKS_URL     the scheduler's hook API, e.g. http://sunk-scheduler:8000
#   SUNK_HOOK_TOKEN    bearer token scoped to this job's Pod
#   SUNK_POD_UID       that Pod's UID, sent with each call (X-Sunk-Pod-UID)
#   SUNK_KILL_WAIT     Slurm's KillWait in seconds
#   SUNK_POD           namespace/name, for messages
#   SUNK_HOOKS_CA      (optional) CA bundle that verifies an https SUNK_HOOKS_URL
#   SUNK_GANG          (a gang's job) its size; SUNK_POD_UID is then the gang's owner and SUNK_POD
#                      names the gang
set -u
: "${SUNK_HOOKS_URL:?}" "${SUNK_HOOK_TOKEN:?}" "${SUNK_KILL_WAIT:?}" "${SUNK_POD:?}"
DRAIN_MARGIN=${SUNK_DRAIN_MARGIN:-3}

log() { echo "$(date -u +%FT%TZ) sunk-placeholder job=$SLURM_JOB_ID pod=$SUNK_POD: $*" >&2; }

# hook METHOD PATH [TIMEOUT]: prints the HTTP status (000 when unreachable).
# The token goes through curl's stdin (printf is a shell builtin), so it never shows in the
# process list, which every user of the node can read.
hook() {
    printf 'header = "Authorization: Bearer %s"\n' "$SUNK_HOOK_TOKEN" | \
        curl -sS -K - ${SUNK_HOOKS_CA:+--cacert "$SUNK_HOOKS_CA"} -o /dev/null -w '%{http_code}' -m "${3:-10}" \
        -X "$1" -H "X-Sunk-Pod-UID: ${SUNK_POD_UID:-}" "$SUNK_HOOKS_URL/api/v1/jobs/$SLURM_JOB_ID/$2" 2>/dev/null
}

on_term() {
    trap '' TERM
    local deadline=$(( $(date +%s) + SUNK_KILL_WAIT - DRAIN_MARGIN )) asked=false
    log "job is ending; asking the scheduler to delete the Pod"
    while (( $(date +%s) < deadline )); do
        # Asked again until the scheduler has taken it (200) or the Pod is gone (404): a
        # restarting scheduler answers 503 until its Pod cache is synced, or nothing at all.
        if ! $asked; then
            case "$(hook POST terminating)" in
                200|404) asked=true ;;
            esac
        fi
        local left=$(( deadline - $(date +%s) ))
        (( left > 5 )) && left=5
        (( left < 1 )) && left=1
        case "$(hook GET "pod?wait=$left" $(( left + 5 )))" in
            404) log "Pod is gone"; exit 0 ;;
            200) ;;
            *) sleep 1 ;;
        esac
    done
    log "Pod still exists ${SUNK_KILL_WAIT}s after the job ended; asking the scheduler to drain the node"
    local status
    status=$(hook POST drain)
    # Not drained here otherwise: the epilog, with the Syncer, drains a node the Pod is still on (above).
    [[ "$status" == 200 ]] || log "the scheduler's drain hook answered HTTP $status; the epilog drains the node"
    exit 1
}

trap on_term TERM

log "started"
# Tell the scheduler now rather than let it wait for its Slurm cache to reread the job; if
# this call is lost, that reread still shows the job started.
hook POST started 3 >/dev/null
while :; do
    sleep 3600 &
    wait $!
done
