"""sunk-mariadb's entrypoint (dev/sunk_dev/imagefiles/mariadb-entrypoint.sh), run with stand-ins for
mariadb-install-db and mariadbd that record what they were asked: the datadir made once, the database and
user from the environment and the password from its file, MariaDB on 0.0.0.0:3306, bad input refused.
MariaDB itself runs in tests/cluster/test_slurmcluster_pods.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sunk_dev import slurmimages as si

ENTRYPOINT = si.IMAGE_FILES_DIR / "mariadb-entrypoint.sh"
STAND_INS = {
    "mariadb-install-db": 'echo "$@" >> "$RECORD/install"; for a; do case $a in --datadir=*) '
                          'mkdir -p "${a#--datadir=}/mysql";; esac; done',
    "mariadbd": 'echo "$@" > "$RECORD/server"; for a; do case $a in --init-file=*) '
                'cp "${a#--init-file=}" "$RECORD/init.sql";; esac; done',
}


def run(tmp_path: Path, password: bytes = b"Secret42", **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir, record = tmp_path / "bin", tmp_path / "record"
    for d in (bin_dir, record, tmp_path / "tmp"):
        d.mkdir(exist_ok=True)
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "password").write_bytes(password)
    environ = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RECORD": str(record), "TMPDIR": str(tmp_path / "tmp"),
               "MARIADB_DATADIR": str(tmp_path / "data" / "db"), "MARIADB_DATABASE": "slurm_acct_db",
               "MARIADB_USER": "slurm", "MARIADB_PASSWORD_FILE": str(tmp_path / "password"), **env}
    return subprocess.run(["/bin/sh", str(ENTRYPOINT), "--log-warnings=2"], env=environ, capture_output=True,
                          text=True, check=False)


def test_it_is_an_executable_file_the_image_carries_as_its_entrypoint():
    assert os.access(ENTRYPOINT, os.X_OK)
    assert si.role_named("mariadb").entrypoint == (f"/{si.MARIADB_ENTRYPOINT}",)
    assert si.role_files("mariadb") == ((si.MARIADB_ENTRYPOINT, ENTRYPOINT),)


def test_a_fresh_datadir_is_made_then_mariadb_serves_on_every_address_with_the_database_and_user(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    record = tmp_path / "record"
    install = (record / "install").read_text().split()
    assert f"--datadir={tmp_path}/data/db" in install and "--no-defaults" in install
    server = (record / "server").read_text().split()
    assert {"--no-defaults", f"--datadir={tmp_path}/data/db", "--bind-address=0.0.0.0", "--port=3306",
            "--log-warnings=2"} <= set(server)
    sql = (record / "init.sql").read_text()
    assert "CREATE DATABASE IF NOT EXISTS `slurm_acct_db`;" in sql
    assert "CREATE USER IF NOT EXISTS 'slurm'@'%' IDENTIFIED BY 'Secret42';" in sql
    assert "ALTER USER 'slurm'@'%' IDENTIFIED BY 'Secret42';" in sql  # a changed Secret, at the next start
    assert "GRANT ALL PRIVILEGES ON `slurm_acct_db`.* TO 'slurm'@'%';" in sql
    assert "Secret42" not in " ".join(server)  # the password is in no command line


def test_an_initialised_datadir_is_not_initialised_again(tmp_path):
    assert run(tmp_path).returncode == 0
    assert run(tmp_path).returncode == 0
    assert len((tmp_path / "record" / "install").read_text().splitlines()) == 1


def test_the_init_file_is_private(tmp_path):
    assert run(tmp_path).returncode == 0
    (init,) = (tmp_path / "tmp").iterdir()
    assert init.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("password", [b"", b"it's", b"a b", b"back\\slash", b"a\nb", b"semi;colon#"])
def test_a_password_that_is_not_one_plain_value_is_refused_before_anything_starts(tmp_path, password):
    done = run(tmp_path, password)
    assert done.returncode != 0 and "sunk-mariadb: the password" in done.stderr
    assert not (tmp_path / "record" / "server").exists() and not (tmp_path / "record" / "install").exists()


@pytest.mark.parametrize("env", [{"MARIADB_USER": "x'; DROP"}, {"MARIADB_DATABASE": ""},
                                 {"MARIADB_DATABASE": "a`b"}, {"MARIADB_PASSWORD_FILE": "/nonexistent"}])
def test_a_name_or_password_file_that_would_not_do_is_refused(tmp_path, env):
    done = run(tmp_path, **env)
    assert done.returncode != 0 and "sunk-mariadb:" in done.stderr
    assert not (tmp_path / "record" / "server").exists()
