"""Reading reruns through a REST tracking server: recipe_audit vs a plain ``mlflow.search_runs``.

On a REST server there is no SQL to read directly, so ``read_runs`` pages through the server's
search API like ``search_runs`` does; the target is "no slower than search_runs". Builds (or
reuses) the store of ``bench_query.py``, serves it with a real ``mlflow server`` on loopback,
and times, interleaved (median of ``--repeat`` rounds):

(a) ``mlflow.search_runs(experiment_names=[...])`` over HTTP;
(c) ``read_runs`` + ``collect_reruns`` for the card's metric over HTTP.

Run as ``python bench/bench_query_rest.py [--n-runs N]``; exit status 0 when (c) <= 1.1 x (a)
(10 % for noise on a shared machine).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_query import EXPERIMENT, METRIC, _interleaved, build_store  # noqa: E402

from recipe_audit.query import collect_reruns, read_runs  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()) / "recipe_audit_bench")
    ap.add_argument("--n-runs", type=int, default=2000, help="reruns in the store (default 2000)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    args.store.mkdir(parents=True, exist_ok=True)
    db = args.store / f"bench_{args.n_runs}.db"
    if not db.exists():
        build_store(db, args.n_runs)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
         "--default-artifact-root", str(args.store / "artifacts"), "--host", "127.0.0.1",
         "--port", str(port), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/health", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    print("the mlflow server did not start")
                    return 2
                time.sleep(0.5)
        import mlflow

        mlflow.set_tracking_uri(url)
        os.environ["MLFLOW_TRACKING_URI"] = url

        def plain():
            return mlflow.search_runs(experiment_names=[EXPERIMENT])

        def ours():
            return collect_reruns(read_runs(url, EXPERIMENT, [METRIC]), METRIC)

        timed = _interleaved({"a": plain, "c": ours}, args.repeat)
        (t_a, frame), (t_c, cells) = timed["a"], timed["c"]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    ratio = t_c / t_a
    ok = ratio <= 1.1
    print(f"REST server, {args.n_runs} reruns, median of {args.repeat} interleaved rounds:")
    print(f"(a) mlflow.search_runs          {t_a:8.2f} s  ({len(frame)} runs)")
    print(f"(c) read_runs + collect_reruns  {t_c:8.2f} s  ({len(cells)} cells)")
    print(f"(c)/(a) = {ratio:.2f}  target <= 1 (1.1 allowed for noise)  {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
