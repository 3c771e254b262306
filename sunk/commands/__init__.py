"""The entry points: one module per console script, and the one runner (``runner``, ``web``) they share.

Each command parses its flags into its component's typed config and hands ``runner.run`` a build
function; nothing here decides anything.
"""
