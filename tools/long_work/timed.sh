#!/bin/bash
# usage: timed.sh HOME NAME -- command...   runs command with a lock prober beside it
home=$1; name=$2; shift 3
.venv/bin/python tools/long_work/prober.py "$home" 3600 ${OUT:-/tmp/long-work}/$name.probe.json &
pp=$!
rm -f ${OUT:-/tmp/long-work}/$name.probe.json.ready; while [ ! -e ${OUT:-/tmp/long-work}/$name.probe.json.ready ]; do sleep 0.2; done
/usr/bin/time -f '{"wall_s": %e, "maxrss_kb": %M}' -o ${OUT:-/tmp/long-work}/$name.time "$@" > ${OUT:-/tmp/long-work}/$name.stdout 2> ${OUT:-/tmp/long-work}/$name.stderr
echo "rc=$?" >> ${OUT:-/tmp/long-work}/$name.time
kill -TERM $pp; wait $pp
echo "== $name"; cat ${OUT:-/tmp/long-work}/$name.time; cat ${OUT:-/tmp/long-work}/$name.probe.json; echo; echo "-- stderr (tail)"; tail -c 600 ${OUT:-/tmp/long-work}/$name.stderr; echo "-- stdout bytes: $(wc -c < ${OUT:-/tmp/long-work}/$name.stdout)"
