"""A real kubelet Node for the dev cluster: containerd, runc, bridge CNI and kubelet v1.34.

The stand-in kubelet (``sunk_dev.kubelet``) only books Pods as running; this Node runs them.
What it takes on this kind of VM (``../shared/ENVIRONMENT.md``):

- containerd 1.6 from Debian with a configuration of its own (own root, state, socket and
  CNI directories, so a system containerd is never touched), cgroupfs, runc;
- a runc wrapper: the VM lacks CAP_SYS_RESOURCE, so no process may lower its
  ``oom_score_adj``, and the kubelet asks -998 for every sandbox; the wrapper clamps a
  negative ``process.oomScoreAdj`` in the bundle's config.json to 0, then execs runc;
- images made here, since no registry is reachable: a pause image and a busybox image, both
  one layer around Debian's static busybox, written as docker archives and imported;
- kubelet with ``failCgroupV1: false``, its own ports and root directory, and a node IP
  that is not loopback (the kubelet refuses 127.0.0.1).

The Node's slurmd runs in a container too: a Pod on this Node whose busybox container
chroots into the dev cluster's trixie root (mounted from the host) and runs ``slurmd -Z``,
a dynamic Slurm node in a partition of its own, so that only Pods that ask for it land here.
Deleting the Pod really stops slurmd.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path

import attrs

from .dns import CLUSTER_DOMAIN
from .procs import apt_install
from .slurmconf import DYNAMIC_FEATURE, DYNAMIC_PARTITION
from .slurmimages import SLURMD_ENTRYPOINT

SLURM_NODE = "realnode1"
NODE_NAME = SLURM_NODE  # (a NodeSet's NodeName scheme: the Slurm node takes its Node's name)
SLURM_PARTITION = DYNAMIC_PARTITION
SLURM_FEATURE = DYNAMIC_FEATURE
NODE_CPUS = 4
NODE_MEMORY_MB = 4000
NODE_LABEL = "sunk.dev/real-kubelet"
# Fake GPUs both sides name (issue 38): the upstream DRA test driver publishes DRA_DEVICES devices for the Node,
# named DEVICE_NAME.format(index=i), and realnode1's slurmd has as many GPUs of GPU_TYPE, its gres.conf's File=
# devices GPU_FILE.format(index=i) (stand-ins for /dev/nvidiaN: Slurm wants a character device, so each is
# /dev/null's major and minor). Slurm's GRES index i is then the driver's device DEVICE_NAME.format(index=i).
DRA_DRIVER = "test-driver.cdi.k8s.io"
DRA_DEVICES = 4
DEVICE_NAME = "device-{index:02d}"
DEVICE_CLASS = "gpu.sunk.dev"
# The DeviceClass's config, as an operator gives a real driver its settings: the test driver writes a class's opaque
# parameters into the environment of its CDI spec (admin_<key>=<value>).
DEVICE_CLASS_PARAMETERS = {"profile": "sunk-dev"}
GPU_TYPE = "fake"
GPU_FILE = "/dev/fakegpu{index}"
KUBELET_PORT = 10350
KUBELET_HEALTHZ_PORT = 10348
KUBE_PROXY_HEALTHZ_PORT = 10356
KUBE_PROXY_METRICS_PORT = 10349
NO_NODEPORT_ADDRESS = "203.0.113.1/32"  # (TEST-NET-3: an address no interface here has, so no NodePort opens)
POD_SUBNET = "10.88.7.0/24"
BRIDGE = "sunkbr0"
MAX_REAL_NODES = 2


def pod_subnet(node: int) -> str:
    """Real Node ``node``'s Pod subnet (node 1: POD_SUBNET): Pods of two Nodes reach each other through the host."""
    return f"10.88.{6 + node}.0/24"


POD_SUBNETS = tuple(pod_subnet(n) for n in range(1, MAX_REAL_NODES + 1))
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
BUSYBOX_IMAGE = "docker.io/library/busybox:latest"
PACKAGES = ("containerd", "runc", "containernetworking-plugins", "busybox-static")
CNI_BIN_DIR = "/usr/lib/cni"
BUSYBOX = Path("/bin/busybox")
# The applets the images link (busybox is one static binary; each name is a symlink to it).
APPLETS = ("sh", "sleep", "httpd", "cat", "echo", "ls", "chroot", "wget", "hostname", "ip", "true", "env", "mkdir")


