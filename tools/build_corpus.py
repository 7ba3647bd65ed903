"""Build the shipped default corpus, reference/corpus/stdlib.zip, from a standard library folder.

    python tools/build_corpus.py [STDLIB_FOLDER]   # default: this Python's standard library

The snapshot is the default corpus' rule (reference.data.stdlib_files) over that folder, written
as a zip with fixed timestamps and permissions in path order, so the same folder always gives the
same file; the bytes nodes train on are the members' bytes, whatever Python reads them. The
shipped file was built from CPython 3.11.7's standard library (PSF licence:
reference/corpus/LICENSE-PSF.txt).
Rebuilding it changes the default data root: TrainingConfig's constructor default and
tests/trainer/test_pinned_data.py follow it (the test names the new root).
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

from reference.data import DEFAULT_CORPUS, Corpus, stdlib_files


def build(stdlib: Path, out: Path = DEFAULT_CORPUS) -> bytes:
    """Write the snapshot of ``stdlib`` to ``out``; its data root."""
    items = stdlib_files(stdlib)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as archive:
        for rel, data in items:
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compresslevel=9)
    licence = stdlib / "LICENSE.txt"
    if licence.is_file():
        shutil.copyfile(licence, out.parent / "LICENSE-PSF.txt")
    return Corpus.from_stdlib(stdlib).root


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else sysconfig.get_paths()["stdlib"])
    root = build(folder)
    size = DEFAULT_CORPUS.stat().st_size
    sys.stdout.write(f"{DEFAULT_CORPUS}: {size} bytes, data root 0x{root.hex()}\n")
