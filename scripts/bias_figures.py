"""The mean-signed-error (bias) statistic of the kernel checker on the shipped kernels and the honest corpus, per
op and dtype, against the checker's limit; and the biased adversary's. Sizes checker.BIAS_LIMITS.

    TRITON_INTERPRET=1 python scripts/bias_figures.py [--runs 2] [--out bias.txt]

Each run verifies every candidate afresh (fresh seeds, every family); a row is the largest |mean signed error| /
tolerance at the mean |reference| over every output and gradient of every case.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def worst(result) -> dict[str, float]:
    """dtype -> the largest bias statistic over the result's cases (outputs and gradients)."""
    out: dict[str, float] = {}
    for c in result.cases:
        for e in c.errors.values():
            if "bias" in e:
                out[c.dtype] = max(out.get(c.dtype, 0.0), e["bias"])
    return out


def main() -> int:
    from infrarsi.kernels.checker import BIAS_LIMITS
    from infrarsi.kernels.loader import OPS, list_candidates
    from infrarsi.kernels.verify import verify

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated file names to include (default: all)")
    a = ap.parse_args()
    cands = [(f"{op}/{c.name}", c, op) for op in OPS for c in list_candidates(op)]
    cands += [("cross_entropy/honest/ce_host_count.py", ROOT / "tests/kernels/honest/ce_host_count.py", "cross_entropy")]
    biased = ("rmsnorm/adversarial/constant_bias.py", ROOT / "tests/kernels/adversarial/constant_bias.py", "rmsnorm")
    rows = []
    for name, c, op in [*cands, biased]:
        if a.only and not any(s in name for s in a.only.split(",")):
            continue
        agg: dict[str, float] = {}
        codes: set[str] = set()
        for _ in range(a.runs if "constant_bias" not in name else 1):
            r = verify(c, op=op, use_cache=False)
            codes |= r.codes()
            for d, v in worst(r).items():
                agg[d] = max(agg.get(d, 0.0), v)
        rows.append((name, agg))
        print(f"{name:42s} " + "  ".join(f"{d} {v:.4f}" for d, v in sorted(agg.items()))
              + f"  verdict {r.verdict} {sorted(codes)}", flush=True)
    for d, limit in BIAS_LIMITS.items():
        honest = max((agg.get(d, 0.0) for n, agg in rows if "constant_bias" not in n), default=0.0)
        bad = max((agg.get(d, 0.0) for n, agg in rows if "constant_bias" in n), default=0.0)
        print(f"{d:9s} honest max {honest:.4f}  limit {limit}  (honest max / limit {honest / limit:.3f}); "
              f"constant_bias.py {bad:.4f} ({bad / limit:.1f}x the limit)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
