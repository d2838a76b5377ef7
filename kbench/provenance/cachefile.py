"""kbench.provenance.cachefile: reading the small JSON files kbench keeps (the peaks cache, the run
history) without trusting what sits at their paths.

A FIFO there would block open() for a writer that never comes, /dev/zero would read until
MemoryError, a directory or a 1 GB file is not a cache. Each is read through a non-blocking
descriptor checked before a byte is read, and refused with a reason naming what it is.
"""
from __future__ import annotations

import os
import stat


class NotACacheFile(Exception):
    """A cache path that holds something other than a small regular file."""


def file_kind(mode: int) -> str:
    """What a non-regular st_mode is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a file"


def read_regular(path: str, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most max_bytes. Opened without blocking and checked
    on the open descriptor, so what is read is what was checked. Raises FileNotFoundError
    (and the OSErrors of open) as open does, NotACacheFile for anything else; `what` names
    the file in its message ("a peaks cache")."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotACacheFile(f"not a regular file ({file_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise NotACacheFile(f"{st.st_size} bytes, larger than {what} can be "
                                f"({max_bytes >> 20} MiB)")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:         # grew while being read
        raise NotACacheFile(f"larger than {what} can be ({max_bytes >> 20} MiB)")
    return data
