"""Which knob of a coupled group the models leave out: the same knob whatever the knobs are called or in which order
the space lists them."""

from __future__ import annotations

import itertools
import random

from infrarsi.knobs import Constraint, Knob, KnobSpace
from infrarsi.search.derived import derived_knobs

WORLD = 64


def _space(order: list[str], names: dict[str, str]) -> KnobSpace:
    """Three split sizes capped at 8 and the remainder (every divisor of WORLD, default WORLD), whose product is WORLD,
    plus a free knob; listed in ``order``, called ``names``."""
    divisors = [d for d in range(1, WORLD + 1) if WORLD % d == 0]
    knobs = {"a": Knob(name=names["a"], kind="int", domain=[1, 2, 4, 8]),
             "b": Knob(name=names["b"], kind="int", domain=[1, 2, 4, 8]),
             "c": Knob(name=names["c"], kind="int", domain=[1, 2, 4]),
             "rest": Knob(name=names["rest"], kind="int", domain=divisors, default=WORLD),
             "free": Knob(name=names["free"], kind="bool")}
    n = names

    def product(s):
        p = s[n["a"]] * s[n["b"]] * s[n["c"]] * s[n["rest"]]
        return None if p == WORLD else f"product {p} != {WORLD}"

    return KnobSpace([knobs[k] for k in order], [Constraint("product", product)])


def test_the_remainder_of_a_product_is_derived_whatever_the_names_and_the_order():
    """Any one of four knobs whose product is fixed is determined by the other three; the one left out is the one with
    the most values (the remainder), for every order of the knobs and with names that say nothing."""
    keys = ["a", "b", "c", "rest", "free"]
    for i, order in enumerate(itertools.permutations(keys)):
        if i % 7:  # 120 orders; every 7th keeps the test short and still moves each knob to every position
            continue
        names = dict(zip(keys, random.Random(i).sample([f"k{j}" for j in range(5)], 5)))
        space = _space(list(order), names)
        pool = space.candidates(300, random.Random(i))
        assert derived_knobs(space, pool) == {names["rest"]}, (order, names)


def test_among_equal_domains_the_one_whose_default_holds_the_product_is_derived():
    """Four knobs with the same domain: the one whose default is its largest value (the default setting gives it the
    whole product) is derived, wherever it is listed."""
    dom = [1, 2, 4, 8]
    for first in range(4):
        knobs = [Knob(name=f"k{j}", kind="int", domain=dom, default=8 if j == first else 1) for j in range(4)]

        def product(s):
            p = s["k0"] * s["k1"] * s["k2"] * s["k3"]
            return None if p == 8 else f"product {p} != 8"

        space = KnobSpace(knobs, [Constraint("product", product)])
        assert derived_knobs(space, space.candidates(300, random.Random(first))) == {f"k{first}"}
