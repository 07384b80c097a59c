import signal
import subprocess
import sys
import time

delay = float(sys.argv[1])
cmd = sys.argv[2:]
p = subprocess.Popen(
    cmd,
    stdout=subprocess.DEVNULL,
    stderr=subprocess.PIPE,
    text=True,
    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
)
time.sleep(delay)
p.send_signal(signal.SIGINT)
err = p.communicate()[1]
print("rc", p.returncode, "| stderr tail:", err.strip().splitlines()[-2:])
