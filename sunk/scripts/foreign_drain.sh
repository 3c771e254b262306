# Sourced by prolog.sh, epilog.sh and placeholder.sh; where they ship it is inlined in its place
# (sunk/scripts/__init__.py shipped_script, the chart's slurm-hooks ConfigMap).

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
