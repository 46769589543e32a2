"""Exceptions raised by every hvdlite binding (the C++ core maps its errors onto these)."""


class HvdliteInternalError(RuntimeError):
    """A collective failed at run time: a lost peer, ranks that disagree on a
    tensor, a stall, or a runtime that was shut down. Elastic training catches
    it to restore the last commit and continue."""


class HostsUpdatedInterrupt(RuntimeError):
    """Hosts were added or removed; elastic training re-forms the job."""

    def __init__(self, skip_sync=False):
        super().__init__("the set of hosts of this job changed")
        self.skip_sync = skip_sync


# Horovod's names, so code written for Horovod catches the same errors.
HorovodInternalError = HvdliteInternalError

__all__ = ["HvdliteInternalError", "HorovodInternalError", "HostsUpdatedInterrupt"]
