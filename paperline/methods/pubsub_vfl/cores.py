"""The machine's cores split between the parties (the paper's C_a + C_p): each party's processes
are pinned to its share (`os.sched_setaffinity`) with their BLAS threads limited to it, so a
party's compute is bounded by its cores, not by how many processes it starts."""
from __future__ import annotations

import os


def available() -> list[int]:
    """The cores this process may run on (its affinity where the OS has one, else all of them)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def usable(total: int | None) -> list[int]:
    """The first `total` available cores (None: all of them); more than the machine gives is an error."""
    cores = available()
    if total is None:
        return cores
    if total > len(cores):
        raise ValueError(f"total_cores: {total}, but this machine lets the run use {len(cores)} "
                         f"(cores {cores}); lower total_cores or leave it out (all of them)")
    return cores[:total]


def counts(total: int, w_a: int, w_p: int) -> tuple[int, int]:
    """(C_a, C_p): the cores split in proportion to the parties' workers (the paper splits them
    evenly per worker), each party at least one; on one core both parties share it."""
    if total == 1:
        return 1, 1
    c_a = min(total - 1, max(1, round(total * w_a / (w_a + w_p))))
    return c_a, total - c_a


def split(cores: list[int], w_a: int, w_p: int) -> dict[str, list[int]]:
    """The cores of each party: the active party's first, the passive party's after them."""
    c_a, _ = counts(len(cores), w_a, w_p)
    if len(cores) == 1:
        return {"active": list(cores), "passive": list(cores)}
    return {"active": cores[:c_a], "passive": cores[c_a:]}


def blas_env(threads: int) -> dict[str, str]:
    """Thread limits of numpy's BLAS, read when numpy loads: set in a child's environment."""
    value = str(max(1, threads))
    return {name: value for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                                      "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")}


def pin(cores: list[int]) -> None:
    """This process onto `cores` (where the OS can)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
