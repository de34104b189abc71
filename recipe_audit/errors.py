"""One sentence from a library's error: the project reports every failure as one line."""

from __future__ import annotations

import re

# a terminal's escape sequences (colours, bold: ECMA-48 CSI and OSC), which a library's message may carry
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def plain(text: str) -> str:
    """``text`` without a terminal's escape sequences (what the error tags and sentences hold).

    >>> plain("\x1b[1mdo this only if you trust it\x1b[0m.")
    'do this only if you trust it.'
    """
    return _ANSI.sub("", text)


def first_line(exc: BaseException, limit: int | None = None) -> str:
    """The first non-empty line of ``exc``'s message (its type's name when it has none), in plain
    text (:func:`plain`), cut at ``limit`` characters.

    >>> first_line(ValueError("no such table: runs\\n[SQL: SELECT ...]"))
    'no such table: runs'
    >>> first_line(KeyError()), first_line(OSError("x" * 9), limit=4)
    ('KeyError', 'xxxx')
    """
    lines = [ln for ln in plain(str(exc)).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:limit]


def error_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line`` of ``exc``, the innermost cause first when ``exc`` wraps others
    (``raise ... from``, or an error raised while handling another): a wrapper's first line often
    names only where the error happened (Hydra's ``InstantiationException: Error in call to target
    '...':``), the cause what happened.

    >>> error_line(ValueError("bad lr\\nmore"))
    'ValueError: bad lr'
    >>> try:
    ...     try:
    ...         raise OSError("disk full")
    ...     except OSError as e:
    ...         raise RuntimeError("Error in call to target 'x.Logger':\\nOSError('disk full')") from e
    ... except RuntimeError as e:
    ...     print(error_line(e))
    OSError: disk full (raised as RuntimeError: Error in call to target 'x.Logger')
    """
    chain = [exc]
    while True:
        cur = chain[-1]
        nxt = cur.__cause__ if cur.__cause__ is not None else (
            None if cur.__suppress_context__ else cur.__context__)
        if nxt is None or any(nxt is seen for seen in chain):
            break
        chain.append(nxt)
    inner = chain[-1]
    line = f"{type(inner).__name__}: {first_line(inner)}"
    if inner is not exc:
        line += f" (raised as {type(exc).__name__}: {first_line(exc).rstrip(':').rstrip()})"
    return line[:limit]


#: The shell's exit status for a command stopped by a broken pipe (128 + SIGPIPE).
BROKEN_PIPE_STATUS = 141


def stdout_gone() -> int:
    """The reader of stdout left early (``recipe-audit ... | head -1``): stop quietly, as Unix
    tools do. stdout is pointed at the null device, so that Python's own flush at exit does not
    meet the broken pipe again; returns the shell's status for a broken pipe,
    :data:`BROKEN_PIPE_STATUS`."""
    import os
    import sys

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (captured): nothing to point elsewhere
        pass
    return BROKEN_PIPE_STATUS


# what a crash's error means and what sets it right, where the error itself does not say it in its
# first line: (the error's type name, words of its first line, the fix)
KNOWN_FIXES = (
    ("UnpicklingError", "Weights only load failed",
     "torch 2.6 and later load checkpoints with weights_only=True, which refuses the objects a Lightning "
     "checkpoint keeps (lightning-hydra-template's among them); if you trust the checkpoint, "
     "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 loads it as torch did before"),
)


def known_fix(error: str) -> str | None:
    """What sets right a crash whose error line (:func:`error_line`) is ``error``, when
    :data:`KNOWN_FIXES` knows it (None otherwise).

    >>> known_fix("UnpicklingError: Weights only load failed. This file can still be loaded")[:33]
    'torch 2.6 and later load checkpoi'
    >>> known_fix("ValueError: bad lr") is None
    True
    """
    for type_name, words, fix in KNOWN_FIXES:
        if error.startswith(type_name + ":") and words in error:
            return fix
    return None


def closest_first(name: str, names, prefixes: tuple[str, ...] = ()) -> list[str]:
    """``names`` ordered by how close each is to ``name`` (difflib's similarity ratio, the closest
    first; equals by name), each compared without the first of ``prefixes`` it starts with: for
    a sentence that lists what a misspelt key could have been.

    >>> closest_first("val_ac", ["epoch", "train_loss", "metrics.val_acc", "val_loss"], ("metrics.",))
    ['metrics.val_acc', 'val_loss', 'train_loss', 'epoch']
    """
    import difflib

    def bare(n: str) -> str:
        return next((n[len(p):] for p in prefixes if n.startswith(p)), n)

    return sorted(names, key=lambda n: (-difflib.SequenceMatcher(None, name, bare(n)).ratio(), n))
