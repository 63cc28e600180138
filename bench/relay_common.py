"""What bench/relay.py and bench/relay_load.py share: finding the port a
hushwatch started on `listen = "127.0.0.1:0"` bound (from its socket
inodes, so nothing binds a port and releases it), and percentiles."""

import os


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def listening(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except FileNotFoundError:
        return None
    with open("/proc/net/tcp") as f:
        for row in f.readlines()[1:]:
            cols = row.split()
            if cols[3] == "0A" and cols[9] in inodes:
                return int(cols[1].split(":")[1], 16)
    return None
