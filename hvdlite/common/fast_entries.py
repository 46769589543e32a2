"""Public collectives that reach the core's one-call entry without a Python
frame (Note [A public collective without a Python frame] in
csrc/python/codes/fast_entry.cc)."""
from hvdlite.common import basics


def _argument_map(general, parameters, arguments):
    """(slots, constants) of a call's `arguments` as the FastEntry reads them:
    a str is the def's parameter of that name (slot: its index), anything
    else a constant (slot -1)."""
    for argument in arguments:
        if isinstance(argument, str) and argument not in parameters:
            raise ValueError(f"{general.__qualname__}: {argument!r} names no parameter of the def")
    slots = tuple(parameters.index(a) if isinstance(a, str) else -1 for a in arguments)
    constants = tuple(None if isinstance(a, str) else a for a in arguments)
    return slots, constants


def without_frame(entry_module, entry_name, entry_arguments, name_kind=None, declined=None):
    """A decorator: the collective's def as a hvdlite._codes.FastEntry that
    calls `entry_module.<entry_name>` directly with `entry_arguments` (each a
    constant, or a str: the def's parameter of that name). When the entry
    returns None, `declined`, a pair (function, arguments in the same form),
    runs: the def's general path, which does not ask the entry again (Note
    [Declined without asking twice]); without it, the def itself. With
    `name_kind`, an unnamed call is named `basics.auto_name(name_kind)`
    first, as the def does. A decorator, not an assignment, so the API
    reference still reads a function."""
    def decorate(general):
        parameters = general.__code__.co_varnames[:general.__code__.co_argcount]
        entry_slots, entry_constants = _argument_map(general, parameters, entry_arguments)
        function, arguments = declined if declined is not None else (None, ())
        declined_slots, declined_constants = _argument_map(general, parameters, arguments)
        name_index = parameters.index("name") if name_kind is not None else -1
        return basics.compiled_module("_codes").FastEntry(
            general, entry_module, entry_name, entry_slots, entry_constants, function,
            declined_slots, declined_constants, name_index, basics.auto_name, name_kind)
    return decorate
