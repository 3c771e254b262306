#!/bin/bash
# sunk prolog: lock this node's Kubernetes Node before the job starts on it.
#
# Runs as root on the slurmd host (slurm.conf: Prolog, with PrologFlags=Alloc so it runs
# at allocation on every node of the job). It asks the Syncer's hook API to lock the
# node (Pods that do not tolerate sunk.coreweave.com/lock are evicted) and waits for it.
# On an error or a timeout it drains the node with a reason that says why, and stops the
# job as Slurm does after a failed prolog (requeued and held; cancelled if it cannot be
# requeued), so it never starts beside Kubernetes workloads. It then exits 0: a failed
# prolog makes slurmd report the failure again every 15 s until slurmctld forgets the job
# (MinJobAge), and the first report that finds the node undrained drains it "Prolog error",
# a reason nothing lifts. Only when it cannot drain or stop the job does it exit non-zero
# and leave both to Slurm.
# Two of those drains the Syncer lifts once their cause is gone (sunk/translate/drains.py):
#   k8s: sunk-lock: job N: hook API unreachable (...)       the hook API never answered, or answered
#                                                            5xx or 429 (busy), until the time was up
#   k8s: sunk-lock: job N: lock timeout after ...            the lock service's drain_reason
# Every other failure (configuration, a refusal, and a 401 or 404 that lasted the whole lock
# timeout: retried until then, as a rotation or a new node may need) drains with
# "sunk-lock: job N: ...", which only an operator lifts. A node already out of service for a
# reason sunk did not write (an operator's "hardware: fan", NHC's, Slurm's own) keeps it: the
# job is stopped, the reason left alone.
#
# Configuration: /etc/sunk/hooks.env (another path in SUNK_HOOKS_ENV), KEY=VALUE lines:
#   SUNK_SYNCER_URL        the hook API, e.g. http://sunk-syncer.slurm.svc:8000 (https:// with TLS)
#   SUNK_HOOKS_TOKEN_FILE  file holding this node's credential, read at every call: the slurmd Pod's
#                          projected ServiceAccount token (the kubelet rotates it in place), or a
#                          legacy per-node HMAC token (a mounted Secret); a %n in the path is
#                          replaced by the Slurm node name
#   SUNK_HOOKS_CA          CA bundle that verifies an https SUNK_SYNCER_URL (curl --cacert); empty:
#                          the system's CAs
#   SUNK_LOCK_TIMEOUT      seconds to wait for the lock (default 90). The prolog may take this, plus
#                          15 s of curl's slack, plus up to five Slurm calls after it (drain, squeue,
#                          requeuehold, squeue, scancel): keep it well below slurm.conf's
#                          PrologEpilogTimeout, or slurmd kills the prolog and drains 'Prolog error'
# Without that file the script does nothing and succeeds: Slurm without sunk is unaffected.
set -u
export PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # slurmd's, then the system's
# hook_start, read_hooks_env and foreign_drain NODE (the file is inlined here where the script ships:
# sunk/scripts/__init__.py).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hook_start  # without hooks.env: exit 0. Sets HOOKS_ENV, its keys, NODE and JOB
log() { echo "$(date -u +%FT%TZ) sunk-prolog node=$NODE job=$JOB: $*" >&2; }

stop_job() {  # as slurmctld does after a failed prolog: requeue the job held, or cancel it
    local why active
    # Not a job that is no longer starting: another node's prolog (a job of several nodes) or its
    # user stopped it a moment ago, and requeuehold would bring a cancelled job back, held.
    active=$(squeue -h -j "$JOB" -t CONFIGURING,RUNNING -o %i 2>/dev/null) && [ -z "$active" ] \
        && { log "job $JOB is no longer starting (stopped on another node, or cancelled): nothing to stop"; return 0; }
    why=$(scontrol requeuehold "$JOB" 2>&1) && { log "job $JOB requeued and held"; return 0; }
    # Refused: it cannot be requeued, or another node's prolog requeued it held a moment ago
    # (refused as pending): cancel only a job that is still starting.
    active=$(squeue -h -j "$JOB" -t CONFIGURING,RUNNING -o %i 2>/dev/null) && [ -z "$active" ] \
        && { log "job $JOB was stopped meanwhile (${why:0:120}): nothing to stop"; return 0; }
    scancel "$JOB" && { log "job $JOB cannot be requeued (${why:0:120}): cancelled"; return 0; }
    return 1
}

