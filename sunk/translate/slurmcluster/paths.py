"""The names, ports and paths a SlurmCluster's objects and files agree on (one copy of each)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (spec reads the users, whose ids are checked against these)
    from .spec import SlurmClusterSpec

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
SLURMRESTD_PORT = 6820
MARIADB_PORT = 3306
SSH_PORT = 22  # the login Pods' sshd, behind the login Service
# Each image's user by number: the Pods run as it (runAsUser) and own their fresh volumes through it
# (fsGroup). The image build (dev/sunk_dev/slurmimages.py) refuses an image whose user has another uid.
# The login Pod's munged (the image's nonroot, dev/sunk_dev/images.py NONROOT_UID; sshd beside it is root): it
# reads the key as this group, which no login user may have (users.UID_RANGE ends below it).
LOGIN_UID = 65532
LOGIN_GID = 65532
# SlurmUser: Debian's fixed uid for slurm (its packages'; the dev cluster's source build uses it too).
# slurmctld and slurmdbd run as it, and their munged beside them.
SLURM_UID = 64030
# slurmrestd refuses root, SlurmUser and SlurmUser's group: a user of its own.
SLURMRESTD_UID = 1999
# MariaDB's server in sunk-mariadb: a user of the image's own, since Debian's mysql has another uid per
# suite (100 on bookworm and trixie, 996 on sid).
MARIADB_UID = 1998

SLURM_USER = "slurm"
DB_USER = "slurm"
DB_NAME = "slurm_acct_db"

CONFIG_DIR = "/etc/slurm"  # the ConfigMap, mounted whole (a subPath mount would never see an update)
SLURM_CONF = f"{CONFIG_DIR}/slurm.conf"
STATE_DIR = "/var/spool/slurmctld"
SLURMD_SPOOL_DIR = "/var/spool/slurmd"
# The chart's prolog and epilog, as docs/install.md mounts them into every slurmd Pod.
PROLOG = f"{CONFIG_DIR}/prolog.d/*"
EPILOG = f"{CONFIG_DIR}/epilog.d/*"
MUNGE_DIR = "/etc/munge"
MUNGE_KEY = "munge.key"
JWT_DIR = "/var/run/sunk/jwt"  # beside, not under, the ConfigMap's directory
JWT_KEY = "jwt_hs256.key"
JWT_KEY_FILE = f"{JWT_DIR}/{JWT_KEY}"
DB_PASSWORD_DIR = "/var/run/sunk/db"
DB_PASSWORD_KEY = "password"
DB_PASSWORD_FILE = f"{DB_PASSWORD_DIR}/{DB_PASSWORD_KEY}"
# slurmdbd reads slurmdbd.conf beside $SLURM_CONF and refuses one of a mode other than 0600 or 0640: its own
# copy, the ConfigMap's text plus StoragePass, written by an init container into an emptyDir.
SLURMDBD_CONF_DIR = "/etc/slurm-dbd"
SLURMDBD_RUN_DIR = "/run/slurmdbd"  # slurmdbd.conf's PidFile: an emptyDir (/run is root's)
SLURMCTLD_RUN_DIR = "/run/slurmctld"  # slurm.conf's SlurmctldPidFile: an emptyDir, as slurmdbd's
# The login users (users.py): libnss-extrausers' directory in the login and slurmctld images, the ConfigMap's mount.
USERS_DIR = "/var/lib/extrausers"
# The login Pods' sshd host key: a generated Secret (OpenSSH's format), which the login image's entrypoint
# copies to a directory of root's own with mode 0600 (a Secret's file under fsGroup is group readable, which
# sshd refuses for a host key).
SSH_HOST_KEYS_DIR = "/etc/sunk/ssh-host-keys"
SSH_HOST_KEY = "ssh_host_ed25519_key"
MARIADB_DATA_DIR = "/var/lib/mysql"  # the volume; MariaDB's datadir is a directory under it (not lost+found's)


def name(spec: SlurmClusterSpec, component: str) -> str:
    """``<cluster>-<component>``: every object's name (the cluster's name is at most 40 characters)."""
    return f"{spec.name}-{component}"


def state_dir(spec: SlurmClusterSpec) -> str:
    """slurmctld's StateSaveLocation: a directory of the state volume per ClusterName (lower case, as Slurm
    reads it). slurmctld refuses to start on the state of another ClusterName (its ``clustername`` file), so
    a cluster made again on a kept volume under a new name starts on state of its own, and the old name's
    stays on the volume."""
    return f"{STATE_DIR}/{spec.cluster_name.lower()}"


def controller_replicas(spec: SlurmClusterSpec) -> int:
    return 2 if spec.backup else 1


def controller_host(spec: SlurmClusterSpec, ordinal: int, component: str = "slurmctld") -> str:
    """A StatefulSet Pod's hostname, which slurmctld and slurmdbd compare with their configured host."""
    return f"{name(spec, component)}-{ordinal}"


def controller_address(spec: SlurmClusterSpec, host: str) -> str:
    """The Pod's DNS name through the headless Service (the search path completes ``.svc``)."""
    return f"{host}.{name(spec, 'slurmctld')}.{spec.namespace}.svc"


def config_configmap(spec: SlurmClusterSpec) -> str:
    return name(spec, "slurm-config")


def users_configmap(spec: SlurmClusterSpec) -> str:
    return name(spec, "login-users")


def ssh_host_secret(spec: SlurmClusterSpec) -> str:
    return name(spec, "login-host-keys")


def munge_secret(spec: SlurmClusterSpec) -> str:
    return spec.munge_secret or name(spec, "munge-key")


def jwt_secret(spec: SlurmClusterSpec) -> str:
    return spec.jwt_secret or name(spec, "jwt-key")


def db_secret(spec: SlurmClusterSpec) -> str:
    """The database password's Secret: the operator's for an external database, else generated."""
    return spec.external_database.password_secret if spec.external_database else name(spec, "db-password")
