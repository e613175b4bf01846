#!/usr/bin/python3
"""test/bench/redispy_lock.py — acquire + release cycles of redis-py's Lock.

Usage: redispy_lock.py SOCKET SECONDS

The cycle lease_fence is compared with, as redis-py does it: Lock.acquire
sends SET name token NX PX ttl (token: a fresh uuid1), Lock.release runs the
compare-and-delete Lua script with EVALSHA.  One connection, no pipelining.
Prints the cycles done and the microseconds per cycle.
"""
import sys
import time

import redis


def main():
    sock, seconds = sys.argv[1], float(sys.argv[2])
    r = redis.Redis(unix_socket_path=sock)
    lock = r.lock("bench:redispy", timeout=30)
    # warm up: connect, load the release script
    for _ in range(1000):
        if not lock.acquire(blocking=False):
            sys.exit("redis-py Lock: not acquired")
        lock.release()
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        if not lock.acquire(blocking=False):
            sys.exit("redis-py Lock: not acquired")
        lock.release()
        n += 1
        if n % 64 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - start
    print(n, 1e6 * elapsed / n)


if __name__ == "__main__":
    main()