@attrs.frozen
class Paths:
    """Where everything of one real Node lives (state under the run directory, images in the cache), and what
    it must not share with another real Node on this machine: its name, ports, bridge, Pod subnet, cgroup root
    and Pod logs. Node 1 is ``up``'s; node 2 is started beside it on demand (``DevCluster.second_real_node``)."""

    home: Path
    node: int = attrs.field(default=1, validator=attrs.validators.in_(range(1, MAX_REAL_NODES + 1)))

    @property
    def _suffix(self) -> str:
        return "" if self.node == 1 else str(self.node)

    @property
    def node_name(self) -> str:
        return f"realnode{self.node}"

    @property
    def base(self) -> Path:
        return self.home / "run" / f"realnode{self._suffix}"

    @property
    def containerd_root(self) -> Path:
        return self.home / f"containerd{self._suffix}"  # images survive `down`, like the chroot

    @property
    def containerd_state(self) -> Path:
        return Path(f"/run/sunk-dev-containerd{'-' + self._suffix if self._suffix else ''}")

    @property
    def bridge(self) -> str:
        return f"sunkbr{self.node - 1}"

    @property
    def pod_subnet(self) -> str:
        return pod_subnet(self.node)

    @property
    def kubelet_port(self) -> int:
        return KUBELET_PORT + 10 * (self.node - 1)

    @property
    def healthz_port(self) -> int:
        return KUBELET_HEALTHZ_PORT + 10 * (self.node - 1)

    @property
    def cgroup_root(self) -> str | None:
        """Where this kubelet's Pod cgroups go: each kubelet takes a cgroup under its root it does not know
        for an orphan and removes it, so a second kubelet must keep to a root of its own."""
        return None if self.node == 1 else f"/sunk-real-{self.node}"

    @property
    def pod_logs_dir(self) -> Path | None:
        """Likewise for Pod log directories (a kubelet removes those of Pods it does not know)."""
        return None if self.node == 1 else self.base / "pod-logs"

    @property
    def socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.base / "containerd.toml"

    @property
    def runc_wrapper(self) -> Path:
        return self.base / "runc-wrapper"

    @property
    def cni_conf_dir(self) -> Path:
        return self.base / "cni"

    @property
    def kubelet_config(self) -> Path:
        return self.base / "kubelet.yaml"

    @property
    def kubelet_root(self) -> Path:
        return self.home / f"kubelet-real{self._suffix}"

    @property
    def images_dir(self) -> Path:
        return self.home / "images"


def enabled() -> bool:
    """On unless ``SUNK_DEV_REAL_NODE=0`` (a machine that cannot run containers)."""
    return os.environ.get("SUNK_DEV_REAL_NODE", "1") not in ("0", "false", "no")


def ensure_packages(log=sys.stderr) -> None:
    missing = [p for p in PACKAGES if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                                                      text=True).stdout != "install ok installed"]
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt_install(missing, log, env=env)


def node_ip() -> str:
    """The host's first global IPv4 address: the kubelet refuses a loopback node IP."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True,
                         check=False).stdout
    for line in out.splitlines():  # "2: eth0    inet 192.0.2.2/24 brd ... scope global eth0"
        fields = line.split()
        if "inet" in fields and not fields[1].startswith(BRIDGE):
            return fields[fields.index("inet") + 1].partition("/")[0]
    raise RuntimeError("the real kubelet Node needs a non-loopback IPv4 address and `ip` shows none "
                       "(set SUNK_DEV_REAL_NODE=0 to run without it)")


# -- configuration files ---------------------------------------------------------------------------

def containerd_config(paths: Paths) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"

[grpc]
  address = "{paths.socket}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"

[{cri}.containerd]
  default_runtime_name = "runc"
  snapshotter = "overlayfs"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{paths.runc_wrapper}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{paths.cni_conf_dir}"
"""


