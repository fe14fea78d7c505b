#!/usr/bin/env python3
"""Crafted snapshot images, for tests: files a hostile client could hand
the daemon with export --image or attach --image (docs/image-format.md).

hostile-image.py region START LENGTH CLASS FILE [KIND]
    One region of 4 KiB pages at START, LENGTH bytes (both taken as
    written, unchecked: 2^62, a sum that wraps, an end past 2^47), all of
    it one run of CLASS (zero or hole), of KIND (default 1, anonymous; 6
    is a private file mapping). Every checksum right: only the reader's
    bounds stand in the way.
hostile-image.py sparse BYTES FILE
    A file of about BYTES bytes, sparse, whose header is right and whose
    tables (one region, then runs to the end) are zeros with a wrong
    checksum: the reader must read and hash them all to find out.
"""
import hashlib
import os
import struct
import sys

HDR_LEN = 4096
REGION_LEN = 336
RUN_LEN = 64
PAGE = 4096
CLASSES = {"data": 1, "zero": 2, "hole": 3}


def header(nregions, nruns, data_len, file_len, tables_sha):
    regions_off = HDR_LEN + data_len
    runs_off = regions_off + nregions * REGION_LEN
    h = b"UFFDDIMG" + struct.pack(
        "<IIIIQQQQQQQiI",
        1,  # version
        HDR_LEN,
        PAGE,  # align
        nregions,
        nruns,
        HDR_LEN,  # data_off
        data_len,
        regions_off,
        runs_off,
        file_len,
        0,  # created
        4242,  # pid
        0,  # flags
    )
    h += tables_sha
    h += hashlib.sha256(h).digest()
    return h + bytes(HDR_LEN - len(h))


def region(start, length, kind, first_run, nruns, counts):
    r = struct.pack("<QQQIIIIQQQQQ", start, length, 0, PAGE, kind, 0, 0,
                    first_run, nruns, *counts)
    return r + b"[hostile]".ljust(256, b"\0")


def run(ri, cls, first_page, npages):
    return struct.pack("<IIQQQ", ri, cls, first_page, npages, 0) + bytes(32)


def one_region(start, length, cls, path, kind):
    npages = (length // PAGE) & (2**64 - 1)
    counts = [0, 0, 0]
    counts[cls - 1] = npages
    tables = region(start & (2**64 - 1), length & (2**64 - 1), kind, 0, 1,
                    counts)
    tables += run(0, cls, 0, npages)
    file_len = HDR_LEN + len(tables)
    with open(path, "wb") as f:
        f.write(header(1, 1, 0, file_len, hashlib.sha256(tables).digest()))
        f.write(tables)


def sparse(size, path):
    runs_off = HDR_LEN + REGION_LEN
    nruns = (size - runs_off) // RUN_LEN
    file_len = runs_off + nruns * RUN_LEN
    with open(path, "wb") as f:
        f.write(header(1, nruns, 0, file_len, bytes(32)))
        f.write(region(0x500000000000, nruns * PAGE, 1, 0, nruns,
                       [0, 0, nruns]))
        f.truncate(file_len)


def main(argv):
    if len(argv) >= 6 and argv[1] == "region":
        kind = int(argv[6], 0) if len(argv) > 6 else 1
        one_region(int(argv[2], 0), int(argv[3], 0), CLASSES[argv[4]],
                   argv[5], kind)
    elif len(argv) == 4 and argv[1] == "sparse":
        sparse(int(argv[2], 0), argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
