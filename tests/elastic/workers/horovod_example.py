"""Runs one of Horovod's example scripts unchanged, as `python example.py
args...` would (runpy), then prints "final <json>": this worker's rank and
size and a digest of its model's trained parameters, so that a test can
check that every rank ended with one model. (Not the batch-norm statistics:
each rank keeps those of its own synthetic data, in Horovod too.)

    python horovod_example.py EXAMPLE [ARGS...]
"""
import hashlib
import json
import runpy
import sys


def digest(model):
    if hasattr(model, "state_dict"):  # torch
        arrays = [value.detach().cpu().numpy() for value in model.parameters()]
    else:  # Keras
        arrays = [variable.numpy() for variable in model.trainable_weights]
    return hashlib.sha256(b"".join(array.tobytes() for array in arrays)).hexdigest()


def main():
    example = sys.argv[1]
    sys.argv = sys.argv[1:]
    scope = runpy.run_path(example, run_name="__main__")
    hvd, state = scope["hvd"], scope["state"]
    print("final " + json.dumps({"rank": hvd.rank(), "size": hvd.size(),
                                 "model": digest(scope["model"]), "iter": state.iter,
                                 "iters_timed": len(state.img_secs)}), flush=True)


if __name__ == "__main__":
    main()
