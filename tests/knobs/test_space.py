"""KnobSpace drawing on sparse spaces: candidates beyond what rejection finds, and repair moves."""

import random
from collections import Counter

from infrarsi.knobs import Knob, KnobSpace


def world_space(world=64):
    """tp * pp * dp must equal the world size (about 1 product point in 8 is valid)."""
    sizes = [1, 2, 4, 8, 16, 32, 64]
    return KnobSpace([Knob(name="tp", kind="int", domain=[1, 2, 4, 8]),
                      Knob(name="pp", kind="int", domain=[1, 2, 4, 8]),
                      Knob(name="dp", kind="int", domain=sizes),
                      Knob(name="sp", kind="bool"),
                      *(Knob(name=f"flag{i}", kind="bool") for i in range(8))],
                     constraints=[lambda s: None if s["tp"] * s["pp"] * s["dp"] == world else "tp * pp * dp != world",
                                  lambda s: None if s["tp"] > 1 or not s["sp"] else "sp needs tp > 1"])


def test_candidates_grow_past_rejection_and_cover_the_valid_layouts():
    sp = world_space()
    rejected_only = sp.sample(random.Random(0), 2000, max_tries=2000)
    cands = sp.candidates(2000, random.Random(0))
    assert len(rejected_only) < 400 and len(cands) == 2000 == len(set(cands))
    assert all(sp.is_valid(s) for s in cands)
    layouts = Counter((s["tp"], s["pp"]) for s in cands)
    assert len(layouts) == 16  # every (tp, pp) has a valid dp: all are reached
    # uniform over valid settings: a (tp, pp) with tp > 1 has twice the settings of one with tp = 1 (sp free)
    wide = [n for (tp, _), n in layouts.items() if tp > 1]
    narrow = [n for (tp, _), n in layouts.items() if tp == 1]
    assert max(wide) < 2 * min(wide) and max(narrow) < min(wide)


def test_repair_moves_fix_every_rule_a_one_knob_change_breaks():
    sp = world_space()
    s = sp.complete({"tp": 2, "pp": 4, "dp": 8, "sp": True})
    plain = sp.neighbors(s)
    repaired = sp.neighbors(s, repair=True)
    assert set(plain) < set(repaired) and all(sp.is_valid(x) for x in repaired)
    # tp 2 -> 1 breaks two rules (world size, sp): it takes sp off and doubles dp or pp
    tp1 = {tuple(sorted((k, v) for k, v in x.items() if s[k] != v)) for x in repaired if x["tp"] == 1}
    assert (("dp", 16), ("sp", False), ("tp", 1)) in tp1 and (("pp", 8), ("sp", False), ("tp", 1)) in tp1
    assert not any(x["tp"] == 1 for x in plain)
