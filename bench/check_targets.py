"""Check a benchmark summary against the project's speed targets; exit 1 on a miss."""

import json
import sys

TARGETS = {  # key: minimum
    "efficiency": 0.85,
    "seq_vs_generate": 1.0,
}


def main(path: str) -> int:
    summary = json.load(open(path))
    failed = False
    for key, minimum in TARGETS.items():
        value = summary.get(key)
        ok = value is not None and value >= minimum
        failed |= not ok
        print(f"{'ok  ' if ok else 'MISS'} {key} = {value} (target >= {minimum})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
