"""The handles that *_async functions return, for every binding that drives
the core through hvdlite._core (hvdlite.numpy, hvdlite.torch).

A handle stands for one or more core operations (a grouped call has one per
tensor), the buffers the core reads and writes until they finish (kept
alive here, since the core holds only raw pointers), and how to turn the
core's results into what synchronize() returns.

One table for the whole process, with one counter: a handle number means one
operation whatever binding is asked about it, and each entry remembers the
binding that made it, since only that binding knows how to finish it (a
torch handle given to hvdlite.numpy.synchronize is refused, naming both,
instead of finding an unrelated entry). It is the process's only handle
table: the core keeps none. Each core operation is the hvdlite._core.Handle
that enqueue returned, held here until synchronize() (Note [One way in] in
csrc/api/session.h); the TensorFlow and JAX bindings need no table, as the
core calls them back.
"""
import itertools

from hvdlite.common import basics
from hvdlite.common.collective_table import written


class HandleTable:
    """handle -> (binding, core entries, finish, payload). `binding` is the
    module name of the binding that made it ("hvdlite.torch"). A core entry is
    a pair (hvdlite._core.Handle, dtype code), or for a CUDA tensor a triple
    (Handle, dtype code, GPU index); finish(payload, results) builds the user's
    result from the core's (output bytes, shape, received splits, value)
    tuples, one per core entry.

    CUDA results are ready on the stream that reads them (Note [Completion on
    the consumer's stream] in csrc/transport/device_communicator.h): the
    binding registers how to find the calling thread's current stream of a
    GPU (set_consumer_stream), and synchronize() hands it to the core's wait.

    No lock: dict insert/pop and next() on a counter are atomic under the GIL,
    and each handle is synchronized by one thread.
    """

    def __init__(self):
        self._pending = {}
        self._ids = itertools.count(1)
        self._consumer_stream = {}
        self._host_wait = None  # hvdlite._core.wait, bound at the first synchronize()

    def set_consumer_stream(self, binding, current_stream):
        """current_stream(device) -> the calling thread's current stream of
        that GPU (a cudaStream_t as an int), for `binding`'s CUDA handles."""
        self._consumer_stream[binding] = current_stream

    def register_with(self, core):
        """Lets `core` (hvdlite._core) add and take this table's common
        entries itself (Note [The handle table's common cases in C] in
        csrc/python/handle_table.cc): the same dict and counter, so either
        side finds what the other added."""
        core.set_handle_table(self._pending, self._ids, written, self.synchronize)

    def add(self, binding, entries, finish, payload):
        handle = next(self._ids)
        self._pending[handle] = (binding, entries, finish, payload)
        return handle

    def poll(self, handle, binding):
        """True once every core operation behind `handle` has finished."""
        pending = self._pending.get(handle)
        if pending is None or pending[0] != binding:
            raise ValueError(_refusal(handle, binding, pending))
        poll = basics.core().poll
        return all(poll(entry[0]) for entry in pending[1])

    def synchronize(self, handle, binding):
        """Waits for every core operation of `handle` and returns its result.
        A failure is raised only after all members have finished, so that no
        buffer is released while the core may still write into it."""
        pending = self._pending.pop(handle, None)
        if pending is None or pending[0] != binding:
            if pending is not None:  # still its own binding's to synchronize
                self._pending[handle] = pending
            raise ValueError(_refusal(handle, binding, pending))
        _, entries, finish, payload = pending
        if len(entries) == 1:
            entry = entries[0]
            if len(entry) == 2:  # one host operation, every gradient's case: _wait inlined
                # Note [Synchronizing a gradient in one frame]
                result = (self._host_wait or self._bind_host_wait())(entry[0], entry[1])
                if finish is written:  # in place: its payload's output, without finish's frame
                    return payload[1]
                return finish(payload, (result,))
            return finish(payload, (self._wait(binding, entry),))
        results = []
        first_error = None
        for entry in entries:
            try:
                results.append(self._wait(binding, entry))
            except Exception as error:  # noqa: BLE001 - re-raised below
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return finish(payload, results)

    def _bind_host_wait(self):
        self._host_wait = basics.core().wait
        return self._host_wait

    def _wait(self, binding, entry):
        if len(entry) == 2 or entry[2] < 0:
            return basics.core().wait(entry[0], entry[1])
        return basics.core().wait(entry[0], entry[1], self._consumer_stream[binding](entry[2]))


def _refusal(handle, binding, pending):
    if pending is None:
        return (f"handle {handle!r} is unknown: it was already synchronized, or was not "
                f"returned by an *_async function")
    return (f"handle {handle!r} was returned by {pending[0]}, not {binding}: pass it to "
            f"{pending[0]}.synchronize()/poll()")


# Note [Synchronizing a gradient in one frame]
# synchronize() runs once per gradient of every step (200 a step of a
# transformer's 200 tensors), so its common case, one host operation whose
# result is already in the caller's buffer (`written`: allreduce_async_,
# broadcast_async_), runs in this one frame: the core's wait is bound once
# (basics.core() was a call per gradient) and `written` is not called for the
# output its payload already holds. Each frame saved is some 400 interpreter
# instructions (callgrind, bench/step_profile.py).
table = HandleTable()
