"""Giving the process's freed memory back to the system: glibc's malloc_trim, where there is one."""

from __future__ import annotations

import ctypes


def malloc_trim() -> bool:
    """glibc's malloc_trim(0): give the system every free page of the heap, not only its top (where the
    trim threshold applies). False where there is none (not glibc)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = (ctypes.c_size_t,)
    trim.restype = ctypes.c_int
    trim(0)
    return True
