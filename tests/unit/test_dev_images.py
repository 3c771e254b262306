"""sunk_dev.images: the docker archives the real kubelet Node imports, their keys and what they leave out."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from sunk.translate.nodeset import pod as nodeset_pod
from sunk.translate.nodeset.spec import read_spec
from sunk_dev import images, realnode, slurmimages

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "manifests/chart/sunk"
BASE = "sha256:" + "a" * 64
APP = "sha256:" + "b" * 64


# -- config and manifest ------------------------------------------------------------------------------

def test_two_layer_manifest_lists_the_layers_bottom_first_and_names_the_config_by_its_digest():
    spec = images.sunk_spec("0.1.0")
    member, config, manifest = images.archive_metadata(spec, [BASE, APP], "amd64")
    assert member == hashlib.sha256(config).hexdigest() + ".json"
    assert json.loads(config)["rootfs"] == {"type": "layers", "diff_ids": [BASE, APP]}
    (entry,) = json.loads(manifest)
    assert entry == {"Config": member, "RepoTags": ["docker.io/library/sunk:0.1.0"],
                     "Layers": ["a" * 64 + "/layer.tar", "b" * 64 + "/layer.tar"]}


def test_the_image_id_follows_the_layers():
    spec = images.sunk_spec("0.1.0")
    one = images.archive_metadata(spec, [BASE, APP], "amd64")[1]
    other = images.archive_metadata(spec, [BASE, "sha256:" + "c" * 64], "amd64")[1]
    assert images.image_id(one) != images.image_id(other)
    assert images.image_id(one) == images.image_id(images.archive_metadata(spec, [BASE, APP], "amd64")[1])


def test_sunk_runs_as_65532_with_the_venv_first_on_path_and_no_entrypoint():
    config = images.image_config(images.sunk_spec("0.1.0"), [BASE, APP], "amd64")["config"]
    assert config["User"] == "65532:65532"
    path = next(e for e in config["Env"] if e.startswith("PATH="))
    assert path.removeprefix("PATH=").split(":")[0] == "/opt/sunk/bin"
    assert "Entrypoint" not in config  # the chart's `command: [sunk-syncer]` is all that runs


def test_the_sunk_image_is_what_the_charts_default_reference_resolves_to():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert values["image"]["repository"] == "sunk" and not values["image"]["tag"]
    # containerd and the kubelet normalize `sunk:<appVersion>` to docker.io/library/sunk:<appVersion>
    assert images.sunk_spec(chart["appVersion"]).name == f"docker.io/library/sunk:{chart['appVersion']}"
SLURMD_IMAGE = slurmimages.slurmd_image_name("0.1.0", "24.11")


# -- cache keys ---------------------------------------------------------------------------------

def test_requirements_are_setup_cfgs_install_requires():
    reqs = images.requirements((ROOT / "setup.cfg").read_text())
    assert "flask>=3.0" in reqs and any(r.startswith("kubernetes") for r in reqs)
    assert not any(r.startswith("#") for r in reqs)


def test_the_base_key_changes_with_packages_and_requirements_only():
    key = images.base_key("bookworm", "http://m", ("python3",), ("flask>=3.0", "attrs"), "amd64")
    assert key == images.base_key("bookworm", "http://m", ("python3",), ("attrs", "flask>=3.0"), "amd64")
    assert key != images.base_key("bookworm", "http://m", ("python3", "curl"), ("attrs", "flask>=3.0"), "amd64")
    assert key != images.base_key("bookworm", "http://m", ("python3",), ("attrs", "flask>=3.1"), "amd64")
    assert key != images.base_key("trixie", "http://m", ("python3",), ("attrs", "flask>=3.0"), "amd64")


def test_the_app_key_changes_with_any_source_file_and_with_the_base():
    files = [("sunk/__init__.py", b"__version__ = '0.1.0'\n"), ("setup.cfg", b"[metadata]\n")]
    sources = images.sources_key(files)
    assert sources == images.sources_key(list(reversed(files)))
    assert sources != images.sources_key([files[0], ("setup.cfg", b"[metadata]\nname = x\n")])
    assert sources != images.sources_key([*files, ("sunk/new.py", b"")])
    moved = [("sunk/__init__.py", b"__version__ = '0.1.0'\n"), ("setup.cf", b"g[metadata]\n")]
    assert sources != images.sources_key(moved)  # the same bytes under another split
    assert images.app_key(BASE, sources) != images.app_key(APP, sources)


def test_the_download_is_for_the_images_python_whatever_runs_sunk_dev():
    argv = images.download_argv(Path("/w"), ("flask>=3.0",), "x86_64")
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert "--only-binary=:all:" in argv and "flask>=3.0" in argv and "pip" in argv
    assert "manylinux2014_x86_64" in argv


# -- what a layer leaves out --------------------------------------------------------------------

# What the dev chroot holds after `sunk-dev up` and the tests (checked on a used chroot).
CHROOT_SECRETS = (
    "etc/munge/munge.key", "etc/slurm/jwt.key", "etc/slurm/slurmdbd.conf", "var/lib/munge/munged.seed",
    "etc/sunk/hooks-tokens/node1", "etc/sunk/hooks.env", "root/.ssh/authorized_keys", "etc/ssl/private/snakeoil.key",
)
CHROOT_STATE = (
    "var/lib/mysql/ibdata1", "var/lib/sunk-etcd/member/snap/db", "var/spool/slurmctld/job_state",
    "var/spool/slurmd/node1/cred_state", "var/log/slurm/slurmctld.log", "run/munge/munge.socket.2",
    "tmp/slurm-100.out", "slurm-9933.out", "proc/1/environ", "dev/fakegpu0", "etc/sunk-bench/slurm.conf",
)


@pytest.mark.parametrize("name", CHROOT_SECRETS + CHROOT_STATE)
def test_the_slurmd_layer_leaves_out_secrets_and_state(name):
    assert images.excluded(name, images.SLURMD_EMPTIED)


@pytest.mark.parametrize("name", ["usr/sbin/slurmd", "usr/bin/scontrol", "usr/bin/curl", "etc/passwd", "etc/munge",
                                  "etc/slurm", "var/spool/slurmd", "run", "tmp", "usr/lib/x86_64-linux-gnu/slurm",
                                  "bin", "lib64", "dev", "proc", "sys"])
def test_the_slurmd_layer_keeps_binaries_users_and_mount_points(name):
    assert not images.excluded(name, images.SLURMD_EMPTIED)


def test_every_secret_of_the_chroot_is_flagged_and_no_binary_is():
    assert images.secrets_in(CHROOT_SECRETS) == list(CHROOT_SECRETS)
    assert images.secrets_in(["usr/sbin/slurmd", "etc/passwd", "usr/lib/systemd/systemd-random-seed",
                              "opt/sunk/lib/python3.11/site-packages/certifi/cacert.pem"]) == []


def test_the_sunk_base_leaves_out_apt_caches_but_keeps_the_venv():
    assert images.excluded("var/cache/apt/archives/python3_3.11.deb", images.ROOTFS_EMPTIED)
    assert images.excluded("var/lib/apt/lists/deb.debian.org_Packages", images.ROOTFS_EMPTIED)
    assert not images.excluded("opt/sunk/bin/python", images.ROOTFS_EMPTIED)
    assert not images.excluded("anything/at/all", (), top=None)


def test_the_nonroot_user_is_added_once():
    passwd = images.passwd_entry("root:x:0:0:root:/root:/bin/bash\n")
    assert passwd.splitlines()[-1] == "nonroot:x:65532:65532::/home/nonroot:/usr/sbin/nologin"
    assert images.passwd_entry(passwd) == passwd
    group = images.group_entry("root:x:0:\n")
    assert group.endswith("nonroot:x:65532:\n") and images.group_entry(group) == group


# -- layers and archives on disk (small trees under tmp_path) -------------------------------------------

def _tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def test_a_layer_and_an_archive_round_trip(tmp_path):
    rootfs = tmp_path / "rootfs"
    _tree(rootfs, {"usr/sbin/slurmd": b"ELF", "etc/munge/munge.key": b"secret", "tmp/x": b"", "slurm-1.out": b""})
    layer = images.write_layer(tmp_path / "base.tar", images.walk(rootfs, images.SLURMD_EMPTIED))
    assert layer.diff_id == "sha256:" + hashlib.sha256((tmp_path / "base.tar").read_bytes()).hexdigest()
    with tarfile.open(layer.path) as tar:
        assert tar.getnames() == ["etc", "etc/munge", "tmp", "usr", "usr/sbin", "usr/sbin/slurmd"]
        assert all(m.uname == "" for m in tar.getmembers())
    _tree(tmp_path / "target", {"sunk/__init__.py": b"", "bin/sunk-syncer": b"#!/opt/sunk/bin/python\n"})
    app = images.write_layer(tmp_path / "app.tar", images.app_members(tmp_path / "target"))
    with tarfile.open(app.path) as tar:
        assert tar.getnames() == ["opt/sunk/bin/sunk-syncer", "opt/sunk/lib/python3.11/site-packages/sunk",
                                  "opt/sunk/lib/python3.11/site-packages/sunk/__init__.py"]

    archive = tmp_path / "sunk.tar"
    ident = images.write_archive(archive, images.sunk_spec("0.1.0"), (layer, app), "amd64")
    with tarfile.open(archive) as tar:
        (entry,) = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        config = tar.extractfile(entry["Config"]).read()  # type: ignore[union-attr]
        assert images.image_id(config) == ident
        for member, diff_id in zip(entry["Layers"], json.loads(config)["rootfs"]["diff_ids"], strict=True):
            assert "sha256:" + hashlib.sha256(tar.extractfile(member).read()).hexdigest() == diff_id  # type: ignore[union-attr]
    before = archive.stat().st_mtime_ns
    assert images.write_archive(archive, images.sunk_spec("0.1.0"), (layer, app), "amd64") == ident
    assert archive.stat().st_mtime_ns == before  # the same image is not written again


def test_a_layer_with_a_secret_is_refused(tmp_path):
    _tree(tmp_path / "rootfs", {"etc/munge/munge.key": b"secret"})
    with pytest.raises(RuntimeError, match="munge.key"):
        images.write_layer(tmp_path / "layer.tar", images.walk(tmp_path / "rootfs", ()))
    assert not (tmp_path / "layer.tar").exists()


def test_an_image_is_imported_when_absent_or_built_again(tmp_path):
    built = images.Built("docker.io/sunk-dev/slurmd:dev", tmp_path / "slurmd.tar", "sha256:1", ())
    assert images.needs_import(["docker.io/sunk-dev/slurmd:dev"], built)  # never imported from here
    calls = []
    images.import_image(lambda *args, **_: calls.append(args), built)  # type: ignore[arg-type,func-returns-value]
    assert calls == [("images", "import", "--snapshotter=overlayfs", str(built.archive))]
    assert not images.needs_import(["docker.io/sunk-dev/slurmd:dev"], built)
    assert images.needs_import([], built)
    rebuilt = images.Built(built.name, built.archive, "sha256:2", ())
    assert images.needs_import(["docker.io/sunk-dev/slurmd:dev"], rebuilt)


def _template(image: str | None = SLURMD_IMAGE) -> dict:
    return realnode.nodeset(Path("/c"), "slurm", image)["spec"]["template"]["spec"]


def test_the_slurmd_pod_from_its_image_mounts_only_what_the_image_leaves_out():
    template = _template()
    (container,) = template["containers"]
    assert container["image"] == SLURMD_IMAGE and "env" not in container  # the operator's variables only
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    gpus = {f"/dev/nvidia{i}" for i in range(realnode.DRA_DEVICES)}
    assert set(mounts) == {"/run/munge", "/etc/slurm", "/etc/sunk", "/var/spool/slurmd", "/var/log/slurm",
                           "/run/sunk-slurmd", *gpus}
    host = {v["hostPath"]["path"] for v in template["volumes"] if "hostPath" in v}
    assert host == {"/c/run/munge", "/c/etc/slurm", "/c/etc/sunk",
                    *(f"/c/dev/fakegpu{i}" for i in range(realnode.DRA_DEVICES))}  # never the chroot
    assert template["hostNetwork"] and template["hostPID"]


def test_realnode1_has_as_many_gpus_as_the_dra_driver_has_devices_each_named_by_its_index():
    """Issue 38: Slurm's GRES index i on realnode1 is the DRA test driver's device-0i on its Node: the operator's
    gres.conf line for gpu:fake:4 names /dev/nvidia0..3, which are the chroot's fake GPUs 0..3 in order."""
    nodeset = realnode.nodeset(Path("/c"), "slurm", SLURMD_IMAGE)
    assert nodeset["spec"]["slurm"]["gres"] == f"gpu:fake:{realnode.DRA_DEVICES}"
    template = nodeset["spec"]["template"]["spec"]
    (container,) = template["containers"]
    volumes = {v["name"]: v for v in template["volumes"]}
    gpus = {m["mountPath"]: volumes[m["name"]]["hostPath"]["path"] for m in container["volumeMounts"]
            if m["mountPath"].startswith("/dev/")}
    assert gpus == {f"/dev/nvidia{i}": f"/c/dev/fakegpu{i}" for i in range(realnode.DRA_DEVICES)}
    # (the operator's own rendering of the Pod: its gres.conf line names exactly those files)
    pod = nodeset_pod.desired_pod(read_spec({**nodeset, "metadata": {**nodeset["metadata"], "uid": "u"}}).spec,
                                  realnode.NODE_NAME, realnode.SLURM_NODE, "h")
    (slurmd,) = pod["spec"]["containers"]
    env = {e["name"]: e["value"] for e in slurmd["env"]}
    assert env["SUNK_GRES_CONF"] == "NodeName=realnode1 Name=gpu Type=fake File=/dev/nvidia[0-3]\n"
    assert [realnode.DEVICE_NAME.format(index=i) for i in range(realnode.DRA_DEVICES)] == [
        "device-00", "device-01", "device-02", "device-03"]  # (the driver's names: test/e2e/dra/test-driver)
    argv = realnode.dra_driver_argv(Path("/b/dra-test-driver"), realnode.Paths(Path("/h")), Path("/k"))
    assert argv[:2] == ["/b/dra-test-driver", "kubelet-plugin"]
    assert {"--node-name=realnode1", "--num-devices=4", "--drivername=test-driver.cdi.k8s.io",
            "--plugin-registration-path=/h/kubelet-real/plugins_registry",
            "--datadir=/h/kubelet-real/plugins"} <= set(argv)


