#!/bin/bash
# sunk epilog: tell the Syncer the job ended here, so the node is unlocked promptly, and so that
# a placeholder job's Pod that is still on the node keeps the next Slurm job off it.
#
# Runs as root on the slurmd host (slurm.conf: Epilog), on every node of the job, once the job's
# processes are gone and before Slurm gives the node to another job. Unlocking is level-based (the
# Syncer unlocks once Slurm reports no job on the node), so this call only makes it prompt and
# drops the job's lock request. The Syncer's post-hook also drains the node when the job is a sunk
# placeholder whose Pod outlived it there (sunk/locking/service.py); the placeholder itself runs as
# its tenant and can only ask the scheduler. When the post-hook cannot be reached (no answer, or a
# 5xx, after its retries), this script drains the node itself for a placeholder job, with the
# reason the Syncer lifts once no Pod of the job is left on the node (sunk/translate/drains.py):
# it cannot see Kubernetes, so it assumes the Pod may still be there. Whether the job is a
# placeholder is read from its AdminComment alone, which only Slurm's super users write (squeue
# prints that one field; the job's Comment, Extra and name, its user's to write, never show), never
# from anything the job or its user wrote (environment, files, exit code).
#
# It never fails: a failing epilog would drain the node for no reason. Configuration as for
# prolog.sh (hooks.env); without that file it does nothing.
set -u
export PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin  # slurmd's, then the system's (as prolog.sh)
# hook_start, read_hooks_env and foreign_drain NODE (the file is inlined here where the script ships:
# sunk/scripts/__init__.py).
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
hook_start  # without hooks.env: exit 0. Sets HOOKS_ENV, its keys, NODE and JOB
log() { echo "$(date -u +%FT%TZ) sunk-epilog node=$NODE job=$JOB: $*" >&2; }

token=$(cat "${SUNK_HOOKS_TOKEN_FILE//%n/$NODE}" 2>/dev/null)
if [ -z "$SUNK_SYNCER_URL" ] || [ -z "$token" ]; then
    log "hooks.env lacks SUNK_SYNCER_URL or a readable token file; the Syncer unlocks on its own"
    exit 0
fi

# placeholder_reason: the drain reason for this job if its AdminComment is a sunk placeholder's identity
# (sunk/translate/identity.py PlaceholderIdentity, a lone Pod's or a gang's: the whole text, as the Syncer reads
# it), else nothing. The reason is the one the scheduler's drain hook writes for a Pod (naming its UID: only
# that very Pod holds it), or for a gang the one naming it; the Syncer lifts either once no Pod of the job is
# left on the node. The grammar is identity.py's, pattern for pattern and bound for bound (its *_PATTERN and
# *_MAX; tests/unit/test_identity_grammar.py feeds both the same hostile texts and wants the same verdict).
placeholder_reason() {
    local LC_ALL=C text words  # (byte ranges: [a-z] is no wider in another locale)
    local label='[a-z0-9]+(-+[a-z0-9]+)*'
    local name="$label(\.$label)*"
    local gang_key='(job|lws|podgroup|jobset)(/[A-Za-z0-9][-A-Za-z0-9._]{0,62}){1,3}'
    local members='[0-9a-f]{1,8}(,[0-9a-f]{1,8})*' size='[1-9][0-9]{0,8}'
    text=$(squeue -h -t all -j "$JOB" -O 'admin_comment:1100' 2>/dev/null)
    text=${text%"${text##*[![:space:]]}"} text=${text#"${text%%[![:space:]]*}"}  # (squeue pads the field)
    { [ -n "$text" ] && [ "${#text}" -le 1024 ]; } || return 0  # IDENTITY_MAX
    read -r -a words <<< "$text"
    local uid=${words[0]#*=} ns=${words[1]:-} third=${words[2]:-} sched=${words[4]:-${words[3]:-}}
    ns=${ns#ns=} third=${third#*=}
    [[ $sched == sched=* ]] && sched=${sched#sched=} || sched=""
    { [ "${#ns}" -le 63 ] && [ "${#sched}" -le 253 ]; } || return 0  # NAMESPACE_MAX, POD_NAME_MAX
    if [[ $text =~ ^sunk-pod=$label\ ns=$label\ name=$name(\ sched=$name)?$ ]]; then
        { [ "${#uid}" -le 36 ] && [ "${#third}" -le 253 ]; } || return 0  # UID_MAX, POD_NAME_MAX
        echo "k8s: sunk-placeholder: pod $ns/$third uid=$uid outlived KillWait after job $JOB"
    elif [[ $text =~ ^sunk-gang=$gang_key\ ns=$label\ size=$size\ members=$members(\ sched=$name)?$ ]]; then
        echo "k8s: sunk-placeholder: gang $ns/$uid outlived KillWait after job $JOB"
    fi
}

# drain_for_placeholder: the Syncer could not be asked whether a placeholder's Pod outlived the job here;
# drain the node for a placeholder job, unless it is out of service for a reason sunk did not write.
drain_for_placeholder() {
    local reason
    reason=$(placeholder_reason)
    [ -n "$reason" ] || return 0
    if foreign_drain "$NODE"; then
        log "$NODE is out of service for a reason sunk did not write: left as it is (would have drained: $reason)"
    elif scontrol update nodename="$NODE" state=drain reason="$reason"; then
        log "drain: $reason"
    else
        log "could not drain $NODE: $reason"
    fi
}

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
case "$status" in
    000|5??) drain_for_placeholder ;;
esac
exit 0
