"""Who limits produce into many partitions: the server or the client?

Starts a fresh gateway and a Kafka broker (`harness`), then for 1, 2 and 4 producers
(librdkafka instances in threads of this process, `compat.bench.kvs.small_producers`,
sharing `--records` 1 KiB records, acks=all, linger 5 ms) produces into a topic of 10 and
one of `--wide` partitions, the same client setup on both servers. Prints one JSON line per
case: MiB/s and the CPU cores the server and the client process used meanwhile. A server
below one core while the client's CPU grows with the producers is a client limit.

    python -m tools.probes.wide_producers [--wide 5000] [--records 100000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from compat.bench import kvs
from compat.bench.workloads import Workload
from compat.benchlib.display import Display
from harness.gateway import Gateway
from harness.kafka import KafkaBroker
from harness.process import ManagedProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wide", type=int, default=5000)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="probe-wide-"))
    servers: list[tuple[str, ManagedProcess]] = []
    try:
        gateway = Gateway(work / "sg", work / "sg.log", kvs.GATEWAY_ARGS, default_partitions=8)
        gateway.start_fresh()
        servers.append(("streamgate", gateway))
        kafka = KafkaBroker(work / "kafka", {})
        kafka.start()
        servers.append(("kafka", kafka))
        for clients in (1, 2, 4):
            for partitions in (10, args.wide):
                for name, server in servers:
                    w = Workload(
                        name="wide",
                        driver="small-producers",
                        clients=clients,
                        partitions=partitions,
                        records=args.records,
                        linger_ms=5,
                    )
                    cpu = kvs.cpu_meter(server)
                    target = kvs.Target(name, server, server.bootstrap)  # type: ignore[attr-defined]
                    result = kvs.small_producers(target, w, {}, Display("none"))
                    cores = cpu.read().cores()
                    mib = result["records"] * w.record_size / 2**20 / result["seconds"]
                    line = {"target": name, "producers": clients, "partitions": partitions}
                    line |= {"mib_per_s": round(mib, 1), "ok": result["ok"]}
                    line |= {k: cores[k] for k in ("server_cores", "client_cores")}
                    print(json.dumps(line), flush=True)
    finally:
        for _name, server in servers:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
