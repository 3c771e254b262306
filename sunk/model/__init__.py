"""The pure model: the names SUNK fixes, Slurm's domain values and the hostlist grammar they use.

Frozen values and parsers only, no I/O: every layer reads them, the translation layer decides on them.
"""
