"""A driver script that calls hvdlite.run (tests/runner/test_run_function.py
runs it where the test itself cannot be the caller: in another network
namespace, or as a process to interrupt).

    run_function.py hosts HOSTS   allreduce on the ranks of HOSTS (host:slots,...),
                                  each printing "on <host>"; prints "results <json>"
    run_function.py sleep NP      NP ranks print "pid <pid> <job id>" and sleep until
                                  stopped; the driver prints "interrupted: <message>"
                                  when run() raises KeyboardInterrupt
"""
import json
import os
import socket
import sys
import time

import hvdlite


def allreduce_and_place(scale):
    import numpy as np
    import hvdlite.numpy as hvd
    hvd.init()
    total = hvd.allreduce(np.arange(4.0) * (hvd.rank() + 1) * scale, op=hvd.Sum)
    print(f"on {socket.gethostname()}", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "local_rank": hvd.local_rank(),
            "hostname": socket.gethostname(), "total": total.tolist()}


def sleep_forever():
    print(f"pid {os.getpid()} {os.environ['HVDLITE_JOB_ID']}", flush=True)
    while True:
        time.sleep(0.1)


def main():
    mode, value = sys.argv[1:3]
    if mode == "hosts":
        results = hvdlite.run(allreduce_and_place, args=(10.0,), hosts=value,
                              np=sum(int(h.split(":")[1]) for h in value.split(",")),
                              start_timeout=30)
        print("results " + json.dumps(results), flush=True)
    else:
        try:
            hvdlite.run(sleep_forever, np=int(value))
        except KeyboardInterrupt as interrupt:
            print(f"interrupted: {interrupt}", flush=True)


if __name__ == "__main__":
    main()
