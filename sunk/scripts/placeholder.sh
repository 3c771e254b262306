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
# the Pod still runs. If the Pod outlives KillWait, it has the node drained, with a reason
# the Syncer lifts once the Pod is gone from the node and no job of it holds the node
# ("k8s: sunk-placeholder: ...", sunk/translate/drains.py; a gang's: once no member is left there).
# It asks the scheduler's drain hook; when that cannot be reached it drains with scontrol itself,
# which Slurm allows only a job running as an operator (root, where the identity policy names it).
# A job running as a tenant (the chart's default identity) cannot: there the epilog (root, on every
# node of the job, before Slurm reuses it) and the Syncer's post-hook drain a node the Pod is still
# on, and the epilog drains by itself when the Syncer cannot be reached either (sunk/scripts/epilog.sh).
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

# foreign_drain NODE: whether the node is out of service for a reason sunk did not write (the file is
# inlined here where the script ships: sunk/scripts/__init__.py).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

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
    log "Pod still exists ${SUNK_KILL_WAIT}s after the job ended; draining the node"
    if [[ "$(hook POST drain)" != 200 ]]; then
        local reason node
        if [[ -n "${SUNK_GANG:-}" ]]; then
            # Which member outlived KillWait, and on which node, is the scheduler's to say. Without it:
            # every node of the allocation, naming the gang (SUNK_POD_UID is gang:NS/KEY); the Syncer
            # lifts it on each node once no member of the gang is left there and no job of it holds it.
            reason="k8s: sunk-placeholder: gang ${SUNK_POD_UID#gang:} outlived KillWait after job $SLURM_JOB_ID"
        else
            # The scheduler is unreachable: the same reason its drain hook writes (the UID: only that very Pod
            # holds the drain, not one made again under its name).
            reason="k8s: sunk-placeholder: pod $SUNK_POD${SUNK_POD_UID:+ uid=$SUNK_POD_UID} outlived KillWait after job $SLURM_JOB_ID"
        fi
        for node in $(scontrol show hostnames "${SLURM_JOB_NODELIST:-$SLURMD_NODENAME}" 2>/dev/null \
                      || echo "$SLURMD_NODENAME"); do
            if foreign_drain "$node"; then
                log "$node is out of service for a reason sunk did not write: left as it is"
            else
                scontrol update nodename="$node" state=drain reason="$reason" || log "could not drain $node"
            fi
        done
    fi
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