RUNC_WRAPPER = """#!/usr/bin/python3
# runc, but a negative process.oomScoreAdj in the bundle becomes 0: this VM lacks
# CAP_SYS_RESOURCE, and the kubelet asks -998 for every Pod sandbox (written by sunk-dev).
import json, os, sys
args = sys.argv[1:]
for flag in ("--bundle", "-b"):
    if flag in args[:-1]:
        path = os.path.join(args[args.index(flag) + 1], "config.json")
        try:
            with open(path) as f:
                config = json.load(f)
            if config.get("process", {}).get("oomScoreAdj", 0) < 0:
                config["process"]["oomScoreAdj"] = 0
                with open(path, "w") as f:
                    json.dump(config, f)
        except FileNotFoundError:
            pass
os.execv("/usr/sbin/runc", ["runc", *args])
"""


def cni_conflist(paths: Paths) -> str:
    return json.dumps({
        "cniVersion": "1.0.0", "name": "sunk-dev",
        "plugins": [
            {"type": "bridge", "bridge": paths.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": paths.pod_subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(paths.base / "cni-ipam")}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }, indent=2)


def kubelet_config(paths: Paths, cluster_dns: str | None = None, client_ca: Path | None = None) -> str:
    """The KubeletConfiguration; ``cluster_dns``: the address of cluster DNS (``sunk_dev.dns``), if any;
    ``client_ca``: the CA whose client certificates it takes (the apiserver's, for exec and logs), if any."""
    dns = {"clusterDNS": [cluster_dns], "clusterDomain": CLUSTER_DOMAIN} if cluster_dns else {}
    own = {**({"cgroupRoot": paths.cgroup_root} if paths.cgroup_root else {}),
           **({"podLogsDir": str(paths.pod_logs_dir)} if paths.pod_logs_dir else {})}
    return json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{paths.socket}",
        "port": paths.kubelet_port, "healthzPort": paths.healthz_port, "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           **({"x509": {"clientCAFile": str(client_ca)}} if client_ca else {})},
        "authorization": {"mode": "AlwaysAllow"},
        # Images come from import only (no registry): never collect them, never evict for disk.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "resolvConf": "/etc/resolv.conf",
        "nodeStatusUpdateFrequency": "10s",
        "registerNode": True,
        "maxPods": 30,
        **dns,
        **own,
    }, indent=2)


def write_config(paths: Paths, cluster_dns: str | None = None, client_ca: Path | None = None) -> bool:
    """Write containerd's, the CNI's and the kubelet's configuration; whether the kubelet's changed
    (a running kubelet reads it only when it starts)."""
    paths.base.mkdir(parents=True, exist_ok=True)
    paths.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    paths.containerd_config.write_text(containerd_config(paths))
    paths.runc_wrapper.write_text(RUNC_WRAPPER)
    paths.runc_wrapper.chmod(0o755)
    (paths.cni_conf_dir / "10-sunk-dev.conflist").write_text(cni_conflist(paths))
    wanted = kubelet_config(paths, cluster_dns, client_ca)
    changed = not paths.kubelet_config.exists() or paths.kubelet_config.read_text() != wanted
    paths.kubelet_config.write_text(wanted)
    return changed


CGROUP_FS = Path("/sys/fs/cgroup")


def ensure_cgroup_root(paths: Paths, cgroup_fs: Path = CGROUP_FS) -> None:
    """Make the kubelet's own cgroup root (``Paths.cgroup_root``) in every hierarchy: the kubelet refuses a root
    that does not exist. A new v1 cpuset has no CPUs or memory nodes, so it gets its parent's."""
    if paths.cgroup_root is None:
        return
    name = paths.cgroup_root.strip("/")
    if (cgroup_fs / "cgroup.controllers").exists():  # v2: one hierarchy
        (cgroup_fs / name).mkdir(exist_ok=True)
        return
    for hierarchy in sorted(cgroup_fs.iterdir()):
        if not hierarchy.is_dir() or hierarchy.is_symlink():  # (cpu -> cpu,cpuacct: made through its target)
            continue
        (hierarchy / name).mkdir(exist_ok=True)
        for setting in ("cpuset.cpus", "cpuset.mems"):
            own = hierarchy / name / setting
            if own.exists() and not own.read_text().strip():
                own.write_text((hierarchy / setting).read_text())


def containerd_argv(paths: Paths) -> list[str]:
    return ["containerd", "--config", str(paths.containerd_config)]


def kubelet_argv(kubelet: Path, paths: Paths, kubeconfig: Path) -> list[str]:
    # (node 1's serving certificate stays where its kubelet always kept it; another's beside its own root)
    certs = [f"--cert-dir={paths.kubelet_root / 'pki'}"] if paths.node > 1 else []
    return [str(kubelet), f"--config={paths.kubelet_config}", f"--kubeconfig={kubeconfig}",
            f"--root-dir={paths.kubelet_root}", f"--hostname-override={paths.node_name}", f"--node-ip={node_ip()}",
            f"--node-labels={NODE_LABEL}=true", *certs, "--v=1"]


def kube_proxy_argv(binary: Path, kubeconfig: Path) -> list[str]:
    """kube-proxy on the host (iptables), for every real Node's Pods and the host alike: a Service's
    ClusterIP leads to its endpoints, as on any cluster. Every connection to a ClusterIP is masqueraded,
    since without ``br_netfilter`` the answer of a Pod on the caller's own bridge would bypass the NAT.
    No NodePort is opened: not on the host's addresses, not on loopback (which needs ``route_localnet`` on
    every interface); conntrack's sysctls are left as they are (the VM may not set them)."""
    return [str(binary), f"--kubeconfig={kubeconfig}", f"--hostname-override={NODE_NAME}", "--proxy-mode=iptables",
            "--masquerade-all", f"--nodeport-addresses={NO_NODEPORT_ADDRESS}", "--iptables-localhost-nodeports=false",
            "--conntrack-max-per-core=0", "--conntrack-min=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            f"--healthz-bind-address=127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}",
            f"--metrics-bind-address=127.0.0.1:{KUBE_PROXY_METRICS_PORT}", "--v=1"]


def kube_proxy_cleanup_argv(binary: Path) -> list[str]:
    """What removes kube-proxy's rules once it stopped (it leaves them behind)."""
    return [str(binary), "--cleanup"]


def dra_driver_argv(driver: Path, paths: Paths, kubeconfig: Path) -> list[str]:
    """The DRA test driver as the real Node's kubelet plugin: its sockets under the kubelet's root directory."""
    return [str(driver), "kubelet-plugin", f"--kubeconfig={kubeconfig}", f"--drivername={DRA_DRIVER}",
            f"--node-name={NODE_NAME}", f"--num-devices={DRA_DEVICES}",
            f"--plugin-registration-path={paths.kubelet_root / 'plugins_registry'}",
            f"--datadir={paths.kubelet_root / 'plugins'}", f"--cdi-dir={paths.base / 'cdi'}", "--v=2"]


def prepare_dra_driver(paths: Paths) -> None:
    """The driver's socket directory: it makes the directory's parent, not the directory."""
    (paths.kubelet_root / "plugins" / DRA_DRIVER).mkdir(parents=True, exist_ok=True)


def device_classes() -> list[dict]:
    """The DeviceClass a Pod's claim names for the driver's devices, with its config."""
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
             "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}],
                      "config": [{"opaque": {"driver": DRA_DRIVER, "parameters": DEVICE_CLASS_PARAMETERS}}]}}]


