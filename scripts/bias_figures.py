"""The mean-signed-error (bias) statistic of the kernel checker on the shipped kernels and the honest corpus, per
op and dtype, against the checker's limit; and the biased adversary's. Sizes checker.BIAS_LIMIT.

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
    from infrarsi.kernels.checker import BIAS_LIMIT
    from infrarsi.kernels.loader import OPS, list_candidates, op_of
    from infrarsi.kernels.verify import verify

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated file names to include (default: all)")
    a = ap.parse_args()
    cands = [c for op in OPS for c in list_candidates(op)]
    cands += [ROOT / "tests/kernels/honest/ce_host_count.py"]
    biased = ROOT / "tests/kernels/adversarial/constant_bias.py"
    rows = []
    for c in [*cands, biased]:
        name = f"{op_of(c)}/{getattr(c, 'name', Path(str(c)).name)}"
        if a.only and not any(s in name for s in a.only.split(",")):
            continue
        agg: dict[str, float] = {}
        for _ in range(a.runs if c is not biased else 1):
            r = verify(c, use_cache=False)
            for d, v in worst(r).items():
                agg[d] = max(agg.get(d, 0.0), v)
            if c is biased:
                agg["verdict"] = r.codes()
        rows.append((name, agg))
        print(f"{name:40s} " + "  ".join(f"{d} {v:.4f}" if isinstance(v, float) else f"{d} {sorted(v)}"
                                          for d, v in sorted(agg.items())), flush=True)
    honest = [v for n, agg in rows if "constant_bias" not in n for d, v in agg.items() if isinstance(v, float)]
    print(f"honest max {max(honest, default=0):.4f}; limit {BIAS_LIMIT} "
          f"(margin x{BIAS_LIMIT / max(max(honest, default=0), 1e-12):.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
