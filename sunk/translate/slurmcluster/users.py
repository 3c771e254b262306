"""The SlurmCluster's login users (``spec.login.users``): who may ssh into the login Pods, and who slurmctld knows.

slurmctld builds each job's credential from the submitting uid's name and groups (``fetch_identity``): a uid it
cannot resolve fails the job's launch. So the users live in one ConfigMap, mounted at ``/var/lib/extrausers``
into the login Pods and slurmctld, whose images look there after ``/etc/passwd`` (libnss-extrausers,
``passwd: files extrausers``). The login Pods' sshd takes keys from the same ConfigMap only
(``authorized_keys.<name>``): never from a home directory. A ConfigMap's update reaches both without a restart.

Whoever edits the SlurmCluster writes these values, and each becomes a line of a passwd file: every field is
checked so that no value can add a line, name a system account (``RESERVED_NAMES``; and since ``files`` comes
first, such a name would log in as the image's account) or take a system or sunk uid (``UID_RANGE`` without
``RESERVED_IDS``). Pure.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import field, frozen

from . import paths

# Debian's useradd NAME_REGEX, at most 32 characters (the utmp limit).
USER_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# Debian's UID_MIN..UID_MAX for people: below are system accounts, above are nobody, nonroot, Debian's slurm.
UID_RANGE = (1000, 60000)
# Ids in that range that sunk's images give their own users (slurmrestd's, MariaDB's).
RESERVED_IDS = frozenset({paths.SLURMRESTD_UID, paths.MARIADB_UID})
# Every account of the images sunk builds (their /etc/passwd and /etc/group; tests/cluster/test_slurm_images.py
# checks the list against the built login and slurmctld images), and names a system keeps for itself.
RESERVED_NAMES = frozenset({
    "root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy", "www-data",
    "backup", "list", "irc", "gnats", "_apt", "nobody", "nogroup", "nonroot", "slurm", "slurmrestd", "mariadb",
    "mysql", "munge", "sshd", "messagebus", "polkitd", "systemd-network", "systemd-timesync", "systemd-resolve",
    "systemd-journal", "adm", "tty", "disk", "kmem", "dialout", "fax", "voice", "cdrom", "floppy", "tape", "sudo",
    "audio", "dip", "operator", "src", "shadow", "utmp", "video", "sasl", "plugdev", "staff", "users", "input",
    "sgx", "kvm", "render", "crontab", "netdev", "_ssh", "ssh", "admin", "wheel", "clock", "lpadmin"})
MAX_USERS = 1000
# What the users' ConfigMap may hold: the apiserver refuses an object over 1 MiB (etcd's limit), with room for
# its metadata and keys' names.
MAX_FILES_BYTES = 900 * 1024
MAX_KEYS = 16
MAX_KEY_LENGTH = 8192  # an RSA key of 16384 bits is about 2800 characters
# The public key types OpenSSH accepts in authorized_keys, and nothing before them (no options: a key line
# here grants a login shell, never a forced command or a forwarding).
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
             "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
MIN_RSA_BITS = 1024  # OpenSSH's RequiredRSASize default (9.1+)
KEY_LINE = re.compile(r"(?P<type>[a-z0-9@.-]+) (?P<blob>[A-Za-z0-9+/]+={0,2})(?: [\x20-\x7e]{0,256})?")
HOME = "/home"
SHELL = "/bin/bash"
AUTHORIZED_KEYS_PREFIX = "authorized_keys."


def _strs(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@frozen
class LoginUser:
    """One user: a name, a uid, a primary gid (the uid's unless given) and the public keys that log in as it."""

    name: str
    uid: int
    gid: int
    keys: tuple[str, ...] = field(converter=_strs, factory=tuple)

    @property
    def home(self) -> str:
        return f"{HOME}/{self.name}"


def key_problem(line: Any) -> str:
    """Why ``line`` is not one public key of a type OpenSSH takes, with a comment at most ("": it is)."""
    if not isinstance(line, str):
        return "must be a string"
    if len(line) > MAX_KEY_LENGTH:
        return f"is longer than {MAX_KEY_LENGTH} characters"
    found = KEY_LINE.fullmatch(line)
    if found is None:
        return "is not '<type> <base64 key> [comment]' on one line of printable ASCII"
    if found["type"] not in KEY_TYPES:
        return f"has the key type {found['type'][:40]!r}, not one of {', '.join(KEY_TYPES)}"
    try:
        blob = base64.b64decode(found["blob"], validate=True)
    except (binascii.Error, ValueError):
        return "has a key that is not base64"
    # The key's own first field (a length-prefixed string) names its type: a blob of another type is a paste
    # error that sshd would skip without a word; so would it an RSA key under RequiredRSASize.
    rsa = found["type"] == "ssh-rsa"
    fields = _ssh_strings(blob, 3)
    if not fields or fields[0] != found["type"].encode() or (rsa and len(fields) < 3):
        return f"has a key blob that is not a {found['type']} key"
    if rsa:  # (its exponent, then its modulus)
        bits = int.from_bytes(fields[2], "big").bit_length()
        if bits < MIN_RSA_BITS:
            return f"is an RSA key of {bits} bits; sshd takes {MIN_RSA_BITS} or more"
    return ""


def _ssh_strings(blob: bytes, count: int) -> list[bytes]:
    """The first ``count`` length-prefixed strings of an SSH wire blob (fewer when it ends before)."""
    out: list[bytes] = []
    at = 0
    while len(out) < count and at + 4 <= len(blob):
        size = int.from_bytes(blob[at:at + 4], "big")
        if at + 4 + size > len(blob):
            break
        out.append(blob[at + 4:at + 4 + size])
        at += 4 + size
    return out


def key_blob(line: str) -> str:
    """A valid key line's base64 key, without type or comment: what identifies the key."""
    return line.split(" ", 2)[1]


def read_users(value: Any, where: str = "spec.login.users") -> tuple[tuple[LoginUser, ...], list[str]]:
    """The users of ``value`` (a list of ``{name, uid, gid?, authorizedKeys?}``) and every problem found."""
    problems: list[str] = []
    if value is None:
        return (), problems
    if not isinstance(value, Sequence) or isinstance(value, str):
        return (), [f"{where} must be a list"]
    if len(value) > MAX_USERS:
        return (), [f"{where} has {len(value)} users; at most {MAX_USERS}"]
    out: list[LoginUser] = []
    names: set[str] = set()
    uids: set[int] = set()
    owners: dict[str, str] = {}  # key blob -> the user it logs in as
    low, high = UID_RANGE
    for i, body in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(body, Mapping):
            problems.append(f"{at} must be an object")
            continue
        found = len(problems)
        name = body.get("name")
        if not isinstance(name, str) or not USER_NAME.fullmatch(name):
            problems.append(f"{at}.name {str(name)[:40]!r} is not a user name ([a-z_][a-z0-9_-], at most 32)")
        elif name in RESERVED_NAMES:
            problems.append(f"{at}.name {name!r} is a system account's")
        elif name in names:
            problems.append(f"{at}.name {name!r} is given twice")
        ids = {}
        for key in ("uid", "gid"):
            number = body.get(key, body.get("uid") if key == "gid" else None)
            if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
                problems.append(f"{at}.{key} must be a whole number from {low} to {high}")
            elif number in RESERVED_IDS:
                problems.append(f"{at}.{key} {number} is taken by sunk's images (slurmrestd, MariaDB)")
            else:
                ids[key] = number
        if ids.get("uid") in uids:
            problems.append(f"{at}.uid {ids['uid']} is given twice")
        keys = body.get("authorizedKeys") or []
        if not isinstance(keys, Sequence) or isinstance(keys, str):
            problems.append(f"{at}.authorizedKeys must be a list")
            keys = []
        elif len(keys) > MAX_KEYS:
            problems.append(f"{at}.authorizedKeys has {len(keys)} keys; at most {MAX_KEYS}")
            keys = []
        # (a YAML block scalar ends a pasted key with a newline: that one is no second line)
        keys = [line.strip() if isinstance(line, str) and "\n" not in line.strip() else line for line in keys]
        for j, line in enumerate(keys):
            if problem := key_problem(line):
                problems.append(f"{at}.authorizedKeys[{j}] {problem}")
            elif (owner := owners.setdefault(key_blob(line), str(name))) != name:
                problems.append(f"{at}.authorizedKeys[{j}] is {owner}'s key too: one key logs in as one user")
        if len(problems) == found and isinstance(name, str):
            names.add(name)
            uids.add(ids["uid"])
            out.append(LoginUser(name, ids["uid"], ids["gid"], keys))
    size = sum(len(k) + len(v) for k, v in files(out).items())
    if size > MAX_FILES_BYTES:
        return (), [*problems, f"{where}: their names and keys take {size} bytes; at most {MAX_FILES_BYTES} fit in "
                               f"the ConfigMap (fewer keys, or shorter comments)"]
    return tuple(out), problems


def passwd_text(users: Sequence[LoginUser]) -> str:
    """``/var/lib/extrausers/passwd``: no password (``x``, no shadow entry: keys only), a home under /home."""
    return "".join(f"{u.name}:x:{u.uid}:{u.gid}::{u.home}:{SHELL}\n" for u in sorted(users, key=lambda u: u.uid))


def group_text(users: Sequence[LoginUser]) -> str:
    """``/var/lib/extrausers/group``: one group per primary gid, named after the user whose uid it is, else the
    first user (by name) whose group it is: each user names at most one group, so no two share a name."""
    named: dict[int, str] = {}
    for user in sorted(users, key=lambda u: (u.uid != u.gid, u.name)):
        named.setdefault(user.gid, user.name)
    return "".join(f"{name}:x:{gid}:\n" for gid, name in sorted(named.items()))


def files(users: Sequence[LoginUser]) -> dict[str, str]:
    """The users ConfigMap's data: passwd, group, and ``authorized_keys.<name>`` for each user with keys."""
    data = {"passwd": passwd_text(users), "group": group_text(users)}
    for user in users:
        if user.keys:
            data[f"{AUTHORIZED_KEYS_PREFIX}{user.name}"] = "".join(f"{key}\n" for key in user.keys)
    return data