# -- images --------------------------------------------------------------------------------------

def ctr(paths: Paths, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ctr", f"--address={paths.socket}", "-n", "k8s.io", *args], capture_output=True,
                          text=True, check=check, timeout=timeout)


def containerd_ok(paths: Paths) -> bool:
    return ctr(paths, "version", check=False).returncode == 0


def busybox_layer() -> bytes:
    """One layer: static busybox at /bin/busybox and a symlink per applet."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for directory in ("bin", "tmp", "www", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        tar.add(str(BUSYBOX), arcname="bin/busybox")
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
        page = b"hello from a container on the real kubelet Node\n"
        info = tarfile.TarInfo("www/index.html")
        info.size = len(page)
        tar.addfile(info, io.BytesIO(page))
    return out.getvalue()


def docker_archive(name: str, layer: bytes, cmd: list[str]) -> bytes:
    """A ``docker save`` archive of one layer: what ``ctr images import`` takes without a registry."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "config": {"Cmd": cmd, "Env": ["PATH=/bin"], "WorkingDir": "/"},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [name], "Layers": [layer_name]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member, data in ((layer_name, layer), (config_name, config), ("manifest.json", manifest)):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def ensure_images(paths: Paths) -> list[str]:
    """Import the pause and busybox images unless containerd has them; returns what was imported."""
    have = set(ctr(paths, "images", "ls", "-q").stdout.split())
    layer = busybox_layer()
    wanted = {PAUSE_IMAGE: ["/bin/sleep", "infinity"], BUSYBOX_IMAGE: ["/bin/sh"]}
    imported = []
    paths.images_dir.mkdir(parents=True, exist_ok=True)
    for name, cmd in wanted.items():
        if name in have:
            continue
        archive = paths.images_dir / (name.replace("/", "_").replace(":", "_") + ".tar")
        archive.write_bytes(docker_archive(name, layer, cmd))
        ctr(paths, "images", "import", "--snapshotter=overlayfs", str(archive))
        imported.append(name)
    return imported


