#!/usr/bin/env bash
# Moves the dev cluster tool (sunk/dev) and the slurmrestd fake (sunk/slurm/fake.py) out of the
# product package into the sibling distribution under dev/ (package sunk_dev), and rewrites every
# reference in the tracked tree (imports, `python -m` names, logger names, paths in comments and docs).
#
# Idempotent: run it again after merging branches that still import sunk.dev or sunk.slurm.fake, or
# that added files under sunk/dev: what is already moved is left alone, what is new is moved too.
# Run from anywhere inside the checkout, on a tree without unstaged changes; it touches only tracked
# files and stages what it did (commit it as one generated commit).
#
# What it does not rewrite: label and annotation keys under the sunk.dev/ prefix
# (sunk.dev/termination-delay-seconds, sunk.dev/fake-kubelet, ...): they are wire names, not modules.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
if ! git diff --quiet; then  # what it stages must be the move alone
    echo "move.sh: the work tree has unstaged changes: commit or stash them first" >&2
    exit 1
fi

# 1. The files. One `git mv` per file, so that a file added under sunk/dev after an earlier run is
#    moved too; a file that exists at both places is a conflict for a person to settle.
move() {  # move SRC DST
    local src=$1 dst=$2
    if [[ -e $dst ]]; then
        if git ls-files --error-unmatch -- "$src" >/dev/null 2>&1; then
            echo "move.sh: both $src and $dst exist: merge them by hand, then run again" >&2
            exit 1
        fi
        return 0
    fi
    mkdir -p "$(dirname "$dst")"
    git mv -- "$src" "$dst"
}

while IFS= read -r -d '' file; do
    move "$file" "dev/sunk_dev/${file#sunk/dev/}"
done < <(git ls-files -z -- sunk/dev)
if git ls-files --error-unmatch -- sunk/slurm/fake.py >/dev/null 2>&1; then
    move sunk/slurm/fake.py dev/sunk_dev/fakeslurm.py
fi
# What git does not track (bytecode, caches) would keep an empty sunk/dev importable as a namespace package.
if [[ -d sunk/dev ]] && [[ -z $(git ls-files -- sunk/dev) ]]; then
    rm -rf sunk/dev
fi

# 2. The references, in every tracked text file but this script.
#    sunk.slurm.fake -> sunk_dev.fakeslurm      sunk/slurm/fake.py -> dev/sunk_dev/fakeslurm.py
#    sunk.dev[.x]    -> sunk_dev[.x]            sunk/dev[/x]       -> dev/sunk_dev[/x]
#    (sunk.dev/... and docker.io/sunk-dev/... are names, not modules: left alone)
PATTERN='\bsunk\.slurm\.fake\b|\bsunk/slurm/fake\.py\b|\bfrom sunk\.slurm import fake\b|\bsunk\.dev\b(?![/\w-])|(?<![\w./-])sunk/dev\b(?![\w-])'
git ls-files -z | grep -zv '^dev/move\.sh$' | { xargs -0 grep -lIP -- "$PATTERN" 2>/dev/null || true; } | while IFS= read -r file; do
    [[ -f $file ]] || continue
    perl -pi -e '
        s{\bfrom sunk\.slurm import fake\b}{from sunk_dev import fakeslurm as fake}g;
        s{\bsunk\.slurm\.fake\b}{sunk_dev.fakeslurm}g;
        s{\bsunk/slurm/fake\.py\b}{dev/sunk_dev/fakeslurm.py}g;
        s{\bsunk\.dev\b(?![/\w-])}{sunk_dev}g;
        s{(?<![\w./-])sunk/dev\b(?![\w-])}{dev/sunk_dev}g;
    ' -- "$file"
    git add -- "$file"
done

# 3. The linter: sunk_dev is first-party (ruff finds it under dev/), and the renamed imports are sorted
#    again, as `ruff check` wants them (sunk_dev sorts after sunk.*).
if ! grep -q '^src = ' ruff.toml; then
    perl -0pi -e 's{^(line-length = .*\n)}{$1# sunk_dev, the dev tools\x27 distribution, lives under dev/: first-party for the import order too\nsrc = [".", "dev"]\n}m' ruff.toml
    git add ruff.toml
fi
if command -v ruff >/dev/null; then
    mapfile -d '' python_files < <(git ls-files -z -- '*.py')
    ruff check --quiet --exit-zero --fix --select I -- "${python_files[@]}"
    git add -u -- "${python_files[@]}"
else
    echo "move.sh: no ruff on PATH (pip install ruff): imports are left unsorted" >&2
fi

echo "move.sh: done; left to check by hand:"
git grep -nP "$PATTERN" -- ':!dev/move.sh' || echo "  no reference to sunk.dev or sunk.slurm.fake is left"