drain() {  # drain REASON: drain the node with that reason and stop the job; fail only if that cannot be done
    local reason="${1:0:250}"
    if foreign_drain "$NODE"; then
        log "$NODE is out of service for a reason sunk did not write: left as it is (would have drained: $reason)"
    else
        log "drain: $reason"
        if ! scontrol update nodename="$NODE" state=drain reason="$reason"; then
            log "could not drain $NODE: the prolog fails and Slurm drains it ('Prolog error')"
            exit 1
        fi
    fi
    stop_job && exit 0
    log "could not requeue or cancel job $JOB: the prolog fails and Slurm stops it"
    exit 1
}
fail() { drain "sunk-lock: job $JOB: $1"; }  # fail WHY: a cause the Syncer cannot see go; an operator resumes

[[ "$SUNK_LOCK_TIMEOUT" =~ ^[0-9]+$ ]] && (( SUNK_LOCK_TIMEOUT > 0 )) \
    || fail "SUNK_LOCK_TIMEOUT in $HOOKS_ENV is not a number of seconds"
[ -n "$SUNK_SYNCER_URL" ] || fail "SUNK_SYNCER_URL is not set in $HOOKS_ENV"
SUNK_HOOKS_TOKEN_FILE=${SUNK_HOOKS_TOKEN_FILE//%n/$NODE}
token=$(cat "$SUNK_HOOKS_TOKEN_FILE" 2>/dev/null) && [ -n "$token" ] \
    || fail "cannot read the hook API token from '$SUNK_HOOKS_TOKEN_FILE'"
tls=()
if [ -n "$SUNK_HOOKS_CA" ]; then
    [ -r "$SUNK_HOOKS_CA" ] || fail "cannot read the hook API's CA bundle '$SUNK_HOOKS_CA' (SUNK_HOOKS_CA)"
    tls=(--cacert "$SUNK_HOOKS_CA")
fi

deadline=$(( $(date +%s) + SUNK_LOCK_TIMEOUT ))
out=$(mktemp) || fail "mktemp failed"
trap 'rm -f "$out"' EXIT
attempt=0
while :; do
    left=$(( deadline - $(date +%s) ))
    (( left < 1 )) && left=1
    # Nothing the job's user controls goes in the body: the Syncer reads the job from Slurm.
    body="{\"job_id\": $JOB, \"timeout\": $left}"
    # The token goes through stdin, so it never shows in the process list.
    status=$(printf 'header = "Authorization: Bearer %s"\n' "$token" | curl -sS -o "$out" -w '%{http_code}' \
        -K - ${tls[@]+"${tls[@]}"} -m $(( left + 15 )) -X POST -H 'Content-Type: application/json' --data-binary "$body" \
        "$SUNK_SYNCER_URL/api/v1/nodes/$NODE/pre-hook" 2>/dev/null)
    case "$status" in
        200) log "locked: $(cat "$out")"; exit 0 ;;
        409) log "the job ended before it started: $(head -c 200 "$out")"; exit 0 ;;
        000|401|404|429|500|502|503)
            # The Syncer is restarting, unreachable, failing or busy (429: too many pre-hooks wait already;
            # nothing was recorded), a cause it sees go (a drain it lifts), or it
            # does not know this node or its token yet (a rotation the kubelet has not carried here, a
            # node just made): retry while time is left. A token or node still refused when it is up is
            # a configuration only an operator mends: lifting that drain would send every next job into
            # the same failure, each requeued and held.
            attempt=$(( attempt + 1 ))
            if (( $(date +%s) + 2 >= deadline )); then
                case "$status" in
                    401|404)
                        refused="the hook API refused this node for ${SUNK_LOCK_TIMEOUT}s"
                        fail "$refused (HTTP $status, $attempt attempts): $(head -c 150 "$out" | tr -d '\n')" ;;
                    *) drain "k8s: sunk-lock: job $JOB: hook API unreachable (HTTP $status, $attempt attempts)" ;;
                esac
            fi
            if [ "$status" = 429 ]; then sleep 1; else sleep 2; fi ;;  # (429: the Syncer's Retry-After)
        *)
            # A lock timeout the service could state in full, with what the Syncer watches go.
            drain_reason=$(sed -n 's/.*"drain_reason": *"\([^"]*\)".*/\1/p' "$out")
            [[ "$status" == 504 && "$drain_reason" == "k8s: sunk-lock: job $JOB: "* ]] && drain "$drain_reason"
            reason=$(sed -n 's/.*"reason": *"\([^"]*\)".*/\1/p' "$out")
            [ -n "$reason" ] || reason="pre-hook failed with HTTP $status: $(head -c 200 "$out" | tr -d '\n')"
            fail "$reason" ;;
    esac
done
