"""Writes to stdout and stderr: long lines (to catch interleaving), a byte that
is not UTF-8, and a last line without a newline."""
import os
import sys

rank = int(os.environ["HVDLITE_RANK"])
out, err = sys.stdout.buffer, sys.stderr.buffer
for _ in range(100):
    out.write(str(rank).encode() * 3000 + b"\n")
err.write(f"warning from rank {rank}\n".encode())
err.write(b"bad byte \xff here\n")
out.write(f"hello from rank {rank}\n".encode())
out.write(f"no newline at the end from rank {rank}".encode())
