"""``sunk-dev``: the local dev cluster (real Slurm 24.11 or 26.05 + real kube-apiserver)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from . import chroot, release
from .cluster import DevCluster, default_home
from .procs import chroot_env


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="sunk-dev", description=__doc__)
    parser.add_argument("--home", default=str(default_home()), help="cache and state dir (env SUNK_DEV_HOME)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="bring every component up (idempotent)")
    up.add_argument("--nodes", type=int, default=int(os.environ.get("SUNK_DEV_NODES", "4")))
    up.add_argument("--phantom-nodes", type=int, default=0, help="extra Slurm nodes with no slurmd (benchmarks)")
    up.add_argument("--sunk", action="store_true", help="also run sunk-scheduler and sunk-syncer from this checkout")
    up.add_argument("--slurm-on-kubernetes", action="store_true",
                    help="also Slurm deployed by the chart (a SlurmCluster, a NodeSet) as Pods on two real kubelet "
                         "Nodes, from the images built here: release sunk in namespace slurm-on-k8s; without it, "
                         "`up` takes that down")
    up.add_argument("--slurm", choices=tuple(release.RELEASES), default=None,
                    help=f"the Slurm release (env {release.ENV}; default {release.DEFAULT.name}); another one "
                         "running is stopped first, Kubernetes stays up")
    build = sub.add_parser("build", help="build what a Slurm release needs (its chroot; for 25.11 Slurm from source "
                                         "and the pyslurm wheel) without starting anything; safe beside a "
                                         "running cluster and another build")
    build.add_argument("--slurm", choices=tuple(release.RELEASES), default=None)
    built = sub.add_parser("images", help="write every image (sunk, its pyslurm variant, the Slurm images of each "
                                          "release) as docker archives ready to push, with index.json and images.txt "
                                          "(docs/images.md); builds a missing chroot, starts nothing")
    built.add_argument("--slurm", action="append", choices=tuple(release.RELEASES), default=None,
                       help="a Slurm release (repeatable; default: every one)")
    built.add_argument("--out", default=None, help="where the archives go (default: HOME/images/out)")
    sub.add_parser("down", help="stop, by PID, everything `up` started")
    sub.add_parser("status", help="every component, healthy or not")
    sub.add_parser("env", help="shell exports for clients: eval \"$(sunk-dev env)\"")
    slurm = sub.add_parser("slurm", help="run a Slurm command inside the chroot, e.g. sunk-dev slurm sinfo")
    slurm.add_argument("argv", nargs=argparse.REMAINDER)
    for program in ("kubectl", "helm"):
        sub.add_parser(program, help=f"{program} of the dev cluster's version, against it").add_argument(
            "argv", nargs=argparse.REMAINDER)
    sub.add_parser("run", help="run a command with `env`'s exports, e.g. sunk-dev run pytest tests/cluster "
                               "(a pyslurm client's loader path is read when a process starts)").add_argument(
        "argv", nargs=argparse.REMAINDER)
    sub.add_parser("demo", help="up, then show both sides")
    argv = list(sys.argv[1:] if argv is None else argv)
    at = next((i for i, a in enumerate(argv) if a in ("kubectl", "helm", "slurm", "run")), None)
    passed: list[str] = []
    if at is not None:  # everything after the tool's name is the tool's, options included (-n slurm)
        argv, passed = argv[:at + 1], argv[at + 1:]
    args = parser.parse_args(argv)
    if at is not None:
        args.argv = passed

    home = Path(args.home)
    if args.command == "up":
        try:
            wanted = release.chosen(args.slurm)
        except ValueError as exc:  # (SUNK_DEV_SLURM names no release)
            parser.error(str(exc))
        cluster = DevCluster(home, nodes=args.nodes, phantom_nodes=args.phantom_nodes, with_sunk=args.sunk or None,
                             slurm=wanted, slurm_on_kubernetes=args.slurm_on_kubernetes)
        with cluster.claimed("sunk-dev up"):  # (a test session meanwhile would see its Slurm switched under it)
            cluster.up()
            return _print_status(DevCluster(home))
    if args.command == "build":
        from .cluster import CHECKOUT
        from .slurmbuild import ensure_wheel

        wanted = release.chosen(args.slurm)
        root = chroot.ensure_chroot(home, wanted, log=sys.stdout, project=CHECKOUT)
        if wanted.pyslurm:
            print(ensure_wheel(root, wanted, home, sys.stdout))
        return 0
    if args.command == "images":
        return _images(home, args.slurm or list(release.RELEASES), Path(args.out) if args.out else None)
    cluster = DevCluster(home)
    if args.command == "down":
        stopped = cluster.down()
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if args.command == "status":
        return _print_status(cluster)
    if args.command == "env":
        for key, value in cluster.env().items():
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if args.command == "slurm":
        if not args.argv:
            parser.error("slurm needs a command, e.g. sunk-dev slurm sinfo")
        os.execvpe("chroot", ["chroot", str(cluster.root), *args.argv], chroot_env(["chroot"], None) or {})
    if args.command in ("kubectl", "helm"):
        env = {**os.environ, **cluster.env()}
        os.execvpe(args.command, [args.command, *args.argv], env)
    if args.command == "run":
        command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not command:
            parser.error("run needs a command, e.g. sunk-dev run pytest tests/cluster")
        env = {**os.environ, **cluster.env()}
        if cluster.release.pyslurm:  # (libslurm authenticates by JWT when it is set: pyslurm's way is munge's)
            env.pop("SLURM_JWT", None)
        os.execvpe(command[0], command, env)
    if args.command == "demo":  # (like `up`: the release SUNK_DEV_SLURM names, else the default)
        from .demo import demo

        return demo(DevCluster(home, slurm=release.chosen()))
    return 2


def _images(home: Path, names: list[str], out: Optional[Path]) -> int:
    import sunk

    from . import phases
    from .cluster import CHECKOUT
    from .slurmimages import write_images

    target = out or home / "images" / "out"
    log_path = home / "run" / "logs" / "images.log"
    built = write_images(home, CHECKOUT, [release.by_name(n) for n in dict.fromkeys(names)], target,
                         sunk.__version__, lambda name: phases.log_phase(name, log_path))
    for image in built:
        print(f"{image.name} {image.image_id[:19]} {image.archive}")
    print(f"index: {target / 'index.json'}")
    return 0


def _print_status(cluster: DevCluster) -> int:
    version = chroot.slurm_version(cluster.root) if cluster.root.exists() else ""
    print(f"    {'slurm release':<16} {cluster.release.describe(version)}")
    rows = cluster.status()
    for row in rows:
        mark = "ok " if row.healthy else "BAD"
        print(f"{mark} {row.name:<16} pid={row.pid or '-':<8} {row.detail}")
    return 0 if all(r.healthy for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
