"""How many emulated CPU devices this process's memory can hold, asked before XLA starts them
(past its limit XLA aborts the whole process, from C++, with no Python error)."""

from __future__ import annotations

import math
from pathlib import Path

from tpviz.errors import DeviceSetupError

# Measured (JAX 0.10, Linux): each emulated CPU device adds about 16 MiB of virtual memory (its
# threads' stacks) to a base of about 2 GiB, and about 0.25 MiB of resident memory.
VIRTUAL_PER_DEVICE, VIRTUAL_BASE = 16 * 2**20, 2 * 2**30
RESIDENT_PER_DEVICE, RESIDENT_BASE = 2**18, 2**29


def _memory_limits() -> tuple[float, float]:
    """(address-space limit, memory this process may still use) in bytes; inf when unknown."""
    virtual = resident = math.inf
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            virtual = float(soft)
    except (ImportError, OSError, ValueError):
        pass
    for path, key in (("/sys/fs/cgroup/memory.max", None), ("/proc/meminfo", "MemAvailable:")):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if key is None:
            value = text.strip()
            if value.isdigit():
                resident = min(resident, float(value))
        else:
            for line in text.splitlines():
                if line.startswith(key):
                    resident = min(resident, float(line.split()[1]) * 1024)
    return virtual, resident


def refuse_beyond_memory(n: int) -> None:
    """Refuse ``n`` emulated devices that this process's memory cannot hold, before XLA starts
    them (past its limit XLA aborts the whole process, from C++)."""
    virtual, resident = _memory_limits()
    for limit, base, each, what in ((virtual, VIRTUAL_BASE, VIRTUAL_PER_DEVICE,
                                     "the address-space limit (ulimit -v)"),
                                    (resident, RESIDENT_BASE, RESIDENT_PER_DEVICE,
                                     "the memory available")):
        if base + n * each > limit:
            most = max(0, int((limit - base) // each))
            raise DeviceSetupError(
                f"setup_devices({n:,}): {n:,} emulated CPU devices need about "
                f"{(base + n * each) / 2**30:.1f} GiB, more than {what}, "
                f"{limit / 2**30:.1f} GiB; XLA would abort the process. Ask for at most "
                f"{most:,} devices, or raise the limit. Plans need no devices.")
