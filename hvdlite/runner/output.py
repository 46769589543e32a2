"""Forwards each rank's output to the launcher's terminal, one whole line at
a time, prefixed like Horovod: `[1]<stdout>:text`."""
import logging
import os
import sys
import threading
import time

from hvdlite.common import logs


class Console:
    """Writes whole lines to the launcher's stdout and stderr. Every line is
    written and flushed under one lock, so lines from different ranks (and
    the launcher's own messages) never interleave mid-line."""

    def __init__(self, stdout=None, stderr=None, timestamps=False):
        self._streams = {"stdout": stdout or sys.stdout, "stderr": stderr or sys.stderr}
        self._timestamps = timestamps
        self._broken = set()
        self._lock = threading.Lock()

    def write_line(self, stream_name, text):
        """Writes `text` and a newline to "stdout" or "stderr"."""
        stream = self._streams[stream_name]
        encoding = getattr(stream, "encoding", None) or "utf-8"
        # Never fail on a character the terminal's encoding lacks.
        text = (text + "\n").encode(encoding, "replace").decode(encoding)
        with self._lock:
            if stream_name in self._broken:
                return
            try:
                stream.write(text)
                stream.flush()
            except (BrokenPipeError, ValueError):
                # The reader went away (e.g. `| head`); keep draining the
                # ranks' pipes so they never block on a full one.
                self._broken.add(stream_name)

    def rank_line(self, stream_name, text):
        """A line of a rank's output; with timestamps (horovodrun's
        -prefix-timestamp) it starts with the time, as horovodrun's do."""
        if self._timestamps:
            text = time.strftime("%a %b %d %H:%M:%S %Y") + text
        self.write_line(stream_name, text)

    def message(self, text, level=logging.WARNING):
        """A message from the launcher itself, on stderr: through the
        "hvdlite.runner" logger (hvdlite/common/logs.py), whose default
        handler writes it back here."""
        logger = logs.get("runner")
        if logger.isEnabledFor(level):
            logger.log(level, text, extra={"console": self})

    def message_line(self, text):
        """Writes a launcher message as is, without going through logging."""
        self.write_line("stderr", f"hvdliterun: {text}")


def stderr_pointer(label, output):
    """Where to read a failed process's error: its stderr lines are already on
    the console (prefixed `[label]<stderr>:`), and are not printed again."""
    return f" (its stderr is above, lines [{label}]<stderr>)" if output.wrote_stderr() else ""


class RankOutput:
    """Reads one rank's stdout and stderr pipes on two threads until EOF.

    Each line goes to the console with the rank's prefix and, when
    `directory` is given, unprefixed to directory/rank.<r>/stdout|stderr.
    """

    def __init__(self, rank, console, directory=None):
        self.rank = rank
        self._console = console
        self._wrote_stderr = False
        self._threads = []
        self._logs = {name: self._open_log(directory, name) for name in ("stdout", "stderr")}

    def start(self, stdout_pipe, stderr_pipe):
        for name, pipe in (("stdout", stdout_pipe), ("stderr", stderr_pipe)):
            log = self._logs[name]
            thread = threading.Thread(target=self._forward, args=(name, pipe, log),
                                      name=f"hvdlite-rank{self.rank}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def join(self, timeout=None):
        """Waits until both pipes reached EOF; returns False on timeout."""
        for thread in self._threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self._threads)

    def join_stderr(self, timeout):
        """Waits until stderr reached EOF, so that all of it is on the console."""
        if len(self._threads) == 2:
            self._threads[1].join(timeout)

    def wrote_stderr(self):
        """True once the rank wrote a line to stderr."""
        return self._wrote_stderr

    def _open_log(self, directory, name):
        if directory is None:
            return None
        rank_directory = os.path.join(directory, f"rank.{self.rank}")
        os.makedirs(rank_directory, exist_ok=True)
        return open(os.path.join(rank_directory, name), "wb")

    def write_line(self, name, raw):
        """Handles one line (bytes, newline included or not) the rank wrote
        to stream `name`: console with prefix, log file as is."""
        log = self._logs[name]
        if log is not None:
            log.write(raw)
            log.flush()
        text = raw.rstrip(b"\n").decode("utf-8", errors="replace")
        self._console.rank_line(name, f"[{self.rank}]<{name}>:" + text)
        if name == "stderr":
            self._wrote_stderr = True

    def close(self):
        """Closes the log files (for output fed through write_line)."""
        for log in self._logs.values():
            if log is not None:
                log.close()

    def _forward(self, name, pipe, log):
        try:
            for raw in iter(pipe.readline, b""):
                self.write_line(name, raw)
        finally:
            pipe.close()
            if log is not None:
                log.close()
