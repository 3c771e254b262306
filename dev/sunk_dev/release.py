"""Which Slurm release the dev cluster runs: one value, chosen once, that everything else follows.

sunk talks to slurmrestd's OpenAPI v0.0.42, which every release from 24.11 to 26.05 serves. The dev
cluster runs three: two from the Debian suite that ships each, 24.11 (trixie, the default) and
26.05 (sid), and 25.11, which no suite ships, built from SchedMD's source (vendored beside the
checkout, checksum pinned here) in a bookworm chroot, whose glibc and Python are the host's: the
host's pyslurm 25.11 links that build's libslurmfull (``sunk_dev.slurmbuild``). A release is picked
by ``sunk-dev up --slurm NAME`` or ``SUNK_DEV_SLURM=NAME``; the chroot (and so Slurm's own state:
StateSaveLocation, MariaDB's accounting schema, which a newer release upgrades and an older one
refuses), the slurmd image and the failure messages of the tests all follow from it, so no code
asks "which release?" anywhere else.

Kubernetes' etcd always runs from the default release's chroot (its data lives there), so switching
Slurm releases leaves the Kubernetes side as it is.

Pure: no I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Optional

from attrs import frozen

ENV = "SUNK_DEV_SLURM"
# The default release's chroot also carries etcd (Kubernetes' store, whatever Slurm runs). This
# tuple, its order and the suite make the cached chroot's name: change them and every dev cache
# debootstraps anew (and loses its etcd and MariaDB data).
SLURM_PACKAGES = (
    "slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin", "slurmdbd",
    "mariadb-server", "munge",
)
KUBE_PACKAGES = ("etcd-server",)
# (openssh-server and libnss-extrausers: the login image's sshd, and the SlurmCluster's users known to login and
# slurmctld from a ConfigMap, sunk.translate.slurmcluster.users)
TOOLS = ("curl", "procps", "iproute2", "openssh-server", "libnss-extrausers")


# 25.11 from source: what the build needs (configure's --with-* below; libdbus for the cgroup/v2 plugin, which
# configure leaves out without it; python3 for its HTML pages) and what its daemons need at run time besides
# Slurm (MariaDB for slurmdbd, munge).
SOURCE_BUILD_PACKAGES = (
    "build-essential", "pkg-config", "libmunge-dev", "libjwt-dev", "libjson-c-dev", "libhttp-parser-dev",
    "libyaml-dev", "libmariadb-dev", "libmariadb-dev-compat", "libdbus-1-dev", "python3", "mariadb-server", "munge",
)


@frozen
class SlurmSource:
    """A Slurm release taken from SchedMD's source tarball: its file name and pinned checksum (what
    is built is named by the checksum, never by whatever file sits at that name)."""

    tarball: str
    sha256: str

    @property
    def directory(self) -> str:
        """The tarball's top directory: ``slurm-25.11.7``."""
        return self.tarball.removesuffix(".tar.xz").removesuffix(".tar.bz2")

    @property
    def version(self) -> str:
        return self.directory.removeprefix("slurm-")


@frozen
class SlurmRelease:
    """A Slurm release the dev cluster can run: its name (what ``--slurm`` takes), the Debian suite
    its chroot is made from, the packages in it, and, for a release no suite ships, the source it
    is built from (``pyslurm``: the pyslurm release built against it, none for Debian's)."""

    name: str
    suite: str
    packages: tuple[str, ...]
    source: Optional[SlurmSource] = None
    pyslurm: str = ""

    @property
    def version_prefix(self) -> str:
        """What the chroot's Slurm version must start with: ``26.05.`` (sid moves on; this says when)."""
        return self.name + "."

    def matches(self, version: str) -> bool:
        return version.startswith(self.version_prefix)

    def describe(self, version: str = "") -> str:
        """``Slurm 26.05.5 (Debian sid)``: what a log line or a failed test names."""
        if self.source is not None:
            return f"Slurm {version or self.name} (source, on Debian {self.suite})"
        return f"Slurm {version or self.name} (Debian {self.suite})"


DEFAULT = SlurmRelease("24.11", "trixie", SLURM_PACKAGES + KUBE_PACKAGES + TOOLS)
SOURCE_25_11 = SlurmSource("slurm-25.11.7.tar.xz",
                           "f71f1e5f33a72e7864104a6857e86862eac3c4e5e348c92dd0c10dbe03a82dec")
