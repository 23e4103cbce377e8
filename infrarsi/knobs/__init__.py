"""Knobs: typed launch settings, the spaces they form, and the catalog of standard knobs."""

from .knob import Knob
from .setting import Setting
from .space import Constraint, Derived, KnobSpace, Violation

__all__ = ["Constraint", "Derived", "Knob", "KnobSpace", "Setting", "Violation"]
