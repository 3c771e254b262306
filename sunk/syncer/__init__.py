"""The Syncer: two-way state sync between Slurm nodes and their slurmd Pods and Kubernetes Nodes."""
