"""A short soak (the long one: tools/load_test.py --minutes 10): 32 streaming clients, then 100
clients that vanish mid-stream; nothing fails or stalls, every slot comes free, descriptors and
threads return to their level."""
import os
import sys

from conftest import BINARY, SANITIZED, TIME_SCALE

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import load_test  # noqa: E402


def test_short_soak_leaves_nothing_behind(checkpoint):
    report = load_test.run(str(BINARY), str(checkpoint), minutes=0.25, clients=32, ctx=1024,
                           max_stall=5.0 * TIME_SCALE, rss_slack=float("inf") if SANITIZED else 64.0,
                           sample_every=3.0, log=lambda *_: None)
    assert report["requests"] >= 32, report
    assert report["failures"] == [], {k: v for k, v in report.items() if k != "curve"}
