"""Record the legacy message-set vectors with kafka-python's own legacy encoder.

    .venv/bin/python tests/golden/record_legacy_vectors.py

rewrites `legacy_message_sets.json` beside this file from `kafka.record.legacy_records.
LegacyRecordBatchBuilder` (kafka-python, the version pinned in pyproject.toml). The tests never
run this: they read the committed file, so the vectors stay fixed when the client changes.
"""

from __future__ import annotations

import json
from pathlib import Path

import kafka
from kafka.record.legacy_records import LegacyRecordBatchBuilder

OUT = Path(__file__).with_name("legacy_message_sets.json")
CODECS = {"none": 0, "gzip": 1}

# (name, messages as (key, value)): shapes that exercise every length encoding.
SHAPES: list[tuple[str, list[tuple[bytes | None, bytes | None]]]] = [
    ("one", [(b"key", b"value")]),
    ("null-key", [(None, b"v1"), (None, b"v2"), (None, b"v3")]),
    ("null-value", [(b"tombstone", None)]),
    ("empty", [(b"", b"")]),
    ("mixed", [(b"k%d" % i if i % 2 else None, bytes(range(i % 256)) * (i + 1))
               for i in range(12)]),
    ("large", [(b"big", b"x" * 5000), (b"utf8", "grüße-✓".encode())]),
]
BASE_TIMESTAMP = 1_700_000_000_000


def record() -> dict[str, object]:
    cases = []
    for magic in (0, 1):
        for codec_name, codec in CODECS.items():
            for shape, messages in SHAPES:
                builder = LegacyRecordBatchBuilder(magic, codec, batch_size=1 << 20)
                entries = []
                for offset, (key, value) in enumerate(messages):
                    timestamp = BASE_TIMESTAMP + offset * 7 if magic else None
                    builder.append(offset, timestamp, key, value)
                    entries.append({
                        "offset": offset,
                        "timestamp": timestamp if magic else -1,
                        "key": None if key is None else key.hex(),
                        "value": None if value is None else value.hex(),
                    })
                cases.append({
                    "name": f"magic{magic}-{codec_name}-{shape}",
                    "magic": magic,
                    "codec": codec_name,
                    "messages": entries,
                    "hex": bytes(builder.build()).hex(),
                })
    return {"encoder": f"kafka-python {kafka.__version__} LegacyRecordBatchBuilder",
            "cases": cases}


if __name__ == "__main__":
    OUT.write_text(json.dumps(record(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")