# -- Services: the two addresses Pods need, without kube-proxy ----------------------------------------

SERVICE_CHAIN = "SUNK-DEV-SERVICES"
LOCALNET_CHAIN = "SUNK-DEV-LOCALNET"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the first address of the apiserver's --service-cluster-ip-range
POD_GATEWAY = POD_SUBNET.rsplit(".", 1)[0] + ".1"  # the bridge's address: the host, seen from a Pod


@attrs.frozen
class ServiceRoute:
    """A TCP address Pods use, led to a host port that listens on loopback only."""

    address: str
    port: int
    target_port: int
    what: str


def service_routes(apiserver_port: int, slurmrestd_port: int) -> tuple[ServiceRoute, ...]:
    """The ``kubernetes`` Service (in-cluster clients: ``KUBERNETES_SERVICE_HOST``), and slurmrestd at
    the bridge's address (``http://POD_GATEWAY:<port>``, the chart's Slurm endpoint for Pods here)."""
    return (ServiceRoute(KUBERNETES_SERVICE_IP, 443, apiserver_port, "kube-apiserver"),
            ServiceRoute(POD_GATEWAY, slurmrestd_port, slurmrestd_port, "slurmrestd"))


def service_nat_commands(routes: tuple[ServiceRoute, ...]) -> list[list[str]]:
    """iptables commands (idempotent: a chain of sunk-dev's own, flushed and refilled) that DNAT each
    route to 127.0.0.1, for Pods on the bridge (PREROUTING) and hostNetwork Pods (OUTPUT). A DNAT to
    loopback from the bridge needs ``route_localnet`` on it (kube-proxy's localhost NodePorts do too)."""
    nat = ["iptables", "-w", "-t", "nat"]
    commands = [[*nat, "-N", SERVICE_CHAIN], [*nat, "-F", SERVICE_CHAIN]]
    for route in routes:
        commands.append([*nat, "-A", SERVICE_CHAIN, "-d", f"{route.address}/32", "-p", "tcp", "--dport",
                         str(route.port), "-m", "comment", "--comment", f"sunk-dev {route.what}",
                         "-j", "DNAT", "--to-destination", f"127.0.0.1:{route.target_port}"])
    return commands


def localnet_guard_commands() -> list[list[str]]:
    """What keeps ``route_localnet`` to the two routes: a Pod's packet to 127.0.0.0/8 that was not
    DNATed is dropped (kube-proxy's rule against CVE-2020-8558), so no Pod reaches etcd,
    slurmctld or MariaDB on loopback."""
    base = ["iptables", "-w", "-t", "filter"]
    return [[*base, "-N", LOCALNET_CHAIN], [*base, "-F", LOCALNET_CHAIN],
            [*base, "-A", LOCALNET_CHAIN, "-i", BRIDGE, "-d", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate",
             "DNAT", "-m", "comment", "--comment", "sunk-dev: only the service routes reach loopback", "-j", "DROP"]]


def _jump(table: str, hook: str, chain: str) -> None:
    jump = ["iptables", "-w", "-t", table]
    if subprocess.run([*jump, "-C", hook, "-j", chain], capture_output=True).returncode != 0:
        subprocess.run([*jump, "-I", hook, "-j", chain], check=True, capture_output=True)


