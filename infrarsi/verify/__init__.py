"""Verification: what stands between a search's best settings and a promotion. The baseline measured close in time
(:mod:`.rebaseline`), the best settings rerun in A/B pairs with the baseline (:mod:`.reverify`), and the sequential
rule that promotes, stops or outranks a candidate on the pairs' speedup interval (:mod:`.speedup`).

The search (``infrarsi.search``) proposes; this package decides, from trials on disk alone.
"""
