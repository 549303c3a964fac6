"""Word 97-2003 documents (`.doc`, the OLE2 Word binary) → DocBook XML, by Debian's `antiword` (`-x db`).

No Python library reads the Word binary format's text and structure; antiword does, and writes DocBook: the
document's title (its summary information), chapters and sections from the built-in heading styles, paragraphs,
lists and tables, which `docbook.py` then converts like any DocBook. It runs as a child process, without a shell,
on a temporary copy of the file (it seeks; it cannot read a pipe), under a time limit and an address-space limit:
a crafted file cannot hang or exhaust the worker. Encrypted documents and damaged files fail with antiword's own
words ("Encrypted documents are not supported", "is not a Word Document").
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from connector.errors import ConversionError

TIMEOUT_S = 60  # antiword reads a 300-page manual in well under a second
MEMORY_BYTES = 1 << 30  # address space; antiword holds the document's text and tables, a few times the file

MISSING = (
    "a Word 97-2003 document (.doc) is read by antiword, which is not installed (Debian: apt-get install antiword); "
    "or save it as DOCX or ODT"
)

# The child sets its own limit and becomes antiword: `preexec_fn` is unsafe in a process with threads.
_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1]))); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def to_docbook(data: bytes) -> bytes:
    """The Word document `data` as antiword's DocBook XML (UTF-8). Raises `ConversionError` saying why not."""
    exe = shutil.which("antiword")
    if exe is None:
        raise ConversionError(MISSING)
    with tempfile.TemporaryDirectory(prefix="connector-doc-") as folder:
        path = Path(folder) / "document.doc"
        path.write_bytes(data)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", _LIMITED, str(MEMORY_BYTES), exe, "-x", "db", str(path)],
                capture_output=True,
                timeout=TIMEOUT_S,
                cwd=folder,
                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": folder},
                check=False,
            )
        except subprocess.TimeoutExpired as exc:  # run() has killed it
            raise ConversionError(f"Word document: antiword took over {TIMEOUT_S} s, stopped") from exc
    if done.returncode != 0:  # its message names the temporary file: "/tmp/…/document.doc is not a Word Document."
        said = " ".join(done.stderr.decode("utf-8", "replace").replace(str(path), "the file").split())[:300]
        said = said or (f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}")
        raise ConversionError(f"Word 97-2003 document cannot be read by antiword: {said}")
    return done.stdout
