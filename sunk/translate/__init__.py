"""Pure translation between Kubernetes and Slurm: no I/O, no clocks, exhaustively tested."""
