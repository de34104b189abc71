"""Regenerate the numbers and tables of the acceptance page ("What the audit found") from a sweep.

    python bench/acceptance_tables.py --run                 # runs the default acceptance sweep, then prints
    python bench/acceptance_tables.py --sweep-dir DIR       # reads DIR/acceptance_card/ of a finished sweep

``--run`` runs ``python -m recipe_audit -m experiment=acceptance`` (plus ``--overrides``) in a fresh
temporary store and sweep directory, as the docs' first command does, and times it. The tables
are printed as the docs show them (Markdown), from the sweep's ``acceptance_card.json`` and
``base.json`` only: every number of that section of the docs comes from this script's output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _n(x: float | None, digits: int = 3, sign: bool = True) -> str:
    """A number as the docs write it: fixed digits, a true minus sign, ``+`` on request."""
    if x is None:
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-", "\u2212")


def _ci(pair) -> str:
    return f"[{_n(pair[0])}, {_n(pair[1])}]"


def _rho(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 10 else f"{x:.1f}"


def cell_row(cell: dict) -> str:
    d = cell["diagnostics"]
    a, b, c, g = d["a"], d["b"], d["c"], d["d"]
    verdict = cell["verdict"]
    shown = f"**{verdict}**" if verdict == "full-card pass" else verdict
    col_a = f"{_n(a.get('delta_gap'))} {_ci(a['ci_delta_gap'])}" if a.get("ci_delta_gap") else "n/a"
    col_dep = f"{_n(a.get('delta_deploy'))} {_ci(a['ci_delta_deploy'])}" if a.get("ci_delta_deploy") else "n/a"
    col_b = (f"{_n(b.get('delta_gap'))}; {_n(b.get('bound_paired'))} / {_n(b.get('bound_indep'))}"
             if b.get("delta_gap") is not None else "n/a")
    col_c = (f"{_rho(c.get('rho_AT'))} ({_n(c.get('alpha_T'))}, {_n(c.get('alpha_A'))}): "
             f"{c.get('signed_class')} vs {c.get('claimed_class')}" if c.get("rho_AT") is not None else "n/a")
    col_d = (f"{_n(g.get('gamma_P'), sign=False)}, {_n(g.get('gamma_X'), sign=False)}"
             if g.get("gamma_P") is not None else "n/a")
    statuses = " ".join(d[k]["status"] for k in "abcd")
    return f"| {cell['label']} | {shown} | {col_a} | {col_dep} | {col_b} | {col_c} | {col_d} | {statuses} |"


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def environment(threads: str) -> str:
    """Where the sweep ran: CPU model and count, torch and its CPU kernels, the reruns' threads."""
    import torch

    kernels = ", ".join(f"{k}={os.environ[k]}" for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR") if k in os.environ)
    return (f"Environment: {cpu_model()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
            f"(CPU kernels {torch.backends.cpu.get_cpu_capability()}{'; ' + kernels if kernels else ''}), "
            f"threads={threads} per job, Python {platform.python_version()}.")


def tables(card: dict, base: dict, wall_s: float | None = None, env: str | None = None) -> str:
    out = []
    if env:
        out.append(env)
    if wall_s is not None:
        out.append(f"Wall time of the sweep: {wall_s / 60:.0f} min {wall_s % 60:.0f} s "
                   f"(base model {base.get('train_seconds', float('nan')):.0f} s).")
    acc = base.get("accuracy", {})
    out.append("Base model accuracy: " + ", ".join(f"{k} {v:.0%}" for k, v in sorted(acc.items())) + ".")
    seen, gaps, cross = set(), [], []
    for cell in sorted(card["cells"], key=lambda c: c["baseline"]):
        if cell["baseline"] in seen:
            continue
        seen.add(cell["baseline"])
        pg = cell["primary_baseline_gap"]
        gaps.append(f"{cell['baseline']} {_n(pg['gap'], sign=False)} (SE {_n(pg['se'], sign=False)}, "
                    f"eval {pg['rate_eval']:.2f}, deploy {pg['rate_deploy']:.2f})")
        xb = cell["diagnostics"]["d"].get("cross_baseline") or {}
        if xb:
            cross.append(f"{cell['baseline']} {_n(xb.get('gap'), sign=False)}")
    out.append("Baseline (`none`) held-out gap: " + "; ".join(gaps) + ".")
    if cross:
        out.append("Baseline cross-task (`syco`) gap: " + "; ".join(cross) + ".")
    out.append("")
    out.append("| cell | verdict | (a) Δgap [95 % cluster CI] | Δdeploy [95 %] | (b) fresh Δgap; +2·SE_paired / "
               "+2·SE_indep | (c) ρ_AT (α_T, α_A): signed vs claimed | (d) Γ_P, Γ_X | a b c d |")
    out.append("|---|---|---|---|---|---|---|---|")
    order = {"l2sp": 0, "attack_proj": 1, "consistency": 2}
    for cell in sorted(card["cells"], key=lambda c: (order.get(c["label"].rsplit("_s", 1)[0], 9), c["label"])):
        out.append(cell_row(cell))
    out.append("")
    pf = card.get("progressive_filter") or []
    out.append("Progressive filter: " + ", ".join(f"{f['filter']} {f['n_pass']} of {f['n_with_result']}"
                                                  for f in pf) + ".")
    ts = card.get("threshold_sensitivity") or []
    changed = [t for t in ts if t.get("verdict_changes")]
    moved = [t for t in ts if t.get("status") != t.get("status_variant")]
    out.append(f"Threshold sensitivity: {len(changed)} verdict change(s); {len(moved)} gate status change(s)"
               + (": " + ", ".join(f"{t['cell']} ({t['gate']}, {t['variant']}: {t['status']} → "
                                   f"{t['status_variant']})" for t in moved) if moved else "") + ".")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", action="store_true", help="run the default acceptance sweep first")
    src.add_argument("--sweep-dir", type=Path, help="a finished acceptance sweep's directory")
    ap.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for --run")
    a = ap.parse_args(argv)
    wall = None
    if a.run:
        tmp = Path(tempfile.mkdtemp(prefix="acceptance_tables_"))
        sweep_dir = tmp / "sweep"
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / 'mlflow.db'}"}
        cmd = [sys.executable, "-m", "recipe_audit", "-m", "experiment=acceptance", f"hydra.sweep.dir={sweep_dir}",
               f"experiment.cache_dir={tmp / 'cache'}", *a.overrides]
        print(f"acceptance_tables: sweep in {tmp}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        (tmp / "sweep.log").write_text(proc.stdout + proc.stderr, encoding="utf-8")
        if proc.returncode != 0:
            raise SystemExit(f"acceptance_tables: the sweep failed:\n{proc.stderr[-3000:]}")
    else:
        sweep_dir = a.sweep_dir
    folder = sweep_dir / "acceptance_card"
    if not (folder / "acceptance_card.json").is_file():
        raise SystemExit(f"acceptance_tables: no acceptance card in {folder}")
    card = json.loads((folder / "acceptance_card.json").read_text())
    base = json.loads((folder / "base.json").read_text()) if (folder / "base.json").is_file() else {}
    threads = next((o.split("=", 1)[1] for o in a.overrides if o.startswith("threads=")), "1")
    print(tables(card, base, wall, environment(threads) if a.run else None))


if __name__ == "__main__":
    main()
