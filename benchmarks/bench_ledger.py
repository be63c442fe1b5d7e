"""How long reading the ledger takes (every tool call of a fresh server, the report and the hooks read it).

Writes a ledger of about 2,200 records by repeating a real session's records (tests/data/ledger_v0,
every record type) under new experiment ids, in both formats: as the code before typed records wrote
it (version 0, migrated on read) and as today's code writes it (version 1). Prints the best of 15
`Ledger.view()` runs of each.
Run: python benchmarks/bench_ledger.py
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from autoresearch_mcp.store.ledger import Ledger
from autoresearch_mcp.store.records import parse

V0 = Path(__file__).resolve().parents[1] / "tests" / "data" / "ledger_v0" / "ledger.jsonl"
COPIES = 50
REPEATS = 15


def write(path: Path, current: bool) -> int:
    lines = [json.loads(line) for line in V0.read_text().splitlines() if line.strip()]
    out = []
    for copy in range(COPIES):
        for raw in lines:
            rec = dict(raw)
            if "experiment_id" in rec:
                rec["experiment_id"] = f"{rec['experiment_id']}-{copy}"
            out.append(parse(rec).line() if current else rec)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in out))
    return len(out)


def best_of(ledger: Ledger) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        view = ledger.view()
        times.append(time.perf_counter() - t0)
    assert not view.warnings, view.warnings
    return min(times)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, current in (("version 0 (migrated on read)", False), ("version 1 (as written today)", True)):
            path = Path(tmp) / f"{int(current)}.jsonl"
            count = write(path, current)
            seconds = best_of(Ledger(path))
            print(f"{name}: {count} records, {path.stat().st_size / 2**20:.1f} MiB, "
                  f"view() {seconds * 1000:.0f} ms (best of {REPEATS}), {seconds / count * 1e6:.1f} µs a record")


if __name__ == "__main__":
    main()
