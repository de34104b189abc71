"""Reading a small file a user names as input (a release policy, a trusted key): only a regular
file, at most :data:`MAX_INPUT_BYTES`, and text only when it decodes; anything else is refused at
once with one sentence that names the file (:class:`InputFileError`).

The file is opened without blocking (``O_NONBLOCK``) and checked with ``fstat`` on the open
descriptor before a byte is read: a named pipe with no writer, a device (``/dev/zero``,
``/dev/urandom``, a terminal) or a directory, under its own name or through a symbolic link, is
refused before it could block or grow memory; what is checked is what is read (no window between
a check of the name and the open).

>>> read_small_text("/dev/zero", "the release policy")
Traceback (most recent call last):
...
recipe_audit.files.InputFileError: The release policy /dev/zero is a character device, not a regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["MAX_INPUT_BYTES", "InputFileError", "read_small_file", "read_small_text"]

#: The most a policy file or key may hold: 1 MiB (a policy is a few hundred bytes).
MAX_INPUT_BYTES = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputFileError(ValueError):
    """An input file cannot be read as one (one sentence naming the file)."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a plain file")


def _sentence(what: str) -> str:
    return what[:1].upper() + what[1:]


def read_small_file(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (``what``: how a sentence names it, e.g. "the
    release policy"), at most ``limit`` of them; :class:`InputFileError` otherwise."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        raise InputFileError(f"Cannot read {what} {name}: {exc.strerror or exc}.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            link = f" (a link to {os.path.realpath(name)})" if os.path.islink(name) else ""
            raise InputFileError(f"{_sentence(what)} {name}{link} is {_kind(st.st_mode)}, not a regular file.")
        too_large = InputFileError(f"{_sentence(what)} {name} is larger than {limit:,} bytes; it cannot be "
                                   f"what it should be.")
        if st.st_size > limit:
            raise too_large
        chunks, total = [], 0
        while True:  # a file that grows while it is read is still cut at the limit
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise too_large
        return b"".join(chunks)
    except OSError as exc:
        raise InputFileError(f"Cannot read {what} {name}: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)


def read_small_text(path: str | os.PathLike, what: str, limit: int = MAX_INPUT_BYTES) -> str:
    """:func:`read_small_file` decoded as UTF-8 (a byte-order mark allowed); a file in another
    encoding (UTF-16, Latin-1) is refused with one sentence naming it."""
    data = read_small_file(path, what, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        hint = " (it looks like UTF-16)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise InputFileError(f"{_sentence(what)} {Path(path)} is not UTF-8 text{hint}: byte {exc.start} cannot be "
                             f"decoded; save it as UTF-8.") from None