def install_service_routes(routes: tuple[ServiceRoute, ...]) -> None:
    """Apply ``service_nat_commands`` (jumped to from PREROUTING and OUTPUT) and the loopback guard
    (from INPUT), then turn ``route_localnet`` on for the bridge: the guard first."""
    for command in localnet_guard_commands() + service_nat_commands(routes):
        subprocess.run(command, capture_output=True, text=True, check="-N" not in command)  # (-N: may exist)
    _jump("filter", "INPUT", LOCALNET_CHAIN)
    for hook in ("PREROUTING", "OUTPUT"):
        _jump("nat", hook, SERVICE_CHAIN)
    ensure_bridge()
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n")


def ensure_bridge() -> None:
    """Make the CNI's bridge if no Pod made it yet (on a fresh machine only hostNetwork Pods have run: the
    bridge plugin makes it at the first Pod with a network of its own, and takes one that exists as its
    own, adding the gateway address), so that ``route_localnet`` can be set before any such Pod starts."""
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        return
    made = subprocess.run(["ip", "link", "add", "name", BRIDGE, "type", "bridge"], capture_output=True, text=True)
    if made.returncode != 0 and not Path(f"/sys/class/net/{BRIDGE}").exists():  # (not made by a Pod meanwhile)
        raise RuntimeError(f"cannot make the bridge {BRIDGE}: {made.stderr.strip()}")
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True, capture_output=True)


def remove_service_routes() -> None:
    localnet = Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet")
    if localnet.exists():
        localnet.write_text("0\n")
    for table, hook, chain in (("nat", "PREROUTING", SERVICE_CHAIN), ("nat", "OUTPUT", SERVICE_CHAIN),
                               ("filter", "INPUT", LOCALNET_CHAIN)):
        subprocess.run(["iptables", "-w", "-t", table, "-D", hook, "-j", chain], capture_output=True)
    for table, chain in (("nat", SERVICE_CHAIN), ("filter", LOCALNET_CHAIN)):
        subprocess.run(["iptables", "-w", "-t", table, "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-w", "-t", table, "-X", chain], capture_output=True)


# -- Kubernetes objects ----------------------------------------------------------------------------

REAL_NODESET = "real"
# What the real Node's slurmd claims beyond what its NodeSet says (slurmd would report this machine's CPUs and
# memory): the template's command adds it to the operator's SUNK_SLURMD_CONF.
EXTRA_CONF = f"CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB}"
POD_LABELS = {"app.kubernetes.io/name": "slurmd", NODE_LABEL: "true"}


def nodeset(chroot: Path, namespace: str, image: str | None) -> dict:
    """The NodeSet whose one Pod is realnode1's slurmd on the real Node, from ``image`` (the shipped sunk-slurmd,
    its entrypoint) or, without images, busybox chrooting into ``chroot``. The operator names the Pod and the
    Slurm node after the Node (``NodeName``) and writes what it registers with: the feature of the ``real``
    partition, and with the image the GPUs (``gpu:fake:4``), whose gres.conf lines name /dev/nvidia0..3, which
    the template mounts from the chroot's fake GPUs, so Slurm's GRES index i is still the driver's device-0i."""
    container, volumes = _image_container(chroot, image) if image else _busybox_container(chroot)
    slurm: dict = {"features": [SLURM_FEATURE]}
    if image:
        slurm["gres"] = f"gpu:{GPU_TYPE}:{DRA_DEVICES}"
    return {
        "apiVersion": "sunk.coreweave.com/v1alpha1", "kind": "NodeSet",
        "metadata": {"name": REAL_NODESET, "namespace": namespace},
        "spec": {
            "nodeSelector": {NODE_LABEL: "true"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE_NAME]}]}]}}},
            "naming": {"scheme": "NodeName"},
            "slurm": slurm,
            "template": {"metadata": {"labels": dict(POD_LABELS)}, "spec": {
                # hostPID: slurmd's proctrack/linuxproc finds a job's processes in the host's /proc (with a PID
                # namespace of its own it could kill no job).
                "hostNetwork": True, "hostPID": True, "terminationGracePeriodSeconds": 5,
                "tolerations": [{"operator": "Exists"}],
                "containers": [container], "volumes": volumes}},
        },
    }


