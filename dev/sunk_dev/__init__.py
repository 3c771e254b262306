"""sunk's dev tools, never shipped with the product: the local dev cluster (``sunk-dev``: real Slurm, 24.11 from
trixie or 26.05 from sid, in a chroot; real etcd + kube-apiserver) and the test doubles (``fakeslurm``)."""
