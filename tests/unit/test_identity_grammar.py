"""One grammar for a placeholder's identity: the Syncer's and scheduler's parser (sunk/translate/identity.py) and
the epilog (sunk/scripts/epilog.sh, which drains a node for a placeholder job by its AdminComment alone) take
and refuse the same texts. Every hostile text goes to both; the verdicts must agree, and what both take reads
back as the same Pod or gang in the drain reason the Syncer lifts.

(The epilog's own flows, the hook call and the drain, are tests/unit/test_locking_scripts.py.)
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from sunk.scripts import shipped_script
from sunk.translate.drains import GangPlaceholderDrain, PlaceholderDrain, parse
from sunk.translate.identity import IDENTITY_MAX, NAMESPACE_MAX, POD_NAME_MAX, UID_MAX, PlaceholderIdentity
from sunk.translate.keys import GangKey, PodKey

UUID = "0f1e2d3c-0000-4000-8000-00000000000a"
POD = f"sunk-pod={UUID} ns=team-a name=train-0"
GANG = f"sunk-gang=job/{UUID} ns=team-a size=2 members=0a1b2c3d,4e5f6071"

HOSTILE = {
    # controls: what sunk writes
    "pod": POD,
    "pod-sched": f"{POD} sched=slurm-sunk",
    "gang": GANG,
    "gang-sched": f"{GANG} sched=slurm-sunk",
    "lws-gang": "sunk-gang=lws/web/0 ns=team-a size=4 members=0a1b2c3d sched=s",
    "dotted-name": f"sunk-pod={UUID} ns=team-a name=web.v2.x-1",
    "longest-words": f"sunk-pod={'a' * UID_MAX} ns={'n' * NAMESPACE_MAX} name={'p' * POD_NAME_MAX} "
                     f"sched={'s' * POD_NAME_MAX}",
    "squeue-padding": f"   {POD}   ",
    "trailing-cr": f"{POD}\r",
    # the attacks: what a Kubernetes name, namespace or UID can never be
    "upper-namespace": f"sunk-pod={UUID} ns=Team-A name=x",
    "underscore-namespace": f"sunk-pod={UUID} ns=team_a name=x",
    "dotted-namespace": f"sunk-pod={UUID} ns=team.a name=x",
    "namespace-64": f"sunk-pod={UUID} ns={'n' * (NAMESPACE_MAX + 1)} name=x",
    "name-254": f"sunk-pod={UUID} ns=team-a name={'p' * (POD_NAME_MAX + 1)}",
    "sched-254": f"{POD} sched={'s' * (POD_NAME_MAX + 1)}",
    "uid-37": f"sunk-pod={'a' * (UID_MAX + 1)} ns=team-a name=x",
    "upper-uid": f"sunk-pod={UUID.upper()} ns=team-a name=x",
    "uid-leading-dash": "sunk-pod=-abc ns=team-a name=x",
    "name-trailing-dash": f"sunk-pod={UUID} ns=team-a name=x-",
    "name-double-dot": f"sunk-pod={UUID} ns=team-a name=a..b",
    "name-dot-dash": f"sunk-pod={UUID} ns=team-a name=a.-b",
    "shell-substitution": f"sunk-pod={UUID} ns=team-a name=$(reboot)",
    "backticks": f"sunk-pod={UUID} ns=team-a name=`id`",
    "semicolon": f"sunk-pod={UUID} ns=team-a name=a;b",
    "slash-in-name": f"sunk-pod={UUID} ns=team-a name=../../etc",
    "equals-in-sched": f"{POD} sched=a=b",
    "empty-sched": f"{POD} sched=",
    "double-space": f"sunk-pod={UUID}  ns=team-a name=x",
    "tab-between": f"sunk-pod={UUID}\tns=team-a name=x",
    "second-line": f"{POD}\n{GANG}",
    "second-line-forged": f"{POD}\nsite: nothing",
    "leading-newline": f"\n{POD}",
    "leading-file-separator": f"\x1c{POD}",  # (white space to Python's str.strip(), not to bash)
    "nbsp-after": f"{POD}\u00a0",
    "cyrillic-e": f"sunk-pod={UUID} ns=t\u0435am name=x",
    "fullwidth-digit": f"sunk-pod={UUID} ns=team\uff11 name=x",
    "a-prefix": f"site: {POD}",
    "a-suffix": f"{POD}: started",
    "pod-and-gang": f"{POD} size=2 members=0a1b2c3d",
    "gang-unknown-kind": "sunk-gang=evil/x ns=team-a size=2 members=0a1b2c3d",
    "gang-four-pieces": "sunk-gang=jobset/a/b/c/d ns=team-a size=2 members=0a1b2c3d",
    "gang-piece-64": f"sunk-gang=podgroup/{'g' * 64} ns=team-a size=2 members=0a1b2c3d",
    "gang-size-0": "sunk-gang=podgroup/g ns=team-a size=0 members=0a1b2c3d",
    "gang-size-10-digits": "sunk-gang=podgroup/g ns=team-a size=1234567890 members=0a1b2c3d",
    "gang-upper-member": "sunk-gang=podgroup/g ns=team-a size=2 members=0A1B2C3D",
    "gang-long-member": "sunk-gang=podgroup/g ns=team-a size=2 members=0a1b2c3d4",
    "gang-empty-member": "sunk-gang=podgroup/g ns=team-a size=2 members=0a1b2c3d,,4e5f6071",
    "gang-fits": f"sunk-gang=podgroup/g ns=team-a size=100 members={','.join(['0a1b2c3d'] * 100)}",
    "gang-over-1024": f"sunk-gang=podgroup/g ns=team-a size=120 members={','.join(['0a1b2c3d'] * 120)}",
    "gang-over-1100": f"sunk-gang=podgroup/g ns=team-a size=130 members={','.join(['0a1b2c3d'] * 130)}",
    "empty": "",
    "spaces": "    ",
}


def epilog_function() -> str:
    """placeholder_reason() exactly as the epilog ships it (its library inlined)."""
    script = shipped_script("epilog.sh")
    match = re.search(r"^placeholder_reason\(\) \{\n.*?^\}\n", script, re.MULTILINE | re.DOTALL)
    assert match, "epilog.sh has no placeholder_reason()"
    return match.group(0)


FUNCTION = epilog_function()


def epilog_verdict(text: str, tmp_path: Path, locale: str) -> str:
    """What the epilog drains with for a job whose AdminComment is ``text`` (empty: no drain). squeue answers
    as it does for ``-O admin_comment:1100``: the field cut to 1100 characters and padded to them."""
    (tmp_path / "admin_comment").write_bytes(text.encode())
    program = (f"set -u\nJOB=42\nsqueue() {{ printf '%-1100.1100s\\n' \"$(cat {tmp_path}/admin_comment)\"; }}\n"
               f"{FUNCTION}\nplaceholder_reason\n")
    done = subprocess.run(["bash", "-c", program], capture_output=True, timeout=30,
                          env={"PATH": os.environ["PATH"], "LANG": locale, "LC_ALL": locale})
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.decode().strip()


def expected_reason(identity: Optional[PlaceholderIdentity]) -> str:
    if identity is None:
        return ""
    if identity.name:  # a lone Pod's
        return PlaceholderDrain(identity.namespace, identity.name, 42, identity.unit.uid).reason()
    return GangPlaceholderDrain(identity.namespace, identity.unit.key, 42).reason()


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
@pytest.mark.parametrize("text", list(HOSTILE.values()), ids=list(HOSTILE))
def test_the_parser_and_the_epilog_take_and_refuse_the_same_identities(tmp_path, text, locale):
    identity = PlaceholderIdentity.parse(text)
    reason = epilog_verdict(text, tmp_path, locale)
    assert reason == expected_reason(identity), f"parser: {identity}; epilog: {reason!r}"
    if reason:
        assert parse(reason) is not None  # a drain the Syncer knows as its own, and lifts


def test_the_controls_are_taken_and_the_attacks_refused():
    """(So the agreement above is not two parsers that take nothing, or everything.)"""
    taken = {key for key, text in HOSTILE.items() if PlaceholderIdentity.parse(text) is not None}
    assert taken == {"pod", "pod-sched", "gang", "gang-sched", "lws-gang", "dotted-name", "longest-words",
                     "squeue-padding", "trailing-cr", "leading-newline", "gang-fits"}  # (white space around)
    assert len(HOSTILE["gang-fits"]) <= IDENTITY_MAX < len(HOSTILE["gang-over-1024"])


@pytest.mark.parametrize("key", ["upper-namespace", "namespace-64", "uid-37", "shell-substitution", "slash-in-name",
                                 "equals-in-sched", "gang-four-pieces"])
def test_sunk_never_writes_what_it_would_not_read_back(key):
    """encode() refuses the words the parser refuses: a Pod whose fields fall outside the grammar gets no job
    rather than one whose identity no one reads."""
    text = HOSTILE[key]
    words = dict(word.split("=", 1) for word in text.split(" "))  # (sched=a=b: its value a=b)
    with pytest.raises(ValueError):
        if "sunk-pod" in words:
            PlaceholderIdentity(PodKey(words["sunk-pod"]), words["ns"], name=words["name"],
                                scheduler=words.get("sched", "")).encode()
        else:
            PlaceholderIdentity(GangKey(words["ns"], words["sunk-gang"]), words["ns"], size=int(words["size"]),
                                members=tuple(words["members"].split(",")), scheduler=words.get("sched", "")).encode()
