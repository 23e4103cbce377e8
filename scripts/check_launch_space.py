"""For every launch fixture: how many settings the knob space calls valid (every one-knob neighbour of the
launch's own setting plus a sample), how many of them do not read back as themselves, and how many the
framework's own config code refuses (megatron-core; torchtitan 0.2 in-process; torchtitan 0.3 from its target
directory). Prints one table.

``--equivalence`` prints instead, per fixture, the round trips that compute the user's job under the framework's
own config code (the launch's own setting, every valid one-knob neighbour and a sample, each emitted and compared
field by field) and the false-invalid count (settings the space refuses that the framework accepts, among
``--refused`` draws the space refuses): :mod:`infrarsi.adapters.fidelity`.

``--apply`` prints, per Megatron launch (the fixtures, contracts/megatron-jobs and the CPU contracts' scripts),
how many valid settings (every one-knob neighbour of the launch's own setting plus a sample; valid: the adapter
emits a launch for it) ``infrarsi apply``'s in-place edit (:func:`infrarsi.apply.launch_edit.edit_launch_file`)
writes so that the edited script reads back as the tuned launch, how many it refuses (then apply writes
launch.sh) and how many raise anything else (a crash of apply).

    python scripts/check_launch_space.py [--sample 30]
    python scripts/check_launch_space.py --equivalence [--sample 10] [--refused 20]
    python scripts/check_launch_space.py --apply [--sample 30]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from infrarsi.adapters import megatron as mg
from infrarsi.adapters import torchtitan as tt
from infrarsi.adapters.megatron import check as mcheck
from infrarsi.adapters.megatron.check import check_megatron
from infrarsi.adapters.torchtitan import check as tcheck
from infrarsi.adapters.torchtitan.check import check_torchtitan, check_torchtitan03_many, torchtitan03_args

FIX = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
POSITIONAL = {"gpt3_175b.sh": ["/ckpt", "/tb", "/d/vocab.json", "/d/merges.txt", "/d/pile_text_document"]}
WORLD = {"deepseek_v3_16b_hsdp_v03.cmd": 16, "llama3_8b.toml": 8, "llama3_70b.toml": 64, "llama3_405b.toml": 128, "deepseek_v3_16b.toml": 8,
         "llama3_8b_hsdp.toml": 8, "llama3_405b_launch.sh": 128, "llama3_8b_v03.sh": 8, "llama3_70b_v03.cmd": 32,
         "deepseek_v3_16b_v03.cmd": 16, "llama3_8b_v03_loss_compile.cmd": 8}


def equivalence(n: int, n_refused: int) -> int:
    from infrarsi.adapters import fidelity

    rows = []
    launches = [("megatron", path, None) for path in sorted((FIX / "megatron").glob("*.sh"))]
    launches += [("megatron", FIX / "megatron" / "llama3_70b_cp.cmd", None)]
    launches += [("torchtitan", FIX / "torchtitan" / name, world) for name, world in WORLD.items()]
    for kind, path, world in launches:
        if kind == "megatron":
            p = (mg.parse_megatron_file(path, args=POSITIONAL.get(path.name)) if path.suffix == ".sh"
                 else mg.parse_megatron(path.read_text(), path=str(path)))
            p.device = "H100-80GB"
            space = mg.knob_space_for(p)
        else:
            p = tt.parse_torchtitan_file(path, world_size=world)
            p.device = "H100-80GB"
            space = tt.knob_space_for(p)
        c = fidelity.count(kind, p, space, world=world, sample=n, refused_sample=n_refused)
        rows.append((f"{kind}/{path.name}", c))
        for ex in c.examples[:3]:
            print(f"  {path.name}: {ex}")
    w = max(len(r[0]) for r in rows)
    print(f"{'launch':<{w}}  round trips equal / total  false-invalid / sampled refused")
    for name, c in rows:
        print(f"{name:<{w}}  {c.equal:>11} / {c.round_trips:<12}  {c.false_invalid:>13} / {c.sampled_refused}")
    eq, tot = sum(c.equal for _, c in rows), sum(c.round_trips for _, c in rows)
    fi, sr = sum(c.false_invalid for _, c in rows), sum(c.sampled_refused for _, c in rows)
    print(f"{'total':<{w}}  {eq:>11} / {tot:<12}  {fi:>13} / {sr}")
    return 0


def _apply_launches() -> list[tuple[Path, list[str] | None, str, int]]:
    """(script, positional args, device kind, devices) of every shipped and example Megatron launch script."""
    root = FIX.parents[1]
    out = [(path, POSITIONAL.get(path.name), "H100-80GB", 0) for path in sorted((FIX / "megatron").glob("*.sh"))]
    out += [(root / "contracts/megatron-jobs/llama3_70b_sbatch.sh", None, "H100-80GB", 64),
            (root / "contracts/megatron-jobs/deepseek_v2_lite.sh", ["8", "8"], "H100-80GB", 64),
            (root / "contracts/megatron-cpu/train.sh", None, "cpu", 2),
            (root / "contracts/megatron-cpu/train_moe.sh", None, "cpu", 2)]
    return out


def apply_edits(n: int) -> int:
    from infrarsi.adapters.base import FrameworkRejected
    from infrarsi.apply.launch_edit import EditError, edit_launch_file
    from infrarsi.contract.model import Contract

    rows, examples = [], []
    for path, args, kind, devices in _apply_launches():
        p = mg.parse_megatron_file(path, args=args)
        devices = devices or p.world_size or 8
        c = Contract.model_validate({
            "name": path.stem, "workload": {"adapter": "megatron", "launch": str(path), "script_args": args or []},
            "hardware": {"kind": kind, "devices": devices, "memory_capacity_gib": 80 if kind != "cpu" else 2}})
        ad = mg.MegatronAdapter()
        space = ad.knob_space(c)
        own = space.complete({k: v for k, v in ad.parsed(c).setting.items() if k in space})
        sets = space.neighbors(own) + space.sample(random.Random(0), n=n)
        valid = edited = refused = crashed = 0
        for s in sets:
            try:
                spec = ad.launch(c, s)
            except (FrameworkRejected, ValueError):
                continue  # not a valid setting: apply never gets it
            valid += 1
            try:
                _, edit = edit_launch_file(ad, c, spec)
                edited += 1
            except EditError as e:
                refused += 1
                examples.append(f"{path.name}: refused: {str(e)[:160]}")
            except Exception as e:  # noqa: BLE001 - counted: apply crashed
                crashed += 1
                examples.append(f"{path.name}: {type(e).__name__}: {str(e)[:160]}")
        rows.append((str(path.relative_to(root)) if (root := FIX.parents[1]) in path.parents else path.name,
                     valid, edited, refused, crashed))
    for ex in dict.fromkeys(examples):
        print(" ", ex)
    w = max(len(r[0]) for r in rows)
    print(f"{'launch':<{w}}  valid settings  edited in place  refused  crashed")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>14}  {r[2]:>15}  {r[3]:>7}  {r[4]:>7}")
    print(f"{'total':<{w}}  {sum(r[1] for r in rows):>14}  {sum(r[2] for r in rows):>15}  "
          f"{sum(r[3] for r in rows):>7}  {sum(r[4] for r in rows):>7}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=None)
    ap.add_argument("--refused", type=int, default=20)
    ap.add_argument("--equivalence", action="store_true")
    ap.add_argument("--apply", action="store_true")
    a = ap.parse_args()
    if a.apply:
        return apply_edits(30 if a.sample is None else a.sample)
    if a.equivalence:
        return equivalence(10 if a.sample is None else a.sample, a.refused)
    n = 30 if a.sample is None else a.sample
    rows = []
    for path in sorted((FIX / "megatron").glob("*.sh")):
        p = mg.parse_megatron_file(path, args=POSITIONAL.get(path.name))
        p.device = "H100-80GB"
        space = mg.knob_space_for(p)
        sets = space.neighbors(space.complete(p.setting)) + space.sample(random.Random(0), n=n)
        bad_rt = refused = 0
        for s in sets:
            spec = mg.emit_megatron(p, s)
            back = mg.parse_megatron_argv(spec.argv, env=spec.env)
            bad_rt += any(back.setting[k] != s[k] for k in s if k != "data_parallel") or back.fixed != p.fixed
            refused += bool(check_megatron(p, s))
        rows.append((f"megatron/{path.name}", len(sets), bad_rt, refused,
                     "megatron-core" if mcheck.available() else "(not installed)"))
    for name, world in WORLD.items():
        p = tt.parse_torchtitan_file(FIX / "torchtitan" / name, world_size=world)
        p.device = "H100-80GB"
        space = tt.knob_space_for(p)
        sets = space.neighbors(space.complete(p.setting)) + space.sample(random.Random(0), n=n)
        bad_rt = refused = 0
        jobs = []
        for s in sets:
            spec = tt.emit_torchtitan(p, s, world_size=world)
            back = tt.parse_torchtitan_argv(spec.argv, env=spec.env, base_dir=p.base_dir)
            back = back if back.world_size else tt.with_world(back, world)
            bad_rt += any(back.setting[k] != s[k] for k in s)
            if p.style == "cli":
                jobs.append((torchtitan03_args(p, spec.argv, spec.env), world))
            else:
                refused += bool(check_torchtitan(p, spec.argv, env=spec.env, world_size=world))
        if jobs:
            got = check_torchtitan03_many(jobs)
            refused += sum(bool(r) for r in got) if got is not None else 0
            by = "torchtitan 0.3.0" if got is not None else "(0.3 not installed)"
        else:
            by = "torchtitan 0.2.2" if tcheck.available() else "(not installed)"
        rows.append((f"torchtitan/{name}", len(sets), bad_rt, refused, by))
    w = max(len(r[0]) for r in rows)
    print(f"{'launch':<{w}}  valid settings  not read back  refused  checked by")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:>14}  {r[2]:>13}  {r[3]:>7}  {r[4]}")
    print(f"{'total':<{w}}  {sum(r[1] for r in rows):>14}  {sum(r[2] for r in rows):>13}  {sum(r[3] for r in rows):>7}")
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"({time.time() - t0:.0f} s)")
    raise SystemExit(rc)