def test_every_host_directory_the_slurmd_pod_mounts_exists_before_it_is_made():
    """A hostPath ``Directory`` that does not exist keeps the Pod in ContainerCreating for good: each
    one is made by ``up`` before any daemon starts, or comes with the Slurm packages (/etc/slurm)."""
    from sunk_dev.cluster import chroot_directories

    wanted = {str(Path(v["hostPath"]["path"]).relative_to("/c")) for v in _template()["volumes"]
              if v.get("hostPath", {}).get("type") == "Directory"}
    assert wanted - set(chroot_directories(["node1"])) == {"etc/slurm"}


# -- the pyslurm variant ------------------------------------------------------------------------------

STATUS = """Package: munge
Status: install ok installed
Depends: libmunge2 (= 0.5.15-2), libbz2-1.0, libgcrypt20 (>= 1.10.0), lsb-base | sysvinit-utils (>= 3.05-4~)

Package: libmunge2
Status: install ok installed
Pre-Depends: libc6:amd64 (>= 2.34)

Package: libjwt0
Status: install ok installed
Depends: libjansson4 (>= 2.14),
 libssl3 (>= 3.0.0)

Package: libjansson4
Status: install ok installed

Package: lsb-base
Status: install ok installed

Package: gone
Status: deinstall ok config-files
"""
BASE_STATUS = """Package: libc6
Status: install ok installed

Package: libbz2-1.0
Status: install ok installed

Package: libgcrypt20
Status: install ok installed

Package: libssl3
Status: install ok installed
"""


