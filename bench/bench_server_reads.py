"""Cards computed where the runs are: the team server's reads against its database read directly.

Starts the team server with the launcher (``launchers/tracking_server.py start``: PostgreSQL, the
``recipe-audit`` server app behind basic auth, its default workers) in a temporary folder, fills its
PostgreSQL with the stores of ``bench_query.py`` (built once and cached as SQLite files; the rows
are copied into MLflow's tables with PostgreSQL's COPY, under experiments made through the server):

- ``recipe_audit_bench``: ``--n-runs`` reruns (default 10,000) of many recipes, as bench_query builds;
- ``recipe_audit_bench_card``: ``--card-runs`` reruns (default 100,000) relabelled as one recipe with
  seeds 0..N-1 (one cell of N reruns), as bench_query's ``--card`` builds; its runs, tags, params
  and latest values only (the card reads no metric history; its 2.7 million history rows would
  take minutes to copy).

Then times, in one process, in interleaved rounds (median of ``--repeat``), each side the same
call of recipe_audit's Python API, with ``tracking_uri`` the server (``http://``: the app's SQL
reads, on the server) or the server's database (``postgresql://``: read here):

- the card's read over the 10,000 reruns (``read_runs`` + ``collect_reruns``, what ``bench_query.py``
  and ``bench_query_rest.py`` time) and the whole card (``compute_card`` at one τ: the read, then
  the statistics of its 200 cells): server vs database;
- the same reads through the server's REST API (``read_runs(..., backend="rest")``, what a stock
  MLflow server gives) and ``mlflow.search_runs`` of the experiment (timed once each);
- the gate's recomputation (``release.evidence.recompute``: every attempt, deleted runs, metric
  histories) and ``verify``'s (``release.verify.recompute`` of the 10,000-rerun card): server vs
  database;
- the card at one τ over the 100,000 reruns through the server.

Memory: the peak Python allocation (tracemalloc) of one card through the server and one from the
database, per rerun, in this process; on the server's side, for the 10,000 and the 100,000 reruns,
the peak Python allocation of the app's answer to the card's read (its ``runs`` route and the JSON
it sends, run in this process on the database), and in the server itself the peak resident memory
of the worker that answered one card, and its rise above where it stood just before (each process's
peak reset through ``/proc/PID/clear_refs``, then ``VmHWM``; Linux, as the server's user).

Targets: server/database <= 2 for the card's read, the card, the gate and verify; ``mlflow.search_runs`` / the card's read through the server >= 50; the 100,000-rerun card
through the server < 5 s. Run as
``python bench/bench_server_reads.py [--n-runs N] [--card-runs N] [--repeat R]``; needs PostgreSQL's
server binaries and psycopg2 (as the launcher does); exit status 0 when every target is met.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bench_query import EXPERIMENT, METRIC, _interleaved, _peak_mib, build_card_store, build_store  # noqa: E402
from bench_server_load import ADMIN_PW, free_port, start_server, stop_server  # noqa: E402

CARD_EXPERIMENT = EXPERIMENT + "_card"
TABLES = ("runs", "tags", "params", "metrics", "latest_metrics")


def _tree(root: int) -> list[int]:
    """``root`` and every process below it (Linux: /proc)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    return out


