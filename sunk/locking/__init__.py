"""Node locking: Slurm jobs never start beside Kubernetes workloads that still hold the machine.

``controller`` locks and unlocks per Slurm node; ``service`` is the hook API's work
(pre-hook, post-hook, reboot); ``plugin`` plugs both into sunk-syncer. The rules of the
lock itself (states, which Pods go) are the pure state machine in ``sunk.translate.lock``.
"""
