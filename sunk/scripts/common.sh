# The functions prolog.sh, epilog.sh and placeholder.sh share. Sourced by each; where they ship it is
# inlined in its place (sunk/scripts/__init__.py shipped_script, the chart's slurm-hooks ConfigMap).

# read_hooks_env FILE: hooks.env's KEY=VALUE lines into SUNK_SYNCER_URL, SUNK_HOOKS_TOKEN_FILE,
# SUNK_HOOKS_CA and SUNK_LOCK_TIMEOUT (default 90); other keys are ignored. Read, never sourced: the
# file is configuration, and nothing in it runs as root.
read_hooks_env() {
    local key value
    SUNK_SYNCER_URL="" SUNK_HOOKS_TOKEN_FILE="" SUNK_HOOKS_CA="" SUNK_LOCK_TIMEOUT=90
    while IFS='=' read -r key value || [ -n "$key" ]; do  # (a last line without its newline too)
        value=${value%$'\r'}; value=${value#\"}; value=${value%\"}
        case "$key" in
            SUNK_SYNCER_URL) SUNK_SYNCER_URL=$value ;;
            SUNK_HOOKS_TOKEN_FILE) SUNK_HOOKS_TOKEN_FILE=$value ;;
            SUNK_HOOKS_CA) SUNK_HOOKS_CA=$value ;;
            SUNK_LOCK_TIMEOUT) SUNK_LOCK_TIMEOUT=$value ;;
        esac
    done < "$1"
}

# hook_start: what the prolog and the epilog do first. Without a readable hooks.env file (SUNK_HOOKS_ENV,
# by default /etc/sunk/hooks.env; a directory, as a hostPath mount of a missing file leaves, counts as
# none) the script ends here, with 0: Slurm without sunk is unaffected. Else its keys are read
# (read_hooks_env), NODE is this Slurm node and JOB the job (0 when none).
hook_start() {
    HOOKS_ENV=${SUNK_HOOKS_ENV:-/etc/sunk/hooks.env}
    [ -f "$HOOKS_ENV" ] && [ -r "$HOOKS_ENV" ] || exit 0
    read_hooks_env "$HOOKS_ENV"
    NODE=${SLURMD_NODENAME:-$(hostname -s)}
    JOB=${SLURM_JOB_ID:-0}
}

# foreign_drain NODE: the node is out of service (drained, down, failed, invalid, ...: any state but
# those that run jobs) for a reason sunk did not write (a person's, NHC's, Slurm's own): it is left as
# it is, never given a "k8s:" reason the Syncer would lift (sunk/translate/drains.py, held_by_another).
foreign_drain() {
    local line state reason
    line=$(sinfo -h -N -n "$1" -o '%T|%E' 2>/dev/null | head -n 1) && [ -n "$line" ] || return 1
    state=${line%%|*} reason=${line#*|}
    case "$state" in idle*|alloc*|mix*|comp*|plan*|resv*|reserved*) return 1 ;; esac
    [[ -n "$reason" && "$reason" != none && "$reason" != "k8s:"* ]]
}
