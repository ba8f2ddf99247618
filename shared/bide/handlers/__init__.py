"""The Lambda entry points of a deployment: ``worker``, ``signal`` and ``api``.

Each module holds one ``handler(event, context)`` over :mod:`bide.service`. A function's code
bundle (built by :mod:`bide.cdk`) has a ``handler.py`` at its root that imports the handler
from here, so Lambda's ``handler.handler`` finds it; the repository's
``functions/<name>/handler.py`` are those same files.
"""
