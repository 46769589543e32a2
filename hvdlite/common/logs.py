"""hvdlite's Python-side messages (launcher, elastic driver and workers,
bindings) go through logging.getLogger("hvdlite") and its children, filtered
like the core's by HVDLITE_LOG_LEVEL (or HOROVOD_LOG_LEVEL: trace, debug,
info, warning, error, fatal; default warning).

By default the "hvdlite" logger writes each message to stderr as
"hvdlite: <message>" (the launcher's own as "hvdliterun: <message>", through
its console so that lines never interleave) and does not propagate: a program
that wants them elsewhere replaces its handlers, or sets propagate = True.
"""
import logging
import os
import sys

from hvdlite.common import config

ROOT = "hvdlite"
LEVELS = config.LOG_LEVELS
TRACE = LEVELS["trace"]  # below logging.DEBUG, as the core's trace is below its debug


def level_from(environ):
    """The logging level HVDLITE_LOG_LEVEL / HOROVOD_LOG_LEVEL names in
    `environ`; warning when unset. A name the core would refuse also means
    warning here: the core's error at init() says what is wrong with it."""
    return config.get("HVDLITE_LOG_LEVEL", environ)


class _StderrHandler(logging.Handler):
    """Writes to the stderr of the moment (sys.stderr may be replaced after
    import: pytest, notebooks). A record with a `console` attribute (the
    launcher's) is written through it."""

    def emit(self, record):
        try:
            console = getattr(record, "console", None)
            if console is not None:
                console.message_line(record.getMessage())
                return
            sys.stderr.write(f"hvdlite: {record.getMessage()}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


def _configure():
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        root.addHandler(_StderrHandler())
        root.propagate = False
        root.setLevel(level_from(os.environ))
    return root


def get(name=None):
    """logging.getLogger("hvdlite") or its child "hvdlite.<name>", set up."""
    root = _configure()
    return root if name is None else root.getChild(name)


def set_level(name):
    """Sets the "hvdlite" logger's level by the core's names (e.g. from
    hvdliterun --log-level)."""
    _configure().setLevel(LEVELS[name.lower()])
