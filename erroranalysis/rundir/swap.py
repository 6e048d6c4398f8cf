"""Replace one folder by another in one step, for `--overwrite`: the new run is built beside the old one and they
trade places at the end, so a failed or killed overwrite leaves the old run as it was."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return function


def exchange(new: Path, old: Path) -> None:
    """Swap `new` and `old` (both folders); afterwards `old`'s path holds the new content and `new`'s the old.

    Linux's renameat2(RENAME_EXCHANGE) does it atomically; elsewhere (or on file systems without it) two renames,
    with the old folder parked under a hidden name in between."""
    function = _renameat2()
    if function is not None:
        if function(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(old), _RENAME_EXCHANGE) == 0:
            return
        if ctypes.get_errno() not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), str(old))
    parked = old.with_name(f".{old.name}.old-{secrets.token_hex(4)}")
    os.rename(old, parked)
    os.rename(new, old)
    os.rename(parked, new)


def building_path(final: Path) -> Path:
    """A hidden sibling of `final` to build a replacement in (the app and `discover` skip dot-folders)."""
    return final.with_name(f".{final.name}.new-{secrets.token_hex(4)}")


def remove_stale_builds(final: Path, alive) -> None:
    """Drop the half-built replacements of killed overwrites (their lock is free)."""
    for folder in final.parent.glob(f".{final.name}.new-*"):
        if folder.is_dir() and not alive(folder):
            shutil.rmtree(folder, ignore_errors=True)