def _busybox_container(chroot: Path) -> tuple[dict, list[dict]]:
    """slurmd of the chroot (its binaries, slurm.conf, the munge socket), busybox chrooting into it: ``exec``
    keeps slurmd PID 1 of the container, so deleting the Pod stops it."""
    return {
        "name": "slurmd", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", 'exec /bin/chroot /host /usr/sbin/slurmd -D -Z -N "$SUNK_SLURM_NODE_NAME" '
                                     f'--conf "$SUNK_SLURMD_CONF {EXTRA_CONF}"'],
        "env": [{"name": "PATH", "value": "/usr/sbin:/usr/bin:/sbin:/bin"}],
        "volumeMounts": [{"name": "root", "mountPath": "/host"}],
        "readinessProbe": {"exec": {"command": ["/bin/chroot", "/host", "/usr/bin/scontrol", "show", "node",
                                                 SLURM_NODE]}, "periodSeconds": 5},
    }, [{"name": "root", "hostPath": {"path": str(chroot), "type": "Directory"}}]


def _image_container(chroot: Path, image: str) -> tuple[dict, list[dict]]:
    """slurmd from its own image (``sunk_dev.images``), started by the image's entrypoint from what the operator
    writes (docs/nodeset.md), the CPUs and memory added.

    What the image leaves out comes from the host as a SUNK slurmd Pod would mount it: the munge socket
    (``/run/munge``), slurm.conf and the prolog/epilog (``/etc/slurm``), the hook API's node tokens and hooks.env
    (``/etc/sunk``), and the chroot's fake GPUs under the names the operator's gres.conf lines give them
    (/dev/fakegpuN as /dev/nvidiaN); slurmd's spool and log are emptyDirs (slurmd makes
    ``/var/spool/slurmd/<node>`` but not its parent)."""
    host = {"/run/munge": "munge", "/etc/slurm": "slurm-etc", "/etc/sunk": "sunk-etc"}
    gpus = {i: f"gpu{i}" for i in range(DRA_DEVICES)}
    container = {
        "name": "slurmd", "image": image, "imagePullPolicy": "Never",
        "command": ["/bin/sh", "-c", f'SUNK_SLURMD_CONF="$SUNK_SLURMD_CONF {EXTRA_CONF}" exec /{SLURMD_ENTRYPOINT}'],
        "volumeMounts": [{"name": name, "mountPath": path, **({"readOnly": True} if path != "/run/munge" else {})}
                         for path, name in host.items()]
                        + [{"name": "spool", "mountPath": "/var/spool/slurmd"},
                           {"name": "log", "mountPath": "/var/log/slurm"},
                           {"name": "run", "mountPath": "/run/sunk-slurmd"}]
                        + [{"name": name, "mountPath": f"/dev/nvidia{i}", "readOnly": True}
                           for i, name in gpus.items()],
        "readinessProbe": {"exec": {"command": ["/usr/bin/scontrol", "show", "node", SLURM_NODE]}, "periodSeconds": 5},
    }
    volumes = ([{"name": name, "hostPath": {"path": str(chroot / path.lstrip("/")), "type": "Directory"}}
                for path, name in host.items()]
               + [{"name": "spool", "emptyDir": {}}, {"name": "log", "emptyDir": {}}, {"name": "run", "emptyDir": {}}]
               + [{"name": name, "hostPath": {"path": str(chroot / GPU_FILE.format(index=i).lstrip("/")),
                                              "type": "CharDevice"}} for i, name in gpus.items()])
    return container, volumes


_OCTAL_ESCAPE = re.compile(rb"\\([0-3][0-7]{2})")


def unescape_mount_field(field: str) -> str:
    """A /proc/mounts field as the path it names: the kernel writes space, tab, newline and backslash
    as ``\\ooo`` and every other byte as is, so only those escapes are decoded, on the bytes, and the
    result as UTF-8 (``unicode_escape`` would turn a non-ASCII path's UTF-8 bytes into Latin-1
    characters). Bytes that are not UTF-8 survive as surrogates, which os functions encode back."""
    raw = field.encode("utf-8", "surrogateescape")
    return _OCTAL_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]), raw).decode("utf-8", "surrogateescape")