def test_dpkg_status_gives_installed_packages_and_their_dependencies_alternatives_without_versions():
    packages = images.installed_packages(STATUS)
    assert "gone" not in packages
    assert packages["munge"] == (("libmunge2",), ("libbz2-1.0",), ("libgcrypt20",), ("lsb-base", "sysvinit-utils"))
    assert packages["libmunge2"] == (("libc6",),)  # Pre-Depends, architecture dropped
    assert packages["libjwt0"] == (("libjansson4",), ("libssl3",))  # a continued line


def test_the_closure_takes_what_the_roots_need_and_the_base_lacks():
    chroot, base = images.installed_packages(STATUS), images.installed_packages(BASE_STATUS)
    assert images.dependency_closure(["munge", "libjwt0"], chroot, base) == (
        "libjansson4", "libjwt0", "libmunge2", "lsb-base", "munge")
    # An alternative the base has meets the dependency: nothing taken for it.
    assert "lsb-base" not in images.dependency_closure(["munge"], chroot, {*base, "sysvinit-utils"})


def test_a_root_the_chroot_lacks_fails_the_build_naming_it():
    with pytest.raises(ValueError, match="libnothing"):
        images.dependency_closure(["libnothing"], images.installed_packages(STATUS), ())


@pytest.mark.parametrize(("listed", "member"), [
    ("/lib/x86_64-linux-gnu/libmunge.so.2", "usr/lib/x86_64-linux-gnu/libmunge.so.2"),  # merged /usr
    ("/usr/sbin/munged", "usr/sbin/munged"),
    ("/lib", None),  # never the symlink's own name: a directory there would hide the base's lib -> usr/lib
    ("/etc/default/munge", None), ("/usr/share/doc/munge/copyright", None),
    ("/lib/systemd/system/munge.service", None),
])
def test_package_files_go_in_under_usr_and_only_libraries_and_programs(listed, member):
    assert images.package_member(listed, {"lib": "usr/lib", "sbin": "usr/sbin"}) == member


