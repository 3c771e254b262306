"""The local dev cluster: real Slurm 24.11 in a trixie chroot, real etcd + kube-apiserver."""
