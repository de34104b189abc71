"""Benchmark: a seed job's configuration, composed by Hydra vs derived by the default launcher.

    python bench/bench_compose.py            # 59 seeds of the default recipe, 3 alternating rounds

Side A: Hydra's ``config_loader.load_sweep_config`` for every job ``seed=0..N-1`` (what Hydra's
basic sweeper does once per job to check a batch, and its basic and joblib launchers once more
to run it). Side B: :meth:`recipe_audit.app.launchers.SeedLauncherBase.job_config` for the same jobs
(Hydra composes ``seed=0``; the other seeds are derived from it). Both in this process, after one
warm-up composition; the sides alternate and the best round of each is compared. Prints the
milliseconds a job of each side and the ratio; every derived configuration is checked equal to
Hydra's (outside the timing).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=59)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from recipe_audit.app import config_dir
    from recipe_audit.app.launchers import SeedLauncherBase
    from recipe_audit.app.schema import register_configs

    register_configs()
    jobs = [[f"seed={s}"] for s in range(a.seeds)]
    with tempfile.TemporaryDirectory() as tmp, initialize_config_dir(str(config_dir()), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        master = loader.load_configuration("config", overrides=[f"hydra.sweep.dir={tmp}"], run_mode=RunMode.MULTIRUN)
        loader.load_sweep_config(master, jobs[0])  # warm-up (imports, caches)
        best = {"hydra": float("inf"), "derived": float("inf")}
        for _ in range(a.rounds):
            t0 = time.perf_counter()
            composed = [loader.load_sweep_config(master, job) for job in jobs]
            best["hydra"] = min(best["hydra"], time.perf_counter() - t0)
            launcher = SeedLauncherBase()  # a fresh launcher: it composes seed=0 itself
            launcher.setup(hydra_context=type("Ctx", (), {"config_loader": loader})(), task_function=None,
                           config=master)
            t0 = time.perf_counter()
            derived = [launcher.job_config(job) for job in jobs]
            best["derived"] = min(best["derived"], time.perf_counter() - t0)
        same = all(OmegaConf.to_yaml(x) == OmegaConf.to_yaml(y) for x, y in zip(composed, derived, strict=True))
    per = {k: 1000 * v / a.seeds for k, v in best.items()}
    print(f"{a.seeds} seed jobs of the default recipe, best of {a.rounds} rounds")
    print(f"A Hydra load_sweep_config:        {per['hydra']:6.1f} ms a job")
    print(f"B SeedLauncherBase.job_config:    {per['derived']:6.1f} ms a job (one composition, {a.seeds - 1} derived)")
    print(f"ratio A/B = {per['hydra'] / per['derived']:.1f}x; derived configurations equal to Hydra's: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
