"""Doctor: run the baseline, profile its phases, measure run-to-run noise (noise.json)."""

from .baseline import NOISE_JSON, DoctorError, DoctorResult, load_noise, run_doctor
from .noise import NoiseProfile, bootstrap_median_ci, cv, mde, noise_warning, repeats_for

__all__ = ["NOISE_JSON", "DoctorError", "DoctorResult", "NoiseProfile", "bootstrap_median_ci", "cv", "load_noise",
           "mde", "noise_warning", "repeats_for", "run_doctor"]
