"""Two processes opening one new SQLite ledger at once migrate it once.

A worker and a producer started together on a laptop both find the file new; each used
to run the migrations, and the second died on "table ... already exists". Here two real
processes import planq, wait at a gate, and call `migrate_sqlite` on the same new file
at the same moment (the test opens the gate for both with one write each): both must
exit cleanly, exactly one of them migrated, and the file is at head.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from planq.store.migrate import migrate_sqlite

RACER = """
import sys
from planq.store.migrate import migrate_sqlite
print("ready", flush=True)
sys.stdin.readline()  # the gate: both racers go at once
print(migrate_sqlite(sys.argv[1]), flush=True)
"""


def race(url: str) -> list[str]:
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for racer in racers:  # each has imported planq and waits at the gate
            assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        answers = []
        for racer in racers:
            out, err = racer.communicate(timeout=120)
            assert racer.returncode == 0, err
            answers.append(out.strip())
        return answers
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.wait()


def test_two_processes_migrate_a_new_sqlite_ledger_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    assert sorted(race(url)) == ["False", "True"]  # one migrated; the other found it current
    assert migrate_sqlite(url) is False  # at head: nothing left to do
