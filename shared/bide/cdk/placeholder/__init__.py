"""The stand-in code asset of a template synthesized with ``bide:skipBundling``: its
``handler.py`` alone (this file is left out of the asset)."""
