"""An elastic NumPy job that allreduces and commits every 20 ms until it
has run --min-steps steps and has --size ranks (at most --max-steps steps).
--kill W: worker W kills itself (SIGKILL) at step 3 of its first round."""
import argparse
import os
import signal
import time

import numpy as np

import hvdlite.numpy as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--min-steps", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=1500)
    parser.add_argument("--kill", type=int)
    args = parser.parse_args()
    worker = int(os.environ["HVDLITE_ELASTIC_WORKER_ID"].rsplit("/", 1)[1])
    hvd.init()
    state = hvd.elastic.ObjectState(step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < args.max_steps:
            if args.kill == worker and state.step == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            total = hvd.allreduce(np.ones(1), op=hvd.Sum, name="x")
            assert total[0] == hvd.size(), (total, hvd.size())
            state.step += 1
            state.commit()
            if state.step >= args.min_steps and hvd.size() == args.size:
                return
            time.sleep(0.02)

    train(state)
    print(f"done at step {state.step} with {hvd.size()} ranks", flush=True)


if __name__ == "__main__":
    main()
