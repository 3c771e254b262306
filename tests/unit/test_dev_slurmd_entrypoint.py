"""sunk-slurmd's entrypoint (dev/sunk_dev/imagefiles/slurmd-entrypoint.sh), run with a stand-in slurmd that
records its arguments and the configuration directory it was given: a dynamic node named and registered from
the NodeSet's environment, and with gres.conf lines a directory of its own whose gres.conf is the mounted one
plus the node's lines while every other file still follows the mounted one. The image's slurmd runs it on the
dev cluster's real Node (tests/cluster)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sunk_dev import slurmimages as si

ENTRYPOINT = si.IMAGE_FILES_DIR / "slurmd-entrypoint.sh"
# records its arguments, one per line, and (with -f) the gres.conf and slurm.conf of that directory
STAND_IN = '''for a; do printf '%s\\n' "$a"; done > "$RECORD/args"
prev=
for a; do
  if [ "$prev" = -f ]; then cp "${a%/*}/gres.conf" "$RECORD/gres.conf"; cat "$a" > "$RECORD/slurm.conf"; fi
  prev=$a
done'''
GRES_LINES = "NodeName=g-1 Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"


def run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir, record, etc = tmp_path / "bin", tmp_path / "record", tmp_path / "etc"
    for d in (bin_dir, record, etc):
        d.mkdir(exist_ok=True)
    (bin_dir / "slurmd").write_text(f"#!/bin/sh\n{STAND_IN}\n")
    (bin_dir / "slurmd").chmod(0o755)
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(record), "SLURM_CONF": str(etc / "slurm.conf"),
               "SUNK_SLURMD_CONF_DIR": str(tmp_path / "run"), **env}
    done = subprocess.run(["/bin/sh", str(ENTRYPOINT), *args], env=environ, capture_output=True, text=True,
                          check=False)
    recorded = (record / "args").read_text().splitlines() if (record / "args").exists() else []
    return done, recorded


def _mounted_config(tmp_path: Path, gres: str | None = "AutoDetect=nvml\n") -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("ClusterName=c\n")
    (etc / "topology.yaml").write_text("- topology: t\n")
    if gres is not None:
        (etc / "gres.conf").write_text(gres)
    return etc


def test_it_is_an_executable_file_the_image_carries_as_its_entrypoint():
    assert os.access(ENTRYPOINT, os.X_OK)
    assert si.role_named("slurmd").entrypoint == (f"/{si.SLURMD_ENTRYPOINT}",)
    assert si.role_named("slurmd").cmd == ()
    assert si.role_files("slurmd") == ((si.SLURMD_ENTRYPOINT, ENTRYPOINT),)


def test_a_nodeset_pod_registers_under_its_name_with_its_registration_and_the_mounted_configuration(tmp_path):
    _mounted_config(tmp_path)
    conf = "Feature=nodeset-gpu,h100 Gres=nic:2"
    done, args = run(tmp_path, "-vv", SUNK_SLURM_NODE_NAME="g-1", SUNK_SLURMD_CONF=conf)
    assert done.returncode == 0, done.stderr
    assert args == ["-D", "-Z", "-N", "g-1", "--conf", conf, "-vv"]
    assert not (tmp_path / "run").exists()  # no gres.conf lines: slurmd reads SLURM_CONF's directory itself


def test_without_the_operators_environment_it_is_a_plain_dynamic_slurmd(tmp_path):
    done, args = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert args == ["-D", "-Z"]


def test_gres_lines_give_slurmd_a_directory_whose_gres_conf_adds_them_to_the_mounted_one(tmp_path):
    etc = _mounted_config(tmp_path)
    done, args = run(tmp_path, SUNK_SLURM_NODE_NAME="g-1", SUNK_SLURMD_CONF="Gres=gpu:a100:4",
                     SUNK_GRES_CONF=GRES_LINES)
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "run" / "conf"
    assert args == ["-D", "-Z", "-N", "g-1", "--conf", "Gres=gpu:a100:4", "-f", f"{run_dir}/slurm.conf"]
    assert (tmp_path / "record" / "gres.conf").read_text() == "AutoDetect=nvml\n" + GRES_LINES + "\n"
    assert (tmp_path / "record" / "slurm.conf").read_text() == "ClusterName=c\n"
    # every other file is a link to the mounted one: a ConfigMap's update reaches slurmd's next read
    assert sorted(p.name for p in run_dir.iterdir()) == ["gres.conf", "slurm.conf", "topology.yaml"]
    for name in ("slurm.conf", "topology.yaml"):
        assert os.readlink(run_dir / name) == str(etc / name)
    (etc / "topology.yaml").write_text("- topology: changed\n")
    assert (run_dir / "topology.yaml").read_text() == "- topology: changed\n"
    assert not (run_dir / "gres.conf").is_symlink()


def test_a_mounted_configuration_without_gres_conf_gets_the_nodes_lines_alone(tmp_path):
    _mounted_config(tmp_path, gres=None)
    done, _ = run(tmp_path, SUNK_GRES_CONF=GRES_LINES)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "record" / "gres.conf").read_text() == GRES_LINES + "\n"


def test_a_restarted_container_starts_from_the_current_lines_not_the_last_starts(tmp_path):
    etc = _mounted_config(tmp_path)
    assert run(tmp_path, SUNK_GRES_CONF="NodeName=g-1 Name=gpu File=/dev/nvidia[0-7]\n")[0].returncode == 0
    (etc / "topology.yaml").unlink()  # gone from the ConfigMap meanwhile
    done, _ = run(tmp_path, SUNK_GRES_CONF=GRES_LINES)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "record" / "gres.conf").read_text() == "AutoDetect=nvml\n" + GRES_LINES + "\n"
    assert sorted(p.name for p in (tmp_path / "run" / "conf").iterdir()) == ["gres.conf", "slurm.conf"]


def test_an_unwritable_directory_fails_the_start_with_the_shells_error_before_slurmd(tmp_path):
    _mounted_config(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory")
    done, args = run(tmp_path, SUNK_GRES_CONF=GRES_LINES, SUNK_SLURMD_CONF_DIR=str(blocker / "run"))
    assert done.returncode != 0 and done.stderr
    assert args == []  # slurmd never started with a gres.conf that lacks the node's lines


def test_a_directory_writable_by_all_becomes_roots_alone_so_no_job_can_swap_what_slurmd_reads(tmp_path):
    """An emptyDir is mode 0777 and jobs run in the slurmd container as their users: left so, a job could
    replace a link with a slurm.conf of its own (a Prolog of its choosing, run as root)."""
    _mounted_config(tmp_path)
    base = tmp_path / "run"
    base.mkdir()
    base.chmod(0o777)
    (base / "conf").mkdir()
    (base / "conf" / "slurm.conf").write_text("Prolog=/tmp/mine\n")  # what a job left there
    (base / "conf").chmod(0o777)
    done, _ = run(tmp_path, SUNK_GRES_CONF=GRES_LINES)
    assert done.returncode == 0, done.stderr
    for directory in (base, base / "conf"):
        st = directory.stat()
        assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o755, 0, 0), directory
    assert (tmp_path / "record" / "slurm.conf").read_text() == "ClusterName=c\n"
    assert (base / "conf" / "slurm.conf").is_symlink()


def test_a_directory_that_holds_the_configuration_is_refused_before_anything_is_removed(tmp_path):
    etc = _mounted_config(tmp_path)
    for base in (etc, tmp_path):
        done, args = run(tmp_path, SUNK_GRES_CONF=GRES_LINES, SUNK_SLURMD_CONF_DIR=str(base))
        assert done.returncode != 0 and "sunk-slurmd: SUNK_SLURMD_CONF_DIR" in done.stderr
        assert args == []
    assert sorted(p.name for p in etc.iterdir()) == ["gres.conf", "slurm.conf", "topology.yaml"]