def mounts_under(proc_mounts: str, root: Path) -> list[str]:
    """The mount points at or under ``root`` in a ``/proc/mounts`` text, one per mount, in the order to
    unmount them in: deepest first and, for a point mounted more than once (stacked), the later mount
    first (``/proc/mounts`` lists mounts in the order they were made), since each unmount takes off
    only the top one."""
    prefix = str(root).rstrip("/")
    mounts = [(index, unescape_mount_field(fields[1]))
              for index, fields in enumerate(line.split() for line in proc_mounts.splitlines()) if len(fields) > 1]
    under = [(index, p) for index, p in mounts if p == prefix or p.startswith(prefix + "/")]
    return [p for index, p in sorted(under, key=lambda m: (-m[1].count("/"), m[1], -m[0]))]


def kubelet_uses_root(cmdlines: Iterable[list[str]], root: Path) -> bool:
    """Whether any of these command lines (one argument list per process) is a kubelet's whose
    ``--root-dir`` is ``root``, given as ``--root-dir=ROOT`` or as ``--root-dir ROOT``."""
    for argv in cmdlines:
        for i, arg in enumerate(argv):
            if arg.startswith("--root-dir="):
                value = arg.removeprefix("--root-dir=")
            elif arg == "--root-dir" and i + 1 < len(argv):
                value = argv[i + 1]
            else:
                continue
            if value and Path(value) == root:
                return True
    return False


def process_cmdlines() -> list[list[str]]:
    """Every running process's argument list, from ``/proc/<pid>/cmdline`` (a process that exits
    while being read, or that this user may not read, is left out)."""
    cmdlines = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        cmdlines.append([arg.decode("utf-8", "surrogateescape") for arg in raw.removesuffix(b"\0").split(b"\0")])
    return cmdlines


def unmount_kubelet_root(paths: Paths) -> None:
    """After the kubelet stops: what it mounted stays (its root bind-mounted onto itself, each Pod's
    projected token as a tmpfs) until something unmounts it; left there, the cache cannot be removed
    (``rm -rf``: "Device or resource busy") and a later kubelet finds stale volumes.

    Does nothing while a kubelet still runs on this root (some process's ``/proc/<pid>/cmdline`` holds
    ``--root-dir=<kubelet_root>``): ``DevCluster.down()`` calls this even when the kubelet did not stop,
    and unmounting under a running kubelet would pull its Pods' volumes away from under them."""
    if kubelet_uses_root(process_cmdlines(), paths.kubelet_root):
        return
    text = Path("/proc/mounts").read_bytes().decode("utf-8", "surrogateescape")
    for point in mounts_under(text, paths.kubelet_root):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def clean_up_containers(paths: Paths) -> None:
    """After the kubelet stops: kill what it left running (runc shims outlive containerd)."""
    if not containerd_ok(paths):
        return
    for task in ctr(paths, "tasks", "ls", "-q", check=False).stdout.split():
        ctr(paths, "tasks", "kill", "-s", "SIGKILL", task, check=False)
    for task in ctr(paths, "tasks", "ls", "-q", check=False).stdout.split():
        ctr(paths, "tasks", "rm", "-f", task, check=False)
    for container in ctr(paths, "containers", "ls", "-q", check=False).stdout.split():
        ctr(paths, "containers", "rm", container, check=False)
    remove_pod_network_namespaces(paths.pod_subnet)
    shutil.rmtree(paths.base / "cni-ipam", ignore_errors=True)  # (a restarted Node allocates afresh)


def remove_pod_network_namespaces(pod_subnet: str = POD_SUBNET) -> list[str]:
    """Delete the network namespaces of the sandboxes removed above (their addresses in ``pod_subnet``).

    Removed through ctr, bypassing the kubelet, a sandbox's CNI teardown never runs: its namespace
    kept its address on the bridge while the IPAM state went, so the next Pod given that address
    shared it with the dead one (the demo's curl of its web Pod then got no answer). Only
    namespaces holding an address of this Node's Pod subnet are touched."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    removed = []
    subnet = ipaddress.ip_network(pod_subnet)
    for name in (line.split()[0] for line in listed.splitlines() if line.strip()):
        shown = subprocess.run(["ip", "-n", name, "-4", "-o", "addr"], capture_output=True, text=True, check=False)
        addresses = [field.split("/")[0] for line in shown.stdout.splitlines() for field in line.split()[3:4]]
        if any(_in(address, subnet) for address in addresses):
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
            removed.append(name)
    return removed


def _in(address: str, subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    try:
        return ipaddress.ip_address(address) in subnet
    except ValueError:
        return False
