"""Slurm 25.11 from source and pyslurm against it: the pure parts of ``sunk_dev.slurmbuild``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sunk_dev import chroot, release, slurmbuild

BUILT = release.RELEASES["25.11"]


def test_the_client_conf_points_at_the_chroots_plugins_and_munge_socket_and_keeps_the_rest():
    conf = ("ClusterName=dev\nSlurmUser=slurm\nPluginDir=/elsewhere\nAuthType=auth/munge\nAuthInfo=socket=/x\n"
            "SlurmctldPort=6817\n")
    client = slurmbuild.client_conf(conf, Path("/cache/chroot-bookworm-abc"), "sunk-slurm")
    lines = client.splitlines()
    assert "ClusterName=dev" in lines and "AuthType=auth/munge" in lines and "SlurmctldPort=6817" in lines
    assert [line for line in lines if line.startswith("PluginDir=")] == [
        "PluginDir=/cache/chroot-bookworm-abc/usr/lib/slurm"]
    assert [line for line in lines if line.startswith("SlurmUser=")] == ["SlurmUser=sunk-slurm"]  # the host uid
    assert [line for line in lines if line.startswith("AuthInfo=")] == [
        "AuthInfo=socket=/cache/chroot-bookworm-abc/run/munge/munge.socket.2"]


def test_a_clients_environment_names_its_conf_and_libslurms_directories():
    env = slurmbuild.client_env(Path("/c/root"), Path("/c/run/slurm-client.conf"))
    assert env == {"SLURM_CONF": "/c/run/slurm-client.conf", "LD_LIBRARY_PATH": "/c/root/usr/lib:/c/root/usr/lib/slurm"}


def test_the_build_script_configures_with_what_sunk_needs_installs_and_records_the_version():
    script = slurmbuild.build_script(BUILT.source, jobs=2)
    assert script.startswith("set -eu\n")
    for flag in ("--with-jwt", "--with-json", "--with-http-parser", "--with-yaml", "--prefix=/usr"):
        assert flag in script
    steps = script.splitlines()
    assert steps.index("make -j2") < steps.index("make install")
    assert "echo 25.11.7 > /usr/share/sunk-dev/slurm-version" in steps
    assert steps[-1] == "rm -rf /usr/src/slurm-25.11.7"


def test_the_chroot_of_a_built_release_is_named_by_its_source_so_another_tarball_builds_anew(tmp_path):
    other = release.SlurmRelease(BUILT.name, BUILT.suite, BUILT.packages,
                                 source=release.SlurmSource(BUILT.source.tarball, "0" * 64), pyslurm=BUILT.pyslurm)
    assert chroot.chroot_dir(tmp_path, BUILT) != chroot.chroot_dir(tmp_path, other)
    assert chroot.chroot_dir(tmp_path, BUILT).name.startswith("chroot-bookworm-")


def test_the_tarball_is_taken_only_with_the_pinned_checksum_and_kept_in_the_cache(tmp_path, monkeypatch):
    content = b"not really slurm"
    source = release.SlurmSource("slurm-25.11.7.tar.xz", hashlib.sha256(content).hexdigest())
    monkeypatch.setattr(slurmbuild, "WORKPLACE_VENDOR", tmp_path / "nowhere")
    project, cache = tmp_path / "checkout" / "main", tmp_path / "cache"
    vendor = project.parent / "shared" / "vendor"
    vendor.mkdir(parents=True)
    (vendor / source.tarball).write_bytes(b"tampered")
    with pytest.raises(RuntimeError, match="sha256 .* want"):
        slurmbuild.find_source(source, project, cache)
    assert not (cache / "vendor" / source.tarball).exists()  # (a copy that failed its check is not kept)
    (vendor / source.tarball).write_bytes(content)
    kept = cache / "vendor" / source.tarball
    assert slurmbuild.find_source(source, project, cache) == kept  # what is built is the copy checked
    assert kept.read_bytes() == content
    (vendor / source.tarball).unlink()  # a later build (another clone) finds the cache's copy
    assert slurmbuild.find_source(source, project, cache) == kept and kept.read_bytes() == content


def test_a_missing_tarball_says_where_it_looked_and_which_variable_to_set(tmp_path, monkeypatch):
    monkeypatch.setattr(slurmbuild, "WORKPLACE_VENDOR", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match=slurmbuild.SOURCE_DIR_ENV) as caught:
        slurmbuild.find_source(BUILT.source, tmp_path / "main", tmp_path / "cache")
    assert "(missing)" in str(caught.value)


def test_a_command_run_in_a_chroot_never_inherits_the_host_clients_slurm_conf_or_loader_path():
    from sunk_dev.procs import chroot_env

    env = {"SLURM_CONF": "/host/run/slurm-client.conf", "LD_LIBRARY_PATH": "/host/lib", "PATH": "/usr/bin",
           "SLURM_JWT": "a token of whichever release ran when the shell took it"}
    assert chroot_env(["chroot", "/root", "sacctmgr"], env) == {"PATH": "/usr/bin"}
    assert chroot_env(["/usr/sbin/chroot", "--userspec=a:b", "/root", "x"], env) == {"PATH": "/usr/bin"}
    assert chroot_env(["python3", "-m", "sunk.commands.scheduler"], env) == env  # a host client keeps them
    assert chroot_env(["python3"], None) is None


def test_apt_installs_wait_for_each_other_and_for_dpkgs_lock(tmp_path, monkeypatch):
    """make test builds 25.11 in the background while the tests' up installs packages: two apt-gets at once
    failed on dpkg's lock."""
    from sunk_dev import procs

    ran: list[list[str]] = []
    monkeypatch.setattr(procs, "APT_LOCK", tmp_path / "apt.lock")
    monkeypatch.setattr(procs.subprocess, "run", lambda argv, **_: ran.append(list(argv)))
    procs.apt_install(["libmunge2", "libjwt0"], log=None)
    assert [argv[:4] for argv in ran] == [["apt-get", "-o", "DPkg::Lock::Timeout=600", "update"],
                                         ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install"]]
    assert ran[1][-2:] == ["libmunge2", "libjwt0"] and (tmp_path / "apt.lock").exists()


def test_the_pyslurm_sdist_is_pinned_by_hash_and_the_wheel_built_from_the_patched_tree_alone():
    line = slurmbuild.requirement(BUILT)
    assert line.startswith("pyslurm==25.11.2 --hash=sha256:") and len(line.split(":")[-1].strip()) == 64
    args = slurmbuild.download_args(Path("/t/req.txt"), Path("/t/sdist"))
    assert "--require-hashes" in args and args[args.index("-r") + 1] == "/t/req.txt"
    assert args[args.index("--no-binary") + 1] == ":all:" and args[args.index("-d") + 1] == "/t/sdist"
    args = slurmbuild.build_args(Path("/t/src/pyslurm-25.11.2"), Path("/t/out"))
    assert "--no-index" in args and "/t/src/pyslurm-25.11.2" in args and args[args.index("-w") + 1] == "/t/out"


# -- sunk's patch to pyslurm -----------------------------------------------------------------------------

ORIGINAL = "one\ntwo\nthree\nfour\nfive\nsix\n"
PATCH = """\
A description, as sunk's patches have: ignored.

--- a/pkg/mod.pyx
+++ b/pkg/mod.pyx
@@ -1,3 +1,4 @@
 one
+one and a half
 two
 three
@@ -5,2 +6,2 @@
 five
-six
+SIX
--- a/pkg/other.py
+++ b/pkg/other.py
@@ -1 +1 @@
-x = 1
+x = 2
"""


def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/mod.pyx").write_text(ORIGINAL)
    (tmp_path / "pkg/other.py").write_text("x = 1\n")
    return tmp_path


def test_a_patch_applies_every_hunk_of_every_file(tmp_path):
    root = tree(tmp_path)
    assert slurmbuild.apply_patch(root, PATCH) == ("pkg/mod.pyx", "pkg/other.py")
    assert (root / "pkg/mod.pyx").read_text() == "one\none and a half\ntwo\nthree\nfour\nfive\nSIX\n"
    assert (root / "pkg/other.py").read_text() == "x = 2\n"


@pytest.mark.parametrize(("change", "message"), [
    (lambda p: p.replace(" three\n@@", " THREE\n@@"), "at line 1 does not match"),  # context differs
    (lambda p: p.replace("-x = 1", "-x = 7"), "other.py: the hunk at line 1 does not match"),  # removed line differs
    (lambda p: p.replace("@@ -5,2 +6,2 @@", "@@ -4,2 +5,2 @@"), "does not match"),  # moved: no fuzz, no offset
    (lambda p: p.replace("+++ b/pkg/other.py", "+++ b/pkg/missing.py"), "missing.py: no such file"),
    (lambda p: p.replace("+++ b/pkg/other.py", "+++ b/../outside.py"), "inside the tree only"),
    (lambda p: p.replace("+++ b/pkg/other.py", "+++ /etc/passwd"), "inside the tree only"),
    (lambda p: p.replace("@@ -1 +1 @@", "@@ -1 +1,2 @@"), "ends early"),
    (lambda p: p.replace("@@ -1 +1 @@", "@@ one @@"), "not a hunk header"),
    (lambda p: p.replace("+SIX\n", "+SIX\nstray\n"), "a line outside any hunk"),
    (lambda p: p.split("--- a/pkg/mod.pyx")[0], "no hunks"),
], ids=["context", "removed", "moved", "missing-file", "dotdot", "absolute", "short", "header", "stray", "empty"])
def test_a_patch_that_does_not_apply_exactly_changes_nothing_and_says_where(tmp_path, change, message):
    root = tree(tmp_path)
    with pytest.raises(slurmbuild.PatchError, match=message):
        slurmbuild.apply_patch(root, change(PATCH))
    assert (root / "pkg/mod.pyx").read_text() == ORIGINAL and (root / "pkg/other.py").read_text() == "x = 1\n"


def test_hunks_that_overlap_are_refused():
    hunks = slurmbuild.parse_patch(PATCH.replace("@@ -5,2 +6,2 @@\n five\n-six\n+SIX\n",
                                                 "@@ -2,1 +3,1 @@\n-two\n+TWO\n"))
    with pytest.raises(slurmbuild.PatchError, match="overlaps"):
        slurmbuild.apply_hunks("pkg/mod.pyx", ORIGINAL, [h for h in hunks if h.path == "pkg/mod.pyx"])


def test_a_hunk_that_only_adds_goes_after_the_line_its_header_names():
    hunks = slurmbuild.parse_patch("--- a/f\n+++ b/f\n@@ -2,0 +3,1 @@\n+new\n")
    assert slurmbuild.apply_hunks("f", "a\nb\nc\n", hunks) == "a\nb\nnew\nc\n"


def test_sunks_pyslurm_patch_parses_and_touches_only_the_job_submission():
    hunks = slurmbuild.parse_patch(slurmbuild.pyslurm_patch(BUILT))
    assert {h.path for h in hunks} == {"pyslurm/core/job/submission.pxd", "pyslurm/core/job/submission.pyx",
                                       "pyslurm/core/job/util.pyx", "pyslurm/core/job/sbatch_opts.pyx"}
    added = "".join(line for h in hunks for line in h.new if line not in h.old)
    assert "cstr.fmalloc(&ptr.prefer, self.prefer)" in added and "return slurm.JOB_SHARED_TOPO" in added


def test_the_wheels_version_and_cache_name_the_patch_so_a_changed_patch_builds_and_installs_anew(tmp_path):
    version = slurmbuild.patched_version(BUILT)
    digest = hashlib.sha256(slurmbuild.pyslurm_patch(BUILT).encode()).hexdigest()[:8]
    assert version == f"25.11.2+sunk{digest}"
    assert slurmbuild.patched_version(BUILT, "another patch") != version
    assert slurmbuild.patched_version(BUILT, "") == "25.11.2"  # (a release without a patch: pyslurm's own)
    assert slurmbuild.wheel_dir(tmp_path, BUILT).name == f"pyslurm-{version}-{BUILT.source.sha256[:12]}"
    from packaging.version import Version

    assert str(Version(version)) == version  # pip records it as written, so installed_pyslurm compares equal


def test_the_version_is_stamped_where_pyslurms_setup_reads_it():
    text = '# comment\n__version__ = "25.11.2"\n'
    assert slurmbuild.stamp_version(text, "25.11.2+sunkabc") == '# comment\n__version__ = "25.11.2+sunkabc"\n'
    with pytest.raises(slurmbuild.PatchError, match="0 __version__ lines"):
        slurmbuild.stamp_version("# nothing\n", "1")


def test_the_sdist_is_unpacked_only_with_its_pinned_hash(tmp_path):
    fake = tmp_path / "pyslurm-25.11.2.tar.gz"
    fake.write_bytes(b"not the sdist")
    with pytest.raises(RuntimeError, match="sha256 .* want"):
        slurmbuild.unpack_patched(fake, BUILT, tmp_path / "src")
    assert not (tmp_path / "src").exists()


def test_a_patch_splits_lines_on_newlines_only_and_keeps_the_files_bytes(tmp_path):
    """A form feed or a Unicode line separator inside a line is part of it (str.splitlines would split there),
    and a CRLF file keeps its CRs (no newline translation)."""
    (tmp_path / "m.py").write_bytes("a = 1\x0c  # page\r\nb = '\u2028'\r\n".encode())
    patch = ("--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n a = 1\x0c  # page\r\n-b = '\u2028'\r\n+b = 2\r\n")
    assert slurmbuild.apply_patch(tmp_path, patch) == ("m.py",)
    assert (tmp_path / "m.py").read_bytes() == b"a = 1\x0c  # page\r\nb = 2\r\n"
