"""The local stack's webhook key: a key file next to its SQLite file, readable by you only.

The key file (``<database>.webhook-key``, mode 0600) holds the key document of
:mod:`bide.tools.webhook_keys` (``{"current": ..., "previous": [...]}``). It is kept out of
the SQLite file on purpose: the database (and any copy or backup of it) holds webhook bindings
and nonces, never a token, and without the key no token can be derived from them. Deleting the
key file makes every webhook minted so far unknown (a new key is made on the next start);
rotating is editing the file as the key document's docstring says.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..tools.webhook_keys import (
    StaticWebhookKeys,
    WebhookKeyError,
    new_key_document,
    parse_keys,
)

KEY_FILE_SUFFIX = ".webhook-key"


def key_file_for(db_path: str) -> Path:
    """Where the key of the database at ``db_path`` lives."""
    return Path(db_path + KEY_FILE_SUFFIX)


def load_or_create(path: Path) -> StaticWebhookKeys:
    """The keys in ``path``, made (0600, exclusive create) when it does not exist yet. Raises
    :class:`~bide.tools.webhook_keys.WebhookKeyError` for a file others may read or write, or
    one that does not hold a key document."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(new_key_document())
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise WebhookKeyError(
            f"{path}: the webhook key file is open to others (mode {mode:o}); chmod 600 it"
        )
    return parse_keys(path.read_text(encoding="utf-8"), source=str(path))


def local_keys(db_path: str) -> StaticWebhookKeys:
    """The keys of the local stack on ``db_path`` (an in-memory database: a fresh random key,
    which ends with the process as the database does)."""
    if db_path == ":memory:":
        return parse_keys(new_key_document(), source="an in-memory database")
    return load_or_create(key_file_for(db_path))
