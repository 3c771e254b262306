"""Build Kubernetes (apiserver, scheduler, controller-manager, kubelet, kubectl, the DRA test driver), helm and the
workload controllers tests run (``GoCommand``) from Go modules, cached by version.

k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
modules with local paths. A throwaway module that requires it and points every
staging module at its published v0.Y.Z tag builds the same binaries.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import attrs

KUBE_VERSION = "1.34.4"
# Each binary and its main package in k8s.io/kubernetes: the components, and the upstream DRA test driver (fake
# devices published as ResourceSlices, prepared through the kubelet's plugin socket) the real Node runs.
PACKAGES = {
    "kube-apiserver": "cmd/kube-apiserver",
    "kube-scheduler": "cmd/kube-scheduler",
    "kube-controller-manager": "cmd/kube-controller-manager",
    "kubectl": "cmd/kubectl",
    "kubelet": "cmd/kubelet",
    "kube-proxy": "cmd/kube-proxy",
    "dra-test-driver": "test/e2e/dra/test-driver",
}
BINARIES = tuple(PACKAGES)
HELM_VERSION = "3.22.0"  # its own module: helm.sh/helm/v3
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.M)


def kube_bin_dir(cache: Path, version: str = KUBE_VERSION) -> Path:
    return cache / f"kubernetes-v{version}" / "bin"


def build(cache: Path, version: str = KUBE_VERSION, log=sys.stderr) -> Path:
    """Return the bin dir holding the binaries, building only what is missing."""
    bin_dir = kube_bin_dir(cache, version)
    missing = [b for b in BINARIES if not (bin_dir / b).exists()]
    if not missing:
        return bin_dir
    work = cache / f"kubernetes-v{version}" / "module"
    work.mkdir(parents=True, exist_ok=True)
    env = _go_env()
    upstream_mod = Path(_download("k8s.io/kubernetes", version, work)["GoMod"]).read_text()
    staging_version = "v0." + version.split(".", 1)[1]
    replaces = "\n".join(
        f"\t{name} => {name} {staging_version}" for name in sorted(set(_STAGING.findall(upstream_mod)))
    )
    (work / "go.mod").write_text(
        "module sunkdev/kubebuild\n\ngo 1.24.0\n\n"
        f"require k8s.io/kubernetes v{version}\n\nreplace (\n{replaces}\n)\n"
    )
    (work / "tools.go").write_text(
        "//go:build tools\n\npackage tools\n\nimport (\n"
        + "".join(f'\t_ "k8s.io/kubernetes/{PACKAGES[b]}"\n' for b in BINARIES)
        + ")\n"
    )
    subprocess.run(["go", "mod", "tidy"], cwd=work, env=env, check=True, stdout=log, stderr=log)
    bin_dir.mkdir(parents=True, exist_ok=True)
    major, minor = version.split(".")[:2]
    stamp = " ".join(
        f"-X k8s.io/component-base/version.{key}={value}"
        for key, value in (("gitVersion", f"v{version}"), ("gitMajor", major), ("gitMinor", minor))
    )
    # One `go build` for them all: it compiles the packages they share once and links the binaries in parallel
    # (one build per binary linked them one after another, each link a single core's work). Into a directory of
    # its own, each binary then renamed into place: a build cut short leaves none half-written under its name.
    tmp = bin_dir / ".build"
    tmp.mkdir(exist_ok=True)
    subprocess.run(
        ["go", "build", "-trimpath", f"-ldflags=-s -w {stamp}", "-o", f"{tmp}/",
         *(f"k8s.io/kubernetes/{PACKAGES[binary]}" for binary in missing)],
        cwd=work, env=env, check=True, stdout=log, stderr=log,
    )
    for binary in missing:
        (tmp / PACKAGES[binary].rsplit("/", 1)[-1]).rename(bin_dir / binary)
    tmp.rmdir()
    return bin_dir


def helm_bin_dir(cache: Path, version: str = HELM_VERSION) -> Path:
    return cache / f"helm-v{version}" / "bin"


def build_helm(cache: Path, version: str = HELM_VERSION, log=sys.stderr) -> Path:
    """helm, pinned, from its module (``go install``: it has no replace directives); cached."""
    bin_dir = helm_bin_dir(cache, version)
    if (bin_dir / "helm").exists():
        return bin_dir / "helm"
    bin_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOBIN": str(bin_dir)}
    stamp = f"-X helm.sh/helm/v3/internal/version.version=v{version}"
    subprocess.run(["go", "install", "-trimpath", f"-ldflags=-s -w {stamp}", f"helm.sh/helm/v3/cmd/helm@v{version}"],
                   env=env, check=True, stdout=log, stderr=log)
    return bin_dir / "helm"


@attrs.frozen
class GoCommand:
    """A main package of a published Go module, built as ``name``.

    ``go install module/package@version`` needs the proxy's version list for some
    ``sigs.k8s.io`` modules, which this environment's proxy refuses (403), so a throwaway
    module that requires the explicit version builds it, as Kubernetes is built above.
    """

    name: str
    module: str
    version: str  # without the "v"
    package: str

    def binary(self, cache: Path) -> Path:
        return cache / f"{self.name}-v{self.version}" / "bin" / self.name

    def work_dir(self, cache: Path) -> Path:
        return cache / f"{self.name}-v{self.version}" / "module"


def module_source(cache: Path, command: GoCommand) -> Path:
    """The command's module files in Go's module cache (downloaded if needed): its CRDs, its config."""
    work = command.work_dir(cache)
    work.mkdir(parents=True, exist_ok=True)
    return Path(_download(command.module, command.version, work)["Dir"])


def build_go_command(cache: Path, command: GoCommand, log=sys.stderr) -> Path:
    """The command's binary, built only when missing (into a temporary name, then renamed)."""
    binary = command.binary(cache)
    if binary.exists():
        return binary
    work = command.work_dir(cache)
    work.mkdir(parents=True, exist_ok=True)
    (work / "go.mod").write_text(f"module sunkdev/{command.name}build\n\ngo 1.24.0\n\n"
                                 f"require {command.module} v{command.version}\n")
    (work / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{command.package}"\n')
    env = _go_env()
    subprocess.run(["go", "mod", "tidy"], cwd=work, env=env, check=True, stdout=log, stderr=log)
    tmp = binary.parent / f".{command.name}.tmp"
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), command.package],
                   cwd=work, env=env, check=True, stdout=log, stderr=log)
    tmp.rename(binary)
    return binary


def _go_env() -> dict[str, str]:
    return {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false", "GOTOOLCHAIN": "local"}


def _download(module: str, version: str, cwd: Path) -> dict:
    return json.loads(subprocess.run(["go", "mod", "download", "-json", f"{module}@v{version}"], cwd=cwd,
                                     env=_go_env(), check=True, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "sunk-dev"))
