"""Threaded CPython work, deterministic output: producer and consumer
threads hand objects through queues (so objects are freed by other
threads than the ones that made them), a thread pool maps JSON work,
and, with threads running, the process forks (the child works and
reports through a pipe) and starts subprocesses.

Argument: "shoal" or "glibc" (see py_dicts.py)."""
import concurrent.futures
import ctypes
import hashlib
import json
import os
import queue
import random
import subprocess
import sys
import threading


def check_allocator(expect):
    has = hasattr(ctypes.CDLL(None), "alloc_stats_get")
    if has != (expect == "shoal"):
        sys.exit("allocator check: alloc_stats_get %s, expected %s"
                 % ("present" if has else "absent", expect))


def work_item(seed):
    rng = random.Random(seed)
    obj = {"seed": seed,
           "items": [{"k": rng.randint(0, 10**9), "s": "v" * rng.randint(0, 2000)}
                     for _ in range(rng.randint(1, 60))]}
    text = json.dumps(obj, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12], len(text)


def producer(q, first, n):
    for seed in range(first, first + n):
        rng = random.Random(seed)
        q.put({"seed": seed, "payload": [str(rng.random()) * rng.randint(1, 50)
                                         for _ in range(rng.randint(1, 40))]})
    q.put(None)


def consumer(q, out, lock):
    local = []
    while True:
        item = q.get()
        if item is None:
            break
        h = hashlib.sha256(json.dumps(item, sort_keys=True).encode()).hexdigest()[:12]
        local.append((item["seed"], h))
        del item
    with lock:
        out.extend(local)


def forked_child_result():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            res = [work_item(s) for s in range(500, 700)]
            os.write(w, json.dumps(res).encode())
            os.close(w)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return hashlib.sha256(data).hexdigest()[:16]


def main():
    check_allocator(sys.argv[1] if len(sys.argv) > 1 else "glibc")

    # Producers and consumers: objects cross threads.
    out, lock, threads = [], threading.Lock(), []
    for p in range(4):
        q = queue.Queue(maxsize=64)
        threads.append(threading.Thread(target=producer, args=(q, p * 3000, 3000)))
        threads.append(threading.Thread(target=consumer, args=(q, out, lock)))
    for t in threads:
        t.start()

    # Meanwhile: a fork with threads running, and subprocesses.
    fork_digest = forked_child_result()
    sub = subprocess.run([sys.executable, "-c",
                          "import json,sys; print(len(json.dumps(list(range(100000)))))"],
                         capture_output=True, text=True, check=True)
    for t in threads:
        t.join()
    out.sort()
    print("queued items", len(out), "digest",
          hashlib.sha256(repr(out).encode()).hexdigest()[:16])
    print("fork child digest", fork_digest)
    print("subprocess said", sub.stdout.strip())

    # A thread pool, many short tasks.
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as ex:
        res = list(ex.map(work_item, range(3000)))
    print("pool results", len(res), "total bytes", sum(n for _, n in res),
          "digest", hashlib.sha256(repr(res).encode()).hexdigest()[:16])

    # Short-lived threads, each leaving its result behind.
    results = [None] * 400

    def short(i):
        results[i] = work_item(10000 + i)

    for start in range(0, 400, 8):
        batch = [threading.Thread(target=short, args=(i,)) for i in range(start, start + 8)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
    print("short threads digest", hashlib.sha256(repr(results).encode()).hexdigest()[:16])


main()
