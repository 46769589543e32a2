"""Imports Horovod's modules as a script written for Horovod would, and
prints JSON: for each, the module it resolved to (its __name__ and file), so
the test can tell hvdlite from an installed Horovod. With "--identity" it
also checks that aliases are hvdlite's own module objects and classes."""
import importlib
import json
import sys

NAMES = ["horovod", "horovod.torch", "horovod.torch.elastic", "horovod.torch.mpi_ops",
         "horovod.common.exceptions", "horovod.common.process_sets"]
TENSORFLOW = ["horovod.tensorflow", "horovod.tensorflow.elastic", "horovod.tensorflow.mpi_ops",
              "horovod.tensorflow.keras",
              "horovod.tensorflow.keras.elastic", "horovod.keras", "horovod.keras.elastic"]

names = NAMES + (TENSORFLOW if "--tensorflow" in sys.argv else [])
found = {}
for name in names:
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        found[name] = {"error": str(error)}
        continue
    found[name] = {"name": module.__name__, "file": getattr(module, "__file__", None),
                   "spec": module.__spec__.name if module.__spec__ else None}
if "--identity" in sys.argv:
    import horovod.torch as hvd
    import hvdlite.common.exceptions
    import hvdlite.torch
    from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
    assert hvd is hvdlite.torch
    assert HorovodInternalError is hvdlite.common.exceptions.HorovodInternalError
    assert HostsUpdatedInterrupt is hvdlite.common.exceptions.HostsUpdatedInterrupt
    assert sys.modules["horovod.torch"] is hvdlite.torch
    import horovod.ray
    import horovod.spark
    import hvdlite.ray
    import hvdlite.spark
    assert horovod.spark is hvdlite.spark and horovod.ray is hvdlite.ray
    try:
        import horovod.mxnet  # noqa: F401  (hvdlite has no counterpart)
    except ModuleNotFoundError as error:
        found["horovod.mxnet"] = {"error": str(error)}
print("IMPORTS", json.dumps(found), flush=True)
