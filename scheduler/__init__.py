"""sunk-scheduler: Kubernetes Pods placed by Slurm through placeholder jobs."""
