"""Setting identity: equal settings hash equally, and values are normalized by the knob's kind."""

from infrarsi.knobs import Knob, KnobSpace, Setting


def _space() -> KnobSpace:
    return KnobSpace([Knob(name="sp", kind="bool"), Knob(name="tp", kind="int", domain=(1, 2, 4), default=1),
                      Knob(name="attn", kind="categorical", domain=("flash", "unfused"))])


def test_equal_settings_have_equal_hashes():
    a, b = Setting({"sp": True}), Setting({"sp": 1})
    assert (a == b) == (hash(a) == hash(b))  # the Mapping contract: equal -> same hash
    assert a != b  # True and 1 are different JSON keys: different settings until a space normalizes them
    assert len({a, b}) == 2


def test_space_normalizes_by_kind_so_a_seeded_setting_is_not_proposed_twice():
    space = _space()
    proposed = space.complete({"sp": True, "tp": 4})
    seeded = space.complete({"sp": 1, "tp": 4})  # a bool knob's 1, as a bank row or an old JSON file may carry it
    assert seeded == proposed and hash(seeded) == hash(proposed)
    assert seeded["sp"] is True
    assert space.complete({"tp": 4.0}) != space.complete({"tp": 4})  # a float is another value (init refuses it)
    assert len({proposed, seeded}) == 1
    assert seeded.key() == proposed.key()


def test_comparison_with_a_plain_mapping_uses_the_same_identity():
    s = Setting({"tp": 2, "attn": "flash"})
    assert s == {"attn": "flash", "tp": 2}
    assert s != {"attn": "flash", "tp": 2.0}
    assert s != {"attn": "flash"}
