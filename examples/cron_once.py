"""A cron job that runs at most once across hosts, with the built-in at-most-once runs.

Every host has the same crontab line. In Python the job is decorated with ``store.at_most_once``; from the
shell, ``distlock run --once`` does the same around any command. Either way one try, never a wait: the host
that gets the name runs the job, the others skip at once. The name stays taken ``at_least`` seconds after
the start even when the job ends sooner, so a host whose clock or cron fires a little late still finds it
taken and skips instead of running the job a second time; ``at_most`` frees it if the job hangs or the host
dies.

    @store.at_most_once("cron/nightly-report", at_most=600, at_least=10)
    def nightly_report() -> str: ...

    0 2 * * *  distlock --url URL run --once --at-most 600 --at-least 10 cron/nightly-report -- ./report.sh

    python examples/cron_once.py                     # 5 simulated hosts on a temporary SQLite store
    python examples/cron_once.py --url redis://...   # the same across real hosts: one store URL for all

The simulation starts the hosts a little apart, every other one through the command line, and counts how
often the job ran. (On a real store the name then stays taken for ``AT_LEAST`` seconds: run it again after.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import distlock

JOB = "cron/nightly-report"
AT_MOST = 600.0  # the lease, not renewed: a hung job or a dead host frees the name after this long
AT_LEAST = 10.0  # the name stays taken this long after the start (more than the spread of the hosts' clocks)
# what ./report.sh would do: the work, then a line in the shared log
REPORT_SH = "import sys, time; time.sleep(0.2); open(sys.argv[1], 'a').write('ran\\n')"


def python_host(url: str, host: int, out: Path) -> None:
    """What the crontab line runs on a host with the job in Python."""
    with distlock.connect(url) as store:

        @store.at_most_once(JOB, at_most=AT_MOST, at_least=AT_LEAST)
        def nightly_report() -> str:
            time.sleep(0.2)  # the real work
            with out.open("a") as f:
                f.write("ran\n")
            return "report sent"

        result = nightly_report()  # None: skipped, another host has the name (or had it less than AT_LEAST ago)
    said = "skipped, another host ran it" if result is None else f"ran the job: {result}"
    print(f"host {host} (@store.at_most_once): {said}", flush=True)


def shell_host(url: str, out: Path) -> subprocess.Popen[str]:
    """What the crontab line runs on a host with the job as a command: ``-E 75`` makes a skip exit 75 (with one
    line on stderr) instead of 0, so that this simulation can tell a skip from a run."""
    job = [sys.executable, "-c", REPORT_SH, str(out)]
    cli = [sys.executable, "-m", "distlock", "--url", url, "run", "--once", "--at-most", str(AT_MOST),
           "--at-least", str(AT_LEAST), "-E", "75", JOB, "--", *job]  # fmt: skip
    return subprocess.Popen(cli, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--hosts", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/locks.db"
        out = Path(tmp) / "runs.log"
        out.touch()
        ctx = mp.get_context("spawn")
        pythons: list[mp.process.BaseProcess] = []
        shells: dict[int, subprocess.Popen[str]] = {}
        for i in range(args.hosts):
            if i % 2:
                shells[i] = shell_host(url, out)
            else:
                proc = ctx.Process(target=python_host, args=(url, i, out))
                proc.start()
                pythons.append(proc)
            time.sleep(0.1)  # the hosts' cron daemons fire a little apart
        for i, cmd in shells.items():
            _, err = cmd.communicate(timeout=60)
            said = {0: "ran the job", 75: "skipped, another host ran it"}.get(cmd.returncode, f"failed: {err}")
            print(f"host {i} (distlock run --once): {said}", flush=True)
        for started in pythons:
            started.join(60)
        runs = out.read_text().count("ran")
        print(f"the job ran {runs} time(s) across {args.hosts} hosts")
        return 0 if runs == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
