"""The local dev cluster: real Slurm (24.11 from trixie, or 26.05 from sid) in a chroot, real etcd + kube-apiserver."""
