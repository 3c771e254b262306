"""Prometheus metrics of the Slurm cluster, rendered from cached state."""
