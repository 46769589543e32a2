#!/bin/bash
# bench/step_profile.sh OUT COMMAND...: rank 0 (HVDLITE_RANK) under callgrind,
# writing OUT.<pid>-<thread>; the other ranks run COMMAND as it is.
out=$1
shift
if [ "${HVDLITE_RANK:-0}" = "0" ]; then
  exec valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$out.%p" "$@"
fi
exec "$@"
