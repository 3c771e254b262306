"""sunk-extender: Slurm-made placement for a stock kube-scheduler, over its extender protocol."""