@pytest.mark.parametrize(("name", "taken"), [
    ("usr/lib/libslurm.so.44.0.0", True), ("usr/lib/libslurm.so", True), ("usr/lib/slurm/libslurmfull.so", True),
    ("usr/lib/slurm/auth_munge.so", True), ("usr/lib/slurm/auth_munge.la", False), ("usr/lib/libslurm.a", False),
    ("usr/lib/slurm/libslurmfull.a", False), ("usr/lib/libc.so.6", False), ("usr/lib/slurm/src/x.so", False),
])
def test_only_libslurm_and_its_plugins_shared_objects_are_taken_from_the_build(name, taken):
    assert images.slurm_library(name) is taken


def test_parents_come_outermost_first_once_each():
    assert images.parents(["usr/lib/slurm/a.so", "usr/lib/b.so", "usr/sbin/munged"]) == [
        "usr", "usr/lib", "usr/sbin", "usr/lib/slurm"]


def test_the_variant_is_tagged_for_its_release_as_the_chart_picks_it_with_libslurm_on_the_loader_path():
    spec = images.pyslurm_spec("0.1.0", "25.11")
    assert spec.name == "docker.io/library/sunk:0.1.0-slurm25.11"
    assert "LD_LIBRARY_PATH=/usr/lib/slurm" in spec.env
    assert (spec.user, spec.cmd) == (images.sunk_spec("0.1.0").user, images.sunk_spec("0.1.0").cmd)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert spec.name.endswith(f"-slurm{values['slurm']['pyslurm']['release']}")


