"""Public collectives that reach the core's one-call entry without a Python
frame (Note [A public collective without a Python frame] in
csrc/python/codes/fast_entry.cc)."""
from hvdlite.common import basics


def without_frame(entry_module, entry_name, entry_arguments, name_kind=None):
    """A decorator: the collective's def as a hvdlite._codes.FastEntry that
    calls `entry_module.<entry_name>` directly with `entry_arguments`
    (constants, then the def's parameter names as str), and runs the def
    itself when the entry returns None. With `name_kind`, an unnamed call is
    named `basics.auto_name(name_kind)` first, as the def does. A decorator,
    not an assignment, so the API reference still reads a function."""
    def decorate(general):
        parameters = general.__code__.co_varnames[:general.__code__.co_argcount]
        named = [argument for argument in entry_arguments if isinstance(argument, str)]
        prefix = tuple(entry_arguments[:len(entry_arguments) - len(named)])
        if list(entry_arguments[len(prefix):]) != named:
            raise ValueError(f"{general.__qualname__}: constants first, then parameter names")
        order = tuple(parameters.index(argument) for argument in named)
        name_index = parameters.index("name") if name_kind is not None else -1
        return basics.compiled_module("_codes").FastEntry(
            general, entry_module, entry_name, prefix, order, name_index, basics.auto_name,
            name_kind)
    return decorate