RELEASES: Mapping[str, SlurmRelease] = {
    r.name: r for r in (
        DEFAULT,
        SlurmRelease("25.11", "bookworm", SOURCE_BUILD_PACKAGES + TOOLS, source=SOURCE_25_11, pyslurm="25.11.2"),
        SlurmRelease("26.05", "sid", SLURM_PACKAGES + TOOLS),
    )
}


def by_name(name: str) -> SlurmRelease:
    try:
        return RELEASES[name.strip()]
    except KeyError:
        raise ValueError(f"no Slurm release {name!r} in the dev cluster: one of {', '.join(RELEASES)}") from None


def chosen(flag: Optional[str] = None, environ: Mapping[str, str] = os.environ) -> SlurmRelease:
    """The release asked for: the flag, else ``SUNK_DEV_SLURM``, else the default (never "whatever runs":
    a test run must know what it tests)."""
    name = flag or environ.get(ENV, "").strip()
    return by_name(name) if name else DEFAULT


def of_version(version: str, flag: Optional[str] = None) -> SlurmRelease:
    """The release a chroot with Slurm ``version`` holds, for naming what is built from it (the slurmd
    image's tag): ``flag`` (``--slurm``) if given must agree, since a tag naming another release than
    the binaries inside would pass for that release. ValueError says which of the two to change."""
    match = next((r for r in RELEASES.values() if r.matches(version)), None)
    if flag:
        named = by_name(flag)
        if match != named:
            hint = f" (release {match.name}: drop --slurm or give that)" if match else ""
            raise ValueError(f"--slurm {named.name} does not match the chroot's Slurm {version or '(none)'}{hint}")
        return named
    if match is None:
        raise ValueError(f"the chroot has Slurm {version or '(none)'}, none of the dev cluster's releases "
                         f"({', '.join(RELEASES)})")
    return match


BACKEND_ENV = "SUNK_DEV_SLURM_BACKEND"


def daemon_backend(release: SlurmRelease, environ: Mapping[str, str] = os.environ) -> str:
    """The Slurm backend the daemons a test starts use: ``rest`` unless ``SUNK_DEV_SLURM_BACKEND``
    says ``pyslurm``, which only a release built with pyslurm has (ValueError otherwise: a run asking
    for pyslurm must never quietly test REST)."""
    name = environ.get(BACKEND_ENV, "").strip() or "rest"
    if name not in ("rest", "pyslurm"):
        raise ValueError(f"{BACKEND_ENV}={name!r}: rest or pyslurm")
    if name == "pyslurm" and not release.pyslurm:
        raise ValueError(f"{BACKEND_ENV}=pyslurm, but the dev cluster's Slurm {release.name} has no pyslurm "
                         f"(only {', '.join(r.name for r in RELEASES.values() if r.pyslurm)})")
    return name


def saved(data: Mapping[str, Any]) -> SlurmRelease:
    """The release recorded in ``run/layout.json`` (none recorded: written before there were two)."""
    name = data.get("slurm")
    return by_name(name) if isinstance(name, str) and name else DEFAULT


def debian_upstream(version: str) -> str:
    """``1:26.05.5-1+b1`` (dpkg's version of slurmctld) -> ``26.05.5``."""
    return version.strip().split(":", 1)[-1].rsplit("-", 1)[0]


def check_version(release: SlurmRelease, version: str) -> str:
    """``version`` if it is ``release``'s, else a RuntimeError that says what to change."""
    if not release.matches(version):
        if release.source is not None:
            raise RuntimeError(f"the {release.suite} chroot built from {release.source.tarball} has Slurm "
                               f"{version or '(none)'}, not {release.name}: its build did not finish; "
                               "`sunk-dev down`, remove the chroot from the cache and `up` again")
        raise RuntimeError(f"the {release.suite} chroot has Slurm {version or '(none)'}, not {release.name}: "
                         f"Debian {release.suite} has moved on; name the release it ships in dev/sunk_dev/release.py")
    return version


def tag_failure(report: Any, text: str) -> None:
    """Name the Slurm release in a failed test's report: its one-line summary (``-ra``'s FAILED
    line) and a section of its own. Duck-typed on pytest's TestReport; a report without a crash
    line (a collection error) gets the section only."""
    report.sections.append(("Slurm release", f"failed against {text}"))
    short = f"[{text.split(' (')[0]}]"  # "[Slurm 26.05.5]": a summary line is cut at the terminal's width
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    if crash is not None and not str(crash.message).startswith(short):
        crash.message = f"{short} {crash.message}"