def _vm(pid: int, field: str) -> int:
    """``VmRSS`` or ``VmHWM`` of a process, bytes (0 once it has ended)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _peak_rise(root: int, fn) -> tuple[int, int] | None:
    """The server's processes (``root`` and below) while ``fn()`` ran: each one's peak reset first
    (``/proc/PID/clear_refs``), then its peak (``VmHWM``) less its resident memory just before; the
    largest rise (the worker that answered) and that process's peak, bytes. The rise is a lower
    bound of what ``fn`` needed (a worker reuses memory it freed and kept). None where the peaks
    cannot be reset (another user's processes)."""
    before = {pid: _vm(pid, "VmRSS") for pid in _tree(root)}
    try:
        for pid in before:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return None
    fn()
    rose = {pid: _vm(pid, "VmHWM") - rss for pid, rss in before.items()}
    top = max(rose, key=rose.get)
    return rose[top], _vm(top, "VmHWM")


def _app_peak(db: str, experiment: str) -> int:
    """Peak Python allocation (tracemalloc) of the server app's answer to a card's read of
    ``experiment``: its ``runs`` route (SQL on ``db``) and the JSON it sends, run in this process."""
    import tracemalloc

    from flask import Flask
    from mlflow.server import BACKEND_STORE_URI_ENV_VAR

    from recipe_audit import keys
    from recipe_audit.store import server_app

    body = {"experiment_name": experiment, "tags": [keys.TAG_SEED], "metrics": [METRIC]}
    os.environ[BACKEND_STORE_URI_ENV_VAR] = db
    try:
        with Flask("bench").test_request_context(method="POST", json=body):
            server_app.runs(db)  # warm: the engine and its connection
            tracemalloc.start()
            try:
                json.dumps(server_app.runs(db), separators=(",", ":"))
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    finally:
        del os.environ[BACKEND_STORE_URI_ENV_VAR]


def _copy_experiment(sqlite_db: Path, pg_conn, experiment_id: str, tables: tuple[str, ...] = TABLES) -> int:
    """Copy every run of the SQLite store's one experiment (and its rows of ``tables``: tags,
    params, metrics) into PostgreSQL's MLflow tables under ``experiment_id``, with COPY; returns the
    number of runs."""
    src = sqlite3.connect(sqlite_db)
    (src_exp,) = src.execute("SELECT experiment_id FROM experiments WHERE name != 'Default'").fetchone()
    with pg_conn.cursor() as cur:
        for table in tables:
            cur.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s "
                        "ORDER BY ordinal_position", (table,))
            columns = cur.fetchall()
            names = [c for c, _ in columns]
            booleans = {i for i, (_, t) in enumerate(columns) if t == "boolean"}
            where = ("WHERE experiment_id = ?" if table == "runs" else
                     "WHERE run_uuid IN (SELECT run_uuid FROM runs WHERE experiment_id = ?)")
            rows = src.execute(f"SELECT {', '.join(names)} FROM {table} {where}", (src_exp,))
            buf = io.StringIO()
            out = csv.writer(buf)
            at = names.index("experiment_id") if table == "runs" else -1
            for row in rows:
                row = list(row)
                if at >= 0:
                    row[at] = experiment_id
                for i in booleans:
                    row[i] = None if row[i] is None else ("t" if row[i] else "f")
                out.writerow(["\\N" if v is None else v for v in row])
            buf.seek(0)
            cur.copy_expert(f"COPY {table} ({', '.join(names)}) FROM STDIN WITH (FORMAT csv, NULL '\\N')", buf)
        cur.execute("SELECT count(*) FROM runs WHERE experiment_id = %s", (int(experiment_id),))
        (n,) = cur.fetchone()
    pg_conn.commit()
    src.close()
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path(tempfile.gettempdir()) / "recipe_audit_bench",
                    help="where bench_query's SQLite stores are cached")
    ap.add_argument("--n-runs", type=int, default=10_000)
    ap.add_argument("--card-runs", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-search-runs", action="store_true", help="skip the mlflow.search_runs side")
    args = ap.parse_args(argv)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    args.store.mkdir(parents=True, exist_ok=True)
    small, big = args.store / f"bench_{args.n_runs}.db", args.store / f"bench_{args.card_runs}.db"
    card_db = args.store / f"bench_{args.card_runs}_card.db"
    for db, n in ((small, args.n_runs), (big, args.card_runs)):
        if not db.exists():
            build_store(db, n)
    if not card_db.exists():
        build_card_store(big, card_db)

    base = Path(tempfile.mkdtemp(prefix="recipe_audit_bench_server_"))
    base.chmod(0o711)  # as root, PostgreSQL's own user passes through to DIR/pg
    d = base / "server"
    port, pg_port = free_port(), free_port()
    try:
        uri, start_s = start_server(d, port, pg_port)
    except SystemExit as refused:
        print(str(refused)[-800:])
        shutil.rmtree(base, ignore_errors=True)
        return 2
    try:
        return _bench(args, small, card_db, d, uri, pg_port, start_s)
    finally:
        stop_server(d)
        shutil.rmtree(base, ignore_errors=True)


def _bench(args, small: Path, card_db: Path, d: Path, uri: str, pg_port: int, start_s: float) -> int:
    import mlflow
    import psycopg2
    from mlflow.tracking import MlflowClient

    from recipe_audit.cards.model import CardOptions
    from recipe_audit.release import evidence, verify
    from recipe_audit.release.compute import CardRequest, compute_card
    from recipe_audit.reruns import collect_reruns
    from recipe_audit.store.read import read_runs

    os.environ.update(MLFLOW_TRACKING_USERNAME="admin", MLFLOW_TRACKING_PASSWORD=ADMIN_PW,
                      PGPASSFILE=str(d / "pgpass"))
    db = f"postgresql+psycopg2://mlflow@127.0.0.1:{pg_port}/mlflow"
    print(f"team server {uri} (PostgreSQL on port {pg_port}) up in {start_s:.0f} s")
    client = MlflowClient(uri)
    t0 = time.perf_counter()
    pg = psycopg2.connect(host="127.0.0.1", port=pg_port, user="mlflow", dbname="mlflow")
    n_small = _copy_experiment(small, pg, client.create_experiment(EXPERIMENT))
    # the 100,000-run card reads latest values only: its 2.7 million history rows stay out (minutes of COPY)
    n_card = _copy_experiment(card_db, pg, client.create_experiment(CARD_EXPERIMENT),
                              tuple(t for t in TABLES if t != "metrics"))
    pg.autocommit = True
    with pg.cursor() as cur:
        cur.execute("ANALYZE")
    pg.close()
    print(f"copied {n_small} and {n_card} runs into PostgreSQL in {time.perf_counter() - t0:.0f} s")

    opts = CardOptions.from_config(taus=[0.7])

    def card(where: str, experiment: str = EXPERIMENT):
        return compute_card(CardRequest(experiment=experiment, tracking_uri=where, metric=METRIC), opts)

    policy = evidence.make_policy({"audit": "calibration", "tau": 0.7})
    recipe = "recipe-0000"
    doc = card(db).to_json()
    def read(where: str):  # the card's read: what bench_query.py and bench_query_rest.py time
        return collect_reruns(read_runs(where, EXPERIMENT, [METRIC]), METRIC)

    sides = {
        "read server": lambda: read(uri), "read database": lambda: read(db),
        "card server": lambda: card(uri), "card database": lambda: card(db),
        "gate server": lambda: evidence.recompute(uri, EXPERIMENT, recipe, policy),
        "gate database": lambda: evidence.recompute(db, EXPERIMENT, recipe, policy),
        "verify server": lambda: verify.recompute(doc, uri), "verify database": lambda: verify.recompute(doc, db),
    }
    timed = _interleaved(sides, args.repeat)  # one warm-up round: every server worker and pool opened
    t = {k: v[0] for k, v in timed.items()}
    same = [timed[f"{k} server"][1] for k in ("card", "gate", "verify")], \
           [timed[f"{k} database"][1] for k in ("card", "gate", "verify")]
    assert same[0][0].to_json()["cells"] == same[1][0].to_json()["cells"], "the cards differ"
    assert same[0][1].to_dict() == same[1][1].to_dict(), "the gate's evidence differs"
    assert same[0][2] == same[1][2], "verify's recomputed cells differ"
    mib_server = _peak_mib(lambda: card(uri))
    mib_db = _peak_mib(lambda: card(db))
    server_pid = json.loads((d / "server.json").read_text())["pid"]
    grown = {n_small: _peak_rise(server_pid, lambda: card(uri))}
    card(uri, CARD_EXPERIMENT)  # warm
    big = _interleaved({"big": lambda: card(uri, CARD_EXPERIMENT)}, args.repeat, warm_up=False)["big"]
    cell = big[1].to_json()["cells"][0]
    grown[n_card] = _peak_rise(server_pid, lambda: card(uri, CARD_EXPERIMENT))  # before search_runs' pages
    app_bytes = {n_small: _app_peak(db, EXPERIMENT), n_card: _app_peak(db, CARD_EXPERIMENT)}

    t_rest = time.perf_counter()
    rest_cells = collect_reruns(read_runs(uri, EXPERIMENT, [METRIC], backend="rest"), METRIC)
    t_rest = time.perf_counter() - t_rest
    t_search, search_failed = None, None
    if not args.no_search_runs:
        mlflow.set_tracking_uri(uri)
        t_search = time.perf_counter()
        try:  # its 10,000-run pages can keep a server worker past uvicorn's 5 s health check
            frame = mlflow.search_runs(experiment_names=[EXPERIMENT])
            assert len(frame) == n_small
        except Exception as exc:  # noqa: BLE001 - said below; the other numbers stand
            search_failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        t_search = time.perf_counter() - t_search

    checks = []
    print(f"\n{n_small} runs of experiment {EXPERIMENT} ({len(rest_cells)} cells); median of {args.repeat} "
          "interleaved rounds, through the team server (its app's SQL reads) vs its PostgreSQL read here:")
    what = {"read": "the card's read (read_runs + collect_reruns)", "card": "the card (compute_card, one tau)",
            "gate": "the gate's recomputation", "verify": "verify's recomputation"}
    for k in ("read", "card", "gate", "verify"):
        r = t[f"{k} server"] / t[f"{k} database"]
        checks.append(r <= 2)
        print(f"  {what[k]:<46}  server {t[f'{k} server']:7.3f} s  database {t[f'{k} database']:7.3f} s  "
              f"server/database = {r:.2f}  target <= 2  {'PASS' if r <= 2 else 'FAIL'}")
    print(f"  the card's read through the server's REST API (read_runs, backend='rest': what a stock server "
          f"gives): {t_rest:.2f} s = {t_rest / t['read server']:.0f}x the read through the app")
    if search_failed:
        print(f"  mlflow.search_runs of the experiment failed after {t_search:.1f} s ({search_failed})")
    elif t_search is not None:
        r, r_card = t_search / t["read server"], t_search / t["card server"]
        checks.append(r >= 50)
        print(f"  mlflow.search_runs of the experiment: {t_search:.2f} s; search_runs / the card's read through the "
              f"server = {r:.0f}  target >= 50  {'PASS' if r >= 50 else 'FAIL'}; search_runs / the whole card "
              f"through the server = {r_card:.0f}")
    checks.append(big[0] < 5)
    print(f"card at one tau over {cell['n_reruns']} reruns (experiment {CARD_EXPERIMENT}) through the server: "
          f"{big[0]:.2f} s  target < 5 s  {'PASS' if big[0] < 5 else 'FAIL'}")
    print(f"memory: one card over {n_small} runs allocates at most {mib_server:.1f} MiB through the server "
          f"({mib_server * 2**20 / n_small:.0f} bytes a run), {mib_db:.1f} MiB from the database "
          f"({mib_db * 2**20 / n_small:.0f} bytes a run)")
    for n, g in grown.items():
        print(f"server memory, one card over {n} runs: the app's answer allocates at most "
              f"{app_bytes[n] / 2**20:.1f} MiB of Python objects ({app_bytes[n] / n:.0f} bytes a run; tracemalloc, "
              "its route run in this process)" + ("" if g is None else
              f"; in the server, the worker that answered peaked at {g[1] / 2**20:.0f} MiB resident, "
              f"{g[0] / 2**20:.1f} MiB above where it stood just before"))
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
