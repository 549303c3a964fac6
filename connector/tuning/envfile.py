"""Writing learned weights where the settings read them: CONNECTOR_WEIGHT_* lines of a `.env` file."""

from __future__ import annotations

import os
import re
from pathlib import Path

PREFIX = "CONNECTOR_WEIGHT_"
COMMENT = "# metric weights learned by `connector tune`"
_WEIGHT_LINE = re.compile(rf"\s*(export\s+)?{PREFIX}\w*\s*=")


def write_weights(path: Path, weights: dict[str, float]) -> None:
    """Replace the file's CONNECTOR_WEIGHT_* lines (every other line kept as it was), atomically. The file keeps its
    permissions (a `.env` holds secrets: a new one is created readable by its owner only) and a symlink is
    followed, not replaced."""
    path = path.resolve()
    kept: list[str] = []
    mode = 0o600
    if path.exists():
        mode = path.stat().st_mode & 0o777
        kept = [x for x in path.read_text(encoding="utf-8").splitlines() if not _WEIGHT_LINE.match(x) and x != COMMENT]
    lines = [*kept, COMMENT, *(f"{PREFIX}{name.upper()}={value:g}" for name, value in weights.items())]
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(tmp, mode)  # the umask may have narrowed it
    os.replace(tmp, path)


def overridden(environ: dict[str, str]) -> list[str]:
    """CONNECTOR_WEIGHT_* variables of the environment: they win over `.env`, so written weights would not apply."""
    return sorted(k for k in environ if k.startswith(PREFIX))
