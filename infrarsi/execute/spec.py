"""LaunchSpec: everything an executor needs to start one trial, framework-free (defined in the types floor,
:mod:`infrarsi.trial.launch`)."""

from __future__ import annotations

from ..trial.launch import TRIAL_DIR, LaunchSpec

__all__ = ["TRIAL_DIR", "LaunchSpec"]