def test_the_pyslurm_layers_key_changes_with_each_input():
    args = (BASE, "chroot-bookworm-1", b"status", "f" * 64)
    key = images.pyslurm_key(*args)
    for i, other in enumerate((APP, "chroot-bookworm-2", b"status2", "e" * 64)):
        changed = list(args)
        changed[i] = other
        assert images.pyslurm_key(*changed) != key


def test_realnode1_is_its_nodesets_and_registers_the_same_gpus_under_the_operators_names():
    """realnode1's NodeSet: the Node by name, NodeName naming, the real partition's feature; with the image the
    GPUs gpu:fake:4, whose gres.conf lines (the operator's) name /dev/nvidia0..3, which the template mounts from the
    chroot's fake GPUs in order (GRES index i stays the driver's device-0i); the operator's variables are its own,
    and the template adds only the CPUs and memory slurmd would otherwise find on this machine."""
    nodeset = realnode.nodeset(Path("/c"), "slurm", SLURMD_IMAGE)
    spec = nodeset["spec"]
    assert nodeset["metadata"] == {"name": realnode.REAL_NODESET, "namespace": "slurm"}
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [realnode.NODE_NAME]}]
    assert spec["naming"] == {"scheme": "NodeName"}
    assert spec["slurm"] == {"features": [realnode.SLURM_FEATURE], "gres": f"gpu:fake:{realnode.DRA_DEVICES}"}
    template = spec["template"]["spec"]
    assert "nodeName" not in template and "hostname" not in template and template["hostNetwork"]
    (container,) = template["containers"]
    assert "env" not in container and container["image"] == SLURMD_IMAGE
    assert container["command"][-1] == (f'SUNK_SLURMD_CONF="$SUNK_SLURMD_CONF {realnode.EXTRA_CONF}" '
                                        "exec /usr/local/bin/sunk-slurmd")
    plain = realnode.nodeset(Path("/c"), "slurm", None)["spec"]
    assert "gres" not in plain["slurm"]
    (busybox,) = plain["template"]["spec"]["containers"]
    assert '-N "$SUNK_SLURM_NODE_NAME"' in busybox["command"][-1] and realnode.EXTRA_CONF in busybox["command"][-1]
