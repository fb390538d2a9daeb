"""SIGKILL in the middle of transactions: after every restart, each transaction is wholly
committed or wholly aborted for read_committed readers, every commit a producer saw
succeed is there, and a producer with the same transactional id goes on after its
InitProducerId."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter

from support.client import unique_topic
from support.txn import CRASH_PRODUCER as PRODUCER
from support.txn import confluent_values, create_topic

PER_TXN = 12
ROUNDS = 5


class _Run:
    """One producer process; collects the transactions it reported committed."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str, tag: str) -> None:
        self.tag = tag
        self.committed: list[int] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, str(PRODUCER), bootstrap, topic, txn_id, tag, str(PER_TXN)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("ready"):
                self.ready.set()
            elif line.startswith("committed "):
                self.committed.append(int(line.split()[1]))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)


def test_sigkill_during_transactions(gateway) -> None:
    topic = unique_topic("txncrash")
    create_topic(gateway.bootstrap, topic)
    txn_id = unique_topic("crash-id")
    rng = random.Random(7)
    runs: list[_Run] = []
    for round_no in range(ROUNDS):
        run = _Run(gateway.bootstrap, topic, txn_id, f"r{round_no}")
        runs.append(run)
        # The new producer's InitProducerId must succeed after the restart (it aborts
        # whatever the killed one left open).
        assert run.ready.wait(60), "producer did not initialise after a restart"
        deadline = time.monotonic() + 30
        while len(run.committed) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(run.committed) >= 2, "the producer could not commit after a restart"
        time.sleep(rng.uniform(0.0, 0.4))  # somewhere in the middle of a transaction
        gateway.kill()
        run.kill()
        gateway.start()
    final = _Run(gateway.bootstrap, topic, txn_id, "final")
    assert final.ready.wait(60)
    deadline = time.monotonic() + 30
    while len(final.committed) < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    final.kill()
    runs.append(final)

    acked = sum(len(r.committed) for r in runs) * PER_TXN
    values = confluent_values(gateway.bootstrap, topic, "read_committed", acked, timeout=60)
    assert len(values) == len(set(values)), "a record is there twice"
    per_txn = Counter(v.decode().rsplit("-", 1)[0] for v in values)
    partial = {txn: n for txn, n in per_txn.items() if n != PER_TXN}
    assert not partial, f"transactions seen partly by read_committed: {partial}"
    for run in runs:
        for txn in run.committed:
            assert per_txn[f"{run.tag}-{txn}"] == PER_TXN, f"acked {run.tag}-{txn} is missing"
    everything = confluent_values(gateway.bootstrap, topic, "read_uncommitted", len(values))
    assert len(everything) >= len(values)
    print(
        f"{len(per_txn)} transactions whole, {acked // PER_TXN} acked, "
        f"{len(everything) - len(values)} records of aborted ones hidden"
    )
