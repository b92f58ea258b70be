#!/usr/bin/env python3
"""How a trace sits in the page cache, for fair timings against tcpdump.

    python3 benches/page_cache.py state FILE...   # MiB cached, MiB in 2 MiB mappings
    python3 benches/page_cache.py evict FILE...   # drop FILE's cached pages
    python3 benches/page_cache.py huge FILE...    # evict, then read back in 2 MiB folios

A trace just written (`flowsieve gen-trace`, `cp`, `tcpdump -w`) is cached
in 4 KiB pages. One read from disk on a recent kernel (ext4 or xfs with
large folios) is cached mostly in larger folios, and a map of it is then
backed by 2 MiB pages, which spares the reader a TLB walk per 4 KiB of
trace. flowsieve maps plain traces, so the same file can time a few per
cent apart in the two states (BENCHMARKS.md, sixteenth round); `state`
says which one a file is in (it reads the file once, so a file not
cached is read in). `huge` asks for 2 MiB folios outright
(`MADV_HUGEPAGE` on a map of the evicted file, then one read of each
page). Linux only; `evict` needs nothing but read access.
"""
import mmap
import os
import re
import sys


def mapped(path):
    """A read-only map of the whole of `path`."""
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        return m


def smaps_of(path):
    """Resident kB and kB mapped by 2 MiB entries of this process's maps of `path`."""
    text = open("/proc/self/smaps").read()
    name = os.path.realpath(path)
    rss = pmd = 0
    for block in re.split(r"\n(?=[0-9a-f]+-[0-9a-f]+ )", text):
        if block.split("\n", 1)[0].endswith(" " + name):
            rss += int(re.search(r"^Rss:\s+(\d+) kB", block, re.M).group(1))
            pmd += int(re.search(r"^FilePmdMapped:\s+(\d+) kB", block, re.M).group(1))
    return rss, pmd


def touch(m, huge):
    """Reads one byte of each page of `m` (after the huge-page advice if `huge`)."""
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)
    return sum(m[i] for i in range(0, len(m), 4096))


def evict(path):
    """Asks the kernel to drop `path`'s clean cached pages."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("state", "evict", "huge"):
        sys.exit(__doc__)
    what, files = sys.argv[1], sys.argv[2:]
    for path in files:
        if what in ("evict", "huge"):
            evict(path)
        if what == "evict":
            print(f"{path}: evicted")
            continue
        m = mapped(path)
        touch(m, what == "huge")
        rss, pmd = smaps_of(path)
        m.close()
        print(f"{path}: {rss / 1024:.1f} MiB cached, {pmd / 1024:.1f} MiB of it in 2 MiB mappings")


if __name__ == "__main__":
    main()
