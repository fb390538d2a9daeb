"""A transactional producer run as its own process by tests/system/test_txn_crash.py:
`python txn_crash_producer.py BOOTSTRAP TOPIC TXN_ID TAG RECORDS_PER_TXN`.

It commits transactions of RECORDS_PER_TXN records (values `TAG-<txn>-<i>`, spread over the
partitions) until it is killed, printing `committed <txn>` once each commit returned."""

from __future__ import annotations

import sys
import time

from confluent_kafka import Producer


def main() -> None:
    bootstrap, topic, txn_id, tag, per_txn = sys.argv[1:6]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 2,
            "transaction.timeout.ms": 10000,
        }
    )
    producer.init_transactions(60)
    print("ready", flush=True)
    txn = 0
    while True:
        producer.begin_transaction()
        for i in range(int(per_txn)):
            producer.produce(topic, key=b"%d" % i, value=f"{tag}-{txn}-{i}".encode())
        producer.flush(60)
        time.sleep(0.02)  # written, not yet committed: where a kill hurts most
        producer.commit_transaction(60)
        print(f"committed {txn}", flush=True)
        txn += 1


if __name__ == "__main__":
    main()
