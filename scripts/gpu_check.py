"""Verify every shipped kernel candidate on this device, benchmark the ones that pass against the reference,
torch.compile of the reference and Liger-Kernel's kernel for the same op, and write one table.

    python scripts/gpu_check.py --out OUT            # on a CUDA GPU (scripts/gpu_check.sh sets it up)
    python scripts/gpu_check.py --dry --out OUT      # the same steps on the CPU interpreter, small shapes

Targets (GPU only; a dry run fills the columns but judges nothing): every verified candidate at least as
fast as torch.compile of the reference (forward and forward+backward), within 10% of Liger-Kernel's, and
at >= 80% of the measured device copy bandwidth (every op here is memory-bound). Writes OUT/gpu_check.md
and OUT/gpu_check.json; exits 1 when a candidate fails verification or its benchmark is rejected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET_VS_LIGER = 1.10  # candidate time <= 1.10 x Liger's
TARGET_BANDWIDTH = 0.80  # of the measured copy bandwidth


def liger_impls(op: str):
    """Liger-Kernel's function for op, called with the reference's signature; None when not installed."""
    try:
        import torch

        if op == "rmsnorm":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction as F

            return lambda x, w, eps=1e-6: F.apply(x, w, eps)
        if op == "add_rmsnorm":
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as F

            return lambda x, r, w, eps=1e-6: F.apply(x, r, w, eps)
        if op == "swiglu":
            from liger_kernel.ops.swiglu import LigerSiLUMulFunction as F

            return lambda gate, up: F.apply(gate, up)
        if op == "cross_entropy":
            from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction as F

            return lambda logits, target, ignore_index=-100: F.apply(logits, target, None, ignore_index)[0]
        if op == "rope":
            from liger_kernel.ops.rope import LigerRopeFunction as F

            ks: dict = {}

            def rope(x, cos, sin):  # x (b, s, h, d): Liger takes (b, h, s, d) views of that storage, q and k
                b, s, h, d = x.shape
                key = (b, s, d, x.dtype, x.device)
                if key not in ks:  # a one-head k: Liger rotates q and k in one launch
                    ks[key] = torch.randn(b, s, 1, d, dtype=x.dtype, device=x.device).transpose(1, 2)
                return F.apply(x.transpose(1, 2), ks[key], cos, sin)[0].transpose(1, 2)

            return rope
    except ImportError:
        return None
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry", action="store_true", help="CPU interpreter, small shapes, no targets judged")
    p.add_argument("--out", default="gpu_check_out", help="folder for gpu_check.md / .json and the verify cache")
    p.add_argument("--ops", default=None, help="comma-separated ops (default: all)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per implementation (GPU 30, dry 2)")
    p.add_argument("--jobs", type=int, default=8, help="verifications at once (each its own process)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["INFRARSI_CACHE"] = str((out / "cache").resolve())

    import torch

    gpu = torch.cuda.is_available()
    if not gpu and not args.dry:
        print("gpu_check: no CUDA GPU here; run with --dry for the CPU rehearsal", file=sys.stderr)
        return 2
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from infrarsi.kernels.bench import bench, measured_peak_bandwidth
    from infrarsi.kernels.loader import OPS, list_candidates, load_reference
    from infrarsi.kernels.verify import device_kind, verify

    device = "cuda" if gpu else "cpu"
    reps = args.reps or (30 if gpu else 2)
    ops = args.ops.split(",") if args.ops else list(OPS)
    t_start = time.perf_counter()
    copy_gbps = measured_peak_bandwidth(device) / 1e9
    print(f"device {device_kind()}: measured copy bandwidth {copy_gbps:.0f} GB/s", flush=True)

    cands = [(op, c) for op in ops for c in list_candidates(op)]  # every variant of every file: FILE@VARIANT

    def one(item):
        op, cand = item
        t0 = time.perf_counter()
        r = verify(cand, op=op, use_cache=False)
        return op, cand, r, time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        verified = list(pool.map(one, cands))
    rows, failed = [], False
    compiled: dict = {}
    for op, cand, r, secs in verified:
        print(f"verify {op}/{cand.name}: {r.verdict} in {secs:.1f} s ({len(r.cases)} cases)", flush=True)
        row = {"op": op, "candidate": cand.name, "verdict": r.verdict, "verify_s": round(secs, 1),
               "reasons": r.reasons[:3]}
        if not r.passed:
            failed = True
            rows.append(row)
            continue
        others = {}
        if gpu:  # one torch.compile of the reference per op, shared by its candidates
            if op not in compiled:
                compiled[op] = torch.compile(load_reference(op).forward)
            others["compiled"] = compiled[op]
        lig = liger_impls(op)
        if lig is not None:
            others["liger"] = lig
        b = bench(cand, op, device=device, small=not gpu, reps=reps, warmup=1 if not gpu else 3, others=others,
                  compile_reference=False)
        liger_ms, liger_fb = b.others_ms.get("liger"), b.others_fwd_bwd_ms.get("liger")
        targets = []
        if gpu:
            if b.compiled_ms is None or b.candidate_ms > b.compiled_ms or (
                    b.compiled_fwd_bwd_ms is not None and b.candidate_fwd_bwd_ms > b.compiled_fwd_bwd_ms):
                targets.append("slower than torch.compile")
            if liger_ms is None:
                targets.append("no Liger time")
            elif b.candidate_ms > TARGET_VS_LIGER * liger_ms:
                targets.append(f"{b.candidate_ms / liger_ms:.2f}x Liger's time")
            if b.achieved_gbps < TARGET_BANDWIDTH * copy_gbps:
                targets.append(f"{b.achieved_gbps / copy_gbps:.0%} of copy bandwidth")
        failed = failed or not b.accepted
        row.update({"shape": b.shape, "cand_ms": b.candidate_ms, "eager_ms": b.reference_ms, "compiled_ms": b.compiled_ms,
                    "liger_ms": liger_ms, "cand_fb_ms": b.candidate_fwd_bwd_ms, "compiled_fb_ms": b.compiled_fwd_bwd_ms,
                    "liger_fb_ms": liger_fb, "gbps": b.achieved_gbps, "copy_gbps": copy_gbps,
                    "of_copy": b.achieved_gbps / copy_gbps, "rejected": b.rejected, "suspect": b.suspect,
                    "targets_missed": targets if gpu else ["not judged (dry run)"], "notes": b.notes})
        rows.append(row)
        print(f"bench {op}/{cand.name}: {b.candidate_ms:.4f} ms, {b.achieved_gbps:.0f} GB/s"
              + (f"; REJECTED: {b.rejected[0]}" if b.rejected else ""), flush=True)
    table = _markdown(rows, device_kind(), copy_gbps, dry=not gpu)
    (out / "gpu_check.md").write_text(table)
    (out / "gpu_check.json").write_text(json.dumps({"device": device_kind(), "copy_gbps": copy_gbps, "rows": rows,
                                                    "seconds": time.perf_counter() - t_start}, indent=1))
    print(table)
    return 1 if failed else 0


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.4f}"


def _markdown(rows, device: str, copy_gbps: float, *, dry: bool) -> str:
    head = (f"# Kernel check on {device}{' (dry run: CPU interpreter, small shapes)' if dry else ''}\n\n"
            f"Measured copy bandwidth {copy_gbps:.0f} GB/s. Times in ms, medians over fresh inputs.\n\n"
            "| op | candidate | verdict | verify s | shape | cand fwd | eager fwd | compiled fwd | Liger fwd | "
            "cand fwd+bwd | compiled fwd+bwd | Liger fwd+bwd | GB/s | of copy | targets missed | rejected |\n"
            "|" + "---|" * 16 + "\n")
    lines = []
    for r in rows:
        if r["verdict"] != "pass":
            lines.append(f"| {r['op']} | {r['candidate']} | **{r['verdict']}** | {r['verify_s']} | | | | | | | | | | | | "
                         f"{'; '.join(r['reasons'])[:120]} |")
            continue
        lines.append(f"| {r['op']} | {r['candidate']} | pass | {r['verify_s']} | {r['shape']} | {_ms(r['cand_ms'])} | "
                     f"{_ms(r['eager_ms'])} | {_ms(r['compiled_ms'])} | {_ms(r['liger_ms'])} | {_ms(r['cand_fb_ms'])} | "
                     f"{_ms(r['compiled_fb_ms'])} | {_ms(r['liger_fb_ms'])} | {r['gbps']:.1f} | {r['of_copy']:.0%} | "
                     f"{'; '.join(r['targets_missed']) or 'none'} | {'; '.join(r['rejected'])[:120] or '-'} |")
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
